"""The live round's student page in a real browser (Debian's chromium driven by Playwright):
30 students, each in its own browser context, join with the code, guess and vote; the
teacher's tallies equal what was sent, exactly; a reveal reaches every page within 1 s. A
phone-sized context (360x640) saves the join, guess, vote and reveal screens (looked at)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pytest

from engine.classroom import live_messages
from engine.classroom.live import GUESS, VOTE, Distribution, LiveRound
from engine.classroom.live_server import LiveServer

CHROMIUM = os.environ.get("DECODING_LAB_CHROMIUM", "/usr/bin/chromium")
SHOTS = Path(__file__).resolve().parents[1] / "artifacts" / "live"
N = 30
WORDS = [" time", " day", " hill", " king", " dream"]


def _browser_or_skip():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("playwright is not installed (pip install -e '.[dev]')")
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no chromium at {CHROMIUM}")
    return sync_playwright


def dist() -> Distribution:
    probs = np.array([0.45, 0.25, 0.15, 0.1, 0.05], np.float32)
    return Distribution(probs, dict(enumerate(WORDS)))


@pytest.fixture
def server():
    s = LiveServer(LiveRound(), "127.0.0.1", 0)
    s.start()
    yield s
    s.stop()


WATCH = """() => { window.__shown = 0; const el = document.getElementById("reveal");
  new MutationObserver(() => { if (!el.hidden && !window.__shown) window.__shown = Date.now(); })
    .observe(el, {attributes: true}); }"""


def reveal_latency(server, pages, v) -> float:
    """Seconds from the server's send to the last page showing its reveal (the pages' clocks
    are this machine's)."""
    for page in pages:
        page.evaluate(WATCH)
    sent = time.time() * 1000
    server.push_to(live_messages.reveals(v, list(server.round.students)))
    shown = [0] * len(pages)
    for i, page in enumerate(pages):  # (the CSP refuses wait_for_function's eval: polled)
        until(lambda i=i, page=page: shown.__setitem__(i, page.evaluate("window.__shown"))
              or shown[i] > 0, 5.0)  # fmt: skip
    return (max(shown) - sent) / 1000


def until(check, timeout: float = 10.0) -> float:
    start = time.monotonic()
    while not check():
        if time.monotonic() - start > timeout:
            raise AssertionError("timed out")
        time.sleep(0.02)
    return time.monotonic() - start


@pytest.mark.slow
def test_30_students_in_chromium_guess_and_vote_the_tallies_exact(server):
    sync_playwright = _browser_or_skip()
    SHOTS.mkdir(parents=True, exist_ok=True)
    problems: list[str] = []
    r = server.round
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            pages = []
            for i in range(N):
                ctx = browser.new_context(viewport={"width": 360, "height": 640},
                                          device_scale_factor=2 if i == 0 else 1)  # fmt: skip
                page = ctx.new_page()
                page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
                page.on("console", lambda m: problems.append(m.text)
                        if m.type in ("error", "warning") else None)  # fmt: skip
                page.goto(server.url)
                pages.append(page)
            phone = pages[0]
            phone.fill("#nick", "<b>Ada</b>")
            phone.screenshot(path=str(SHOTS / "1-join.png"))
            for i, page in enumerate(pages):
                if i:
                    page.fill("#nick", f"student {i}")
                page.click("#join button")
            until(lambda: len(r.students) == N)
            assert "<b>Ada</b>" in {s.nick for s in r.students.values()}
            phone.wait_for_selector("#me")
            assert phone.inner_text("#me") == "<b>Ada</b>"  # text, not markup

            r.ask(GUESS, "Once upon a")
            server.push_all(live_messages.question(r.question))
            guesses = ["time", "Time", "day", "<img src=x>"]
            for i, page in enumerate(pages):
                page.wait_for_selector("#word:visible")
                page.fill("#word", guesses[i % 4])
                if i == 0:
                    page.screenshot(path=str(SHOTS / "2-guess.png"))
                page.click("#guess button")
            until(lambda: r.answered() == N)
            want = {"time": 16, "day": 7, "<img src=x>": 7}
            assert r.tally() == want
            v = r.reveal(dist(), 0, {"time": 0, "Time": 0, "day": 1, "<img src=x>": None})
            guess_reveal_s = reveal_latency(server, pages, v)
            phone.screenshot(path=str(SHOTS / "4-reveal-guess.png"))
            assert "1.2 bits" in phone.inner_text("#mine")  # -log2(0.45)

            r.ask(VOTE, "Once upon a time", dist().top(5))
            server.push_all(live_messages.question(r.question))
            shown = [c.text for c in r.question.choices]
            for i, page in enumerate(pages):
                page.wait_for_selector("#choices button:visible")
                page.locator("#choices button").nth(i % 5).click()
                if i == 0:
                    page.wait_for_selector("#sent:visible")
                    page.screenshot(path=str(SHOTS / "3-vote.png"))
            until(lambda: r.answered() == N)
            assert {c.text: n for c, n in r.tally().items()} == {t: N // 5 for t in shown}
            v = r.reveal(dist(), 0, {})
            vote_reveal_s = reveal_latency(server, pages, v)
            phone.screenshot(path=str(SHOTS / "5-reveal-vote.png"))
            assert sum(v.class_counts.values()) == N
        finally:
            browser.close()
    print(f"\n30 browsers: reveal on every page in {guess_reveal_s:.3f} s (guess), "
          f"{vote_reveal_s:.3f} s (vote)")  # fmt: skip
    assert guess_reveal_s < 1.0 and vote_reveal_s < 1.0
    assert not problems, problems
