"""The live round's student page in a real browser (Debian's chromium driven by Playwright):
30 students, each in its own browser context, join with the code, guess, vote and are the
sampler; the teacher's tallies equal what was sent, exactly; a reveal reaches every page within
1 s; the class's majority continues a real (tiny) model's run, its step marked as the class's
choice. A phone-sized context (360x640) saves the join, guess, vote, reveal and sampler
screens (looked at). A page served on IPv6 (::1) joins with nothing refused."""

from __future__ import annotations

import os
import random
import socket
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from word_models import WORDS as VOCAB
from word_models import word_tokenizer

from engine.classroom import live_messages
from engine.classroom.live import GUESS, MAJORITY, SAMPLER, VOTE, Distribution, LiveRound
from engine.classroom.live_model import peek
from engine.classroom.live_sampler import class_branch
from engine.classroom.live_server import LiveServer
from engine.drivers.workbench import RunRequest, Workbench
from engine.models.loading import DECODER_ONLY, ModelBundle
from engine.records import CLASS, Step
from engine.sampling.settings import SamplerSettings
from tiny_models import tiny_llama

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


@pytest.fixture(scope="module")
def bundle() -> ModelBundle:
    return ModelBundle(tiny_llama(5, vocab=len(VOCAB)), word_tokenizer(None), DECODER_ONLY,
                       torch.device("cpu"), torch.float32, "words", "test", 256, (2,))  # fmt: skip


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
def test_30_students_in_chromium_guess_vote_and_sample_the_tallies_exact(server, bundle):
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
            sampler_reveal_s = be_the_sampler(server, pages, bundle)
        finally:
            browser.close()
    print(f"\n30 browsers: reveal on every page in {guess_reveal_s:.3f} s (guess), "
          f"{vote_reveal_s:.3f} s (vote), {sampler_reveal_s:.3f} s (sampler)")  # fmt: skip
    assert guess_reveal_s < 1.0 and vote_reveal_s < 1.0 and sampler_reveal_s < 1.0
    assert not problems, problems


def be_the_sampler(server, pages, bundle) -> float:
    """The class votes as the sampler on a real model's next token; its majority is taken in
    the run (as the window does: the model's step, then the class's token there) and marked as
    the class's choice; every page shows the class's token. Returns the reveal's latency."""
    r, phone = server.round, pages[0]
    wb = Workbench()
    wb.adopt(bundle)
    settings = SamplerSettings(temperature=0, min_new_tokens=8)
    list(wb.start(RunRequest("the cat", settings=settings, limit=1, chat_template=False)))
    dist = peek(bundle, "the cat", False, [s.token_id for s in wb.session.history])
    r.ask(SAMPLER, "the cat " + wb.session.history[0].text, dist.top(5))
    server.push_all(live_messages.question(r.question))
    shown = r.question.choices
    want = next(i for i, c in enumerate(shown) if c.token_id != dist.top(1)[0].token_id)
    sent = [want if i < 18 else i % 5 for i in range(len(pages))]
    for page, choice in zip(pages, sent, strict=True):
        page.wait_for_selector("#choices button:visible")
        page.locator("#choices button").nth(choice).click()
        if page is phone:
            page.wait_for_selector("#sent:visible")
            page.screenshot(path=str(SHOTS / "6-sampler-vote.png"))
    until(lambda: r.answered() == len(pages))
    assert r.tally() == Counter(shown[c] for c in sent)
    token = r.class_token(MAJORITY, dist, random.Random(0))
    assert token == shown[want].token_id
    list(wb.step(RunRequest("the cat", settings=settings, chat_template=False)))
    model_step = wb.session.history[1]
    assert model_step.source == "greedy" and model_step.token_id != token
    (step,) = [x for x in class_branch(wb, 1, token, settings) if isinstance(x, Step)]
    assert (step.index, step.token_id, step.forced, step.source) == (1, token, True, CLASS)
    assert wb.session.history[1] is step  # the run goes on from the class's token
    assert [s.token_id for s in wb.session.history] == [wb.session.history[0].token_id, token]
    v = r.reveal(dist, token, {}, class_choice=token)
    latency = reveal_latency(server, pages, v)
    phone.screenshot(path=str(SHOTS / "7-reveal-sampler.png"))
    assert "the class chose it" in phone.inner_text("#picked")
    assert phone.inner_text("#reveal-label").startswith("The class's token")
    return latency


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.slow
def test_a_page_served_on_ipv6_joins_with_nothing_refused():
    sync_playwright = _browser_or_skip()
    if not _ipv6_loopback():
        pytest.skip("no IPv6 loopback here")
    server = LiveServer(LiveRound(), "::1", 0)
    url = server.start()
    problems: list[str] = []
    try:
        assert url.startswith("http://[::1]:")
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            try:
                page = browser.new_page()
                page.on("console", lambda m: problems.append(m.text)
                        if m.type in ("error", "warning") else None)  # fmt: skip
                page.goto(url)
                page.fill("#nick", "six")
                page.click("#join button")
                until(lambda: len(server.round.students) == 1)
                page.wait_for_selector("#me")
                assert page.inner_text("#me") == "six"
            finally:
                browser.close()
    finally:
        server.stop()
    assert not problems, problems
