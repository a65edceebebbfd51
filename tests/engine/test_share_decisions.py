"""The shared web page carries the decision layers (issue 33): the output again, each token
shaded by the band of its decision layer with the layer in its title, the layer in the hover
tooltip; hostile token text stays text; a page without decisions is the page it was."""

from __future__ import annotations

import re

from test_share import CHROMIUM, EVIL, SETTINGS, _browser_or_skip, steps  # noqa: F401

from engine.classroom.share import run_to_html, write_run_html
from engine.records import SAMPLING


def decisions_for(n: int) -> dict[int, int | None]:
    """Layers 0..30 and some never-top-1 tokens, one per step."""
    return {i: None if i % 5 == 4 else (7 * i) % 31 for i in range(n)}


def test_the_page_shades_each_token_by_its_decision_layer(steps) -> None:  # noqa: F811
    decided = decisions_for(len(steps))
    page = run_to_html("Once", "tiny", SETTINGS, steps, method=SAMPLING, decisions=decided,
                       layers=30)  # fmt: skip
    section = page[page.index('<div id="decided">') :].split("</div>")[0]
    spans = re.findall(r'<span class="tok (d\d|dn)" title="([^"]*)">', section)
    assert len(spans) == len(steps)
    for i, (cls, title) in enumerate(spans):
        d = decided[i]
        if d is None:
            assert (cls, title) == ("dn", "never the top choice")
        else:
            assert cls == f"d{min(9, int(10 * d / 30))}" and title == f"decided at layer {d} of 30"
    assert "<img" not in section and "&lt;/script&gt;" in section  # the hostile token as text
    plain = run_to_html("Once", "tiny", SETTINGS, steps, method=SAMPLING)
    assert '<div id="decided">' not in plain and '"decision_layer":' not in plain


def test_the_tooltip_names_the_decision_layer_in_a_browser(tmp_path, steps) -> None:  # noqa: F811
    sync_playwright = _browser_or_skip()
    decided = decisions_for(len(steps))
    path = write_run_html(tmp_path / "run.html", "Once", "tiny", SETTINGS, steps,
                          method=SAMPLING, decisions=decided, layers=30)  # fmt: skip
    problems: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1100, "height": 900})
            page.on("pageerror", lambda e: problems.append(str(e)))
            page.on("dialog", lambda d: (problems.append(d.message), d.dismiss()))
            page.goto(path.as_uri())
            page.hover('#text .tok[data-i="2"]')
            assert f"decided at layer {decided[2]} of 30" in page.inner_text("#tip .tip-head")
            page.hover('#text .tok[data-i="4"]')
            assert "never the top choice" in page.inner_text("#tip .tip-head")
            assert page.locator("#decided .tok").count() == len(steps)
            assert page.evaluate("window.pwned") is None
        finally:
            browser.close()
    assert problems == []
