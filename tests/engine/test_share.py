"""Share a run as one HTML page: the page's data and escaping, then a real headless browser
(Debian's chromium driven by Playwright) hovering and clicking tokens."""

import base64
import hashlib
import html
import json
import os
import re
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from transformers import ByT5Tokenizer

from engine.classroom.share import (
    DEFAULT_TOP_N,
    LABEL_CHARS,
    TIP_ROWS,
    band,
    run_to_html,
    write_run_html,
)
from engine.decode.session import GenerationSession
from engine.records import SAMPLING, Step
from engine.sampling.settings import SamplerSettings
from tiny_models import tiny_llama

CHROMIUM = os.environ.get("DECODING_LAB_CHROMIUM", "/usr/bin/chromium")
EVIL = '</script><img src=x onerror="window.pwned=1"><b id="pwn">&amp; </b>\u2028'
SETTINGS = SamplerSettings(temperature=0.9, top_p=0.9, max_new_tokens=24, seed=3)


@pytest.fixture(scope="module")
def steps() -> list[Step]:
    """A real run of a tiny model, with one token's text (and one candidate) made hostile."""
    tok = ByT5Tokenizer()
    session = GenerationSession(
        tiny_llama(), tok("Once upon")["input_ids"], SETTINGS, tokenizer=tok,
        eos_token_ids=(), top_n=30,
    )  # fmt: skip
    steps = [r for r in session.stream() if isinstance(r, Step)]
    assert len(steps) == 24
    s = steps[5]
    evil_cand = replace(s.candidates[1], text=EVIL)
    steps[5] = replace(s, text=EVIL, token_str=EVIL, candidates=(s.candidates[0], evil_cand)
                       + s.candidates[2:])  # fmt: skip
    return steps


def show(text: str) -> str:
    """What the page's script shows for a token (visible spaces, newlines, control bytes)."""
    if not text:
        return "\u2205"
    text = text.replace(" ", "\u2423").replace("\n", "\u21b5").replace("\t", "\u21e5")
    return re.sub(r"[\x00-\x1f\x7f]", lambda m: f"\\x{ord(m.group()):02x}", text)


def short(text: str) -> str:
    return text if len(text) <= LABEL_CHARS else text[: LABEL_CHARS - 1] + "\u2026"


def pct(p: float) -> str:
    return f"{100 * p:.{1 if p >= 0.1 else 2}f}%"


def _block(page: str, ident: str) -> str:
    m = re.search(rf'<script type="application/json" id="{ident}">(.*?)</script>', page, re.S)
    assert m, ident
    return m.group(1)


def test_share_page_embeds_the_run_safely(steps):
    page = run_to_html("Once <upon>", "tiny-llama", SETTINGS, steps, method=SAMPLING)
    # The hostile text never appears raw: escaped in the text, \u-escaped in the JSON.
    assert EVIL not in page and "<img" not in page and 'id="pwn"' not in page
    assert "&lt;/script&gt;&lt;img src=x onerror=&quot;window.pwned=1&quot;&gt;" in page
    assert page.count("</script>") == 2  # the data block's end and the script's end
    raw = _block(page, "run-data")
    assert "<" not in raw and ">" not in raw and "&" not in raw and "\u2028" not in raw
    data = json.loads(raw)
    assert data["model"] == "tiny-llama" and data["prompt"] == "Once <upon>"
    as_json = json.loads(json.dumps(SETTINGS.to_dict()))  # tuples arrive as lists
    assert data["settings"] == as_json and data["method"] == SAMPLING
    assert [s["token"] for s in data["steps"]] == [s.token_str for s in steps]
    first = data["steps"][0]
    assert len(first["candidates"]) == DEFAULT_TOP_N
    assert first["candidates"][0]["raw_prob"] == steps[0].candidates[0].raw_prob
    assert data["steps"][5]["candidates"][1]["text"] == EVIL
    assert "&lt;upon&gt;" in page  # the prompt, escaped


def test_share_page_csp_allows_only_its_own_script_and_style(steps):
    page = run_to_html("p", "m", {}, steps)
    csp = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', page).group(1)
    csp = html.unescape(csp)
    assert "default-src 'none'" in csp and "unsafe-inline" not in csp
    script = re.search(r"<script>(.*?)</script>", page, re.S).group(1)
    style = re.search(r"<style>(.*?)</style>", page, re.S).group(1)
    for kind, body in (("script-src", script), ("style-src", style)):
        digest = base64.b64encode(hashlib.sha256(body.encode()).digest()).decode()
        assert f"{kind} 'sha256-{digest}'" in csp
    assert "http://" not in page.replace("http://www.w3.org/2000/svg", "")
    assert "https://" not in page  # no CDN, nothing fetched


def test_share_colour_bands_and_legend(steps):
    assert [band(p) for p in (0.0, 0.0999, 0.1, 0.55, 0.95, 1.0, float("nan"))] == [
        0,
        0,
        1,
        5,
        9,
        9,
        0,
    ]
    page = run_to_html("p", "m", {}, steps)
    classes = re.findall(r'<span class="tok b(\d)" data-i="(\d+)"', page)
    assert [(int(b), int(i)) for b, i in classes] == [
        (band(s.raw_prob), i) for i, s in enumerate(steps)
    ]
    assert page.count('class="chip b') == 10


def test_share_write_run_html_is_atomic(tmp_path, steps):
    path = write_run_html(tmp_path / "run.html", "p", "m", SETTINGS, steps, title="A & B")
    text = path.read_text(encoding="utf-8")
    assert "<title>A &amp; B</title>" in text
    assert [p.name for p in tmp_path.iterdir()] == ["run.html"]


# -- a real browser ---------------------------------------------------------------------------


def _browser_or_skip():
    required = os.environ.get("DECODING_LAB_REQUIRE_BROWSER") == "1"
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        if required:
            raise
        pytest.skip("playwright is not installed (pip install -e '.[dev]')")
    if not Path(CHROMIUM).exists():
        if required:
            pytest.fail(f"DECODING_LAB_REQUIRE_BROWSER=1 but there is no browser at {CHROMIUM}")
        pytest.skip(f"no chromium at {CHROMIUM}: run .ci/system-deps (apt-get install chromium)")
    return sync_playwright


def test_share_page_in_a_headless_browser(tmp_path, steps):
    sync_playwright = _browser_or_skip()
    path = write_run_html(
        tmp_path / "run.html", "Once upon", "Tiny Llama", SETTINGS, steps, method=SAMPLING
    )
    problems: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1100, "height": 900})
            page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
            page.on(
                "console",
                lambda m: problems.append(m.text) if m.type in ("error", "warning") else None,
            )
            page.on("dialog", lambda d: (problems.append(f"dialog: {d.message}"), d.dismiss()))
            page.goto(path.as_uri())
            assert page.inner_text("#model") == "Tiny Llama"
            assert "Sampling" in page.inner_text("#method")
            assert "top_p\t0.9" in page.inner_text("#settings")

            # Hover a token: the tooltip lists that step's top candidates.
            assert page.locator("#tip").is_hidden()
            page.hover('#text .tok[data-i="2"]')
            assert page.locator("#tip").is_visible()
            rows = page.locator("#tip tr:not(.head)")
            assert rows.count() == TIP_ROWS
            step = steps[2]
            for k in range(TIP_ROWS):
                cells = rows.nth(k).locator("td").all_inner_texts()
                c = step.candidates[k]
                after = f"cut by {c.cut_by}" if c.cut_by else pct(c.prob)
                assert cells == [str(k + 1), show(c.text), pct(c.raw_prob), after]
            chosen = page.locator("#tip tr.chosen td").nth(1).inner_text()
            assert chosen == show(step.token_str)
            head = page.inner_text("#tip .tip-head")
            assert (
                head.startswith(f"Step 3: {show(step.token_str)}") and f"rank {step.rank}" in head
            )

            # Click another token (one whose top 20 has cut tokens): the chart shows that
            # step's distribution, best first, the picked token and the cut ones marked.
            j = next(
                i for i, s in enumerate(steps)
                if i > 5 and any(c.cut_by for c in s.candidates[:DEFAULT_TOP_N])
            )  # fmt: skip
            page.click(f'#text .tok[data-i="{j}"]')
            step = steps[j]
            bars = page.locator("#chart g.bar")
            assert bars.count() == min(DEFAULT_TOP_N, len(step.candidates))
            labels = page.locator("#chart g.bar > text:first-of-type").all_text_contents()
            assert labels == [short(show(c.text)) for c in step.candidates[:DEFAULT_TOP_N]]
            widths = [
                float(w) for w in page.locator("#chart rect.raw").evaluate_all(
                    "els => els.map(e => e.getAttribute('width'))"
                )
            ]  # fmt: skip
            top = max(max(c.raw_prob, c.prob) for c in step.candidates[:DEFAULT_TOP_N])
            for w, c in zip(widths, step.candidates, strict=False):
                assert w == pytest.approx(max(1.0, 420 * c.raw_prob / top), rel=1e-4)
            marked = page.locator("#chart rect.raw.chosen").count()
            in_top = any(c.token_id == step.token_id for c in step.candidates[:DEFAULT_TOP_N])
            assert marked == int(in_top)
            cut = page.locator("#chart rect.raw.cut").count()
            assert cut == sum(bool(c.cut_by) for c in step.candidates[:DEFAULT_TOP_N]) > 0
            assert page.locator(".tok.selected").get_attribute("data-i") == str(j)
            assert page.inner_text("#chart-title").startswith(
                f"Step {j + 1}: picked {show(step.token_str)}"
            )

            # The hostile token is text, shown as typed, and nothing it carried ran.
            assert page.locator("#pwn").count() == 0 and page.locator("img").count() == 0
            assert page.evaluate("window.pwned") is None
            assert page.locator('#text .tok[data-i="5"]').text_content() == EVIL
            page.hover('#text .tok[data-i="5"]')
            assert show(EVIL) in page.inner_text("#tip .tip-head")
            page.hover('#text .tok[data-i="4"]')
            page.click('#text .tok[data-i="5"]')
            evil_bar = page.locator("#chart g.bar").nth(1)
            assert evil_bar.locator("text").first.text_content() == short(show(EVIL))
            assert evil_bar.locator("title").text_content().startswith(show(EVIL) + ": model")
            shot = tmp_path / "share.png"
            page.screenshot(path=str(shot), full_page=True)
            assert shot.stat().st_size > 10_000
            keep = os.environ.get("DECODING_LAB_SCREENSHOTS")
            if keep:
                shutil.copy(shot, Path(keep) / "share-run.png")
        finally:
            browser.close()
    assert problems == []


def test_share_page_from_the_cli(tmp_path):
    """`decoding-lab-cli generate --html FILE` writes the page for the run it printed."""
    from main import cli

    folder = tmp_path / "tiny"
    tiny_llama().save_pretrained(folder)
    ByT5Tokenizer().save_pretrained(folder)
    out = tmp_path / "run.html"
    args = ["generate", "--model", str(folder), "--prompt", "Hi", "--temperature", "0",
            "--max-new-tokens", "6", "--device", "cpu", "--html", str(out)]  # fmt: skip
    assert cli(args) == 0
    page = out.read_text(encoding="utf-8")
    data = json.loads(_block(page, "run-data"))
    assert 1 <= len(data["steps"]) <= 6 and data["settings"]["temperature"] == 0.0
    assert data["prompt"] == "Hi" and data["method"] == SAMPLING
    assert page.count('class="tok b') == len(data["steps"])
    assert all(len(s["candidates"]) == DEFAULT_TOP_N for s in data["steps"])
    assert cli([*args[:-1], str(tmp_path / "no-such-dir" / "run.html")]) == 1
