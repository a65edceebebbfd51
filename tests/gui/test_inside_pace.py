"""The Inside tab at the pace of a click (issue 54, items 7 and 8), offscreen on a tiny model:
once a token's step was read, another token of the run costs the model one position (it read
the whole path up to the token for every click); the token clicked is read before the decision
strip; "Attribute to the inputs" shows its progress and a Stop that ends it and puts the page
back as it was, with no thread left running; the attention note says in plain words what
leaving out the first token did."""

from __future__ import annotations

import time

import numpy as np
import pytest
from conftest import load, run

from engine.internals import attribution
from engine.internals.records import AttentionView, StepInside
from gui.common.token_pane import COLOR_BY_DECISION
from gui.inside.pages import AttentionPage


@pytest.fixture
def ran(qtbot, window, tiny_dir):
    load(qtbot, window, tiny_dir)
    window.sampler.set_settings(window.sampler.settings().with_(temperature=0.8, seed=5,
                                                                max_new_tokens=16))  # fmt: skip
    window.prompt.setPlainText("Once upon a time")
    run(qtbot, window, window.generate)
    return window


def shown_token(qtbot, window, n: int) -> None:
    qtbot.waitUntil(lambda: f"Token {n} of the run" in window.inside.view.header.text()
                    and not window.runner.busy, timeout=30000)  # fmt: skip


def test_a_token_after_the_first_costs_one_position(qtbot, ran) -> None:
    window = ran
    window.tabs.setCurrentWidget(window.inside.view)
    shown_token(qtbot, window, 16)  # the last token: the run's positions are read
    seen: list[int] = []
    embed = window.bundle.model.get_input_embeddings()
    handle = embed.register_forward_hook(lambda _m, a, _o: seen.append(int(a[0].shape[-1])))
    try:
        for index in (4, 0, 9):
            window.pane.token_clicked.emit(index)
            shown_token(qtbot, window, index + 1)
    finally:
        handle.remove()
    assert seen == [1, 1, 1]  # one position per click, not the path up to the token
    shown = window.inside.results[window.inside.shown]
    assert shown.step == 9 and shown.attention is not None


def test_the_step_in_view_is_read_before_the_decision_strip(qtbot, window, tiny_dir) -> None:
    """A lesson's stage colours the output by decision layer and shows the Inside tab: when
    its run ends, the step in view is read first (the strip came first)."""
    load(qtbot, window, tiny_dir)
    window.tabs.setCurrentWidget(window.inside.view)
    combo = window.output.color_mode
    combo.setCurrentIndex(combo.findData(COLOR_BY_DECISION))
    window.sampler.set_settings(window.sampler.settings().with_(max_new_tokens=12))
    window.prompt.setPlainText("Once upon a time")
    jobs: list[str] = []
    window.runner.busy_changed.connect(lambda busy: busy and jobs.append(window.runner.job_name))
    run(qtbot, window, window.generate)
    qtbot.waitUntil(lambda: bool(window.pane.decisions) and window.inside.shown is not None
                    and not window.runner.busy, timeout=30000)  # fmt: skip
    assert jobs[:3] == ["generate", "inside", "decision strip"]


def test_stop_ends_the_attribution_and_puts_the_page_back(qtbot, ran, monkeypatch) -> None:
    """The first gradient pass waits for the Stop (at most 30 s): the job then ends within
    the pass's backward, the page shows what it showed before the button, no thread is left."""
    window = ran
    window.tabs.setCurrentWidget(window.inside.view)
    shown_token(qtbot, window, 16)
    page = window.inside.view.inputs
    window.inside.view.pages.setCurrentWidget(page)
    before = page.note.text()
    plain = attribution._watched

    def held(f, budget, progress, cancelled):  # noqa: ANN001, ANN202
        inner = plain(f, budget, progress, cancelled)

        def watched(*xs):  # noqa: ANN002, ANN202
            out = inner(*xs)
            end = time.monotonic() + 30
            while not cancelled() and time.monotonic() < end:
                time.sleep(0.01)
            return out

        return watched

    monkeypatch.setattr(attribution, "_watched", held)
    page.button.click()
    qtbot.waitUntil(lambda: window.runner.job_name == "attribution"
                    and page.progress.value() > 0, timeout=30000)  # fmt: skip
    assert page.stop.isVisible() and page.progress.isVisible()
    assert not page.button.isEnabled()
    with qtbot.waitSignal(window.runner.busy_changed, timeout=10000):
        page.stop.click()
    assert not window.runner.busy and not window.runner.thread_running()
    assert page.note.text() == before
    assert page.button.isEnabled() and not page.stop.isVisible()
    assert not page.progress.isVisible()
    # it runs again to the end after a Stop, with its line per round said on the page
    monkeypatch.setattr(attribution, "_watched", plain)
    said: list[str] = []
    window.runner.progress.connect(said.append)
    with qtbot.waitSignal(window.runner.job_done, timeout=60000):
        page.button.click()
    qtbot.waitUntil(lambda: not window.runner.busy, timeout=5000)
    assert any("of at most 256 steps" in line for line in said)
    assert "Completeness check" in page.note.text()


def test_the_attention_note_says_what_leaving_out_the_first_token_did(qtbot) -> None:
    """It read "the first token (100%) left out, the rest scaled to 100%" (issue 54, item 7)."""
    page = AttentionPage()
    qtbot.addWidget(page)
    heads = np.array([[[0.996, 0.003, 0.001]]])
    att = AttentionView(((1, "The"), (2, " dog"), (3, " it")), heads, heads[0, 0])
    page.show_inside(StepInside(0, 2, (4, " was"), None, att, None, 0.0))  # type: ignore[arg-type]
    note = page.note.text()
    assert "takes 100% of it" in note and "attention sink" in note
    assert "the other tokens&#x27; 0.4% is shown scaled up to 100%" in note
    assert "left out, the rest scaled" not in note
    assert page.plot.values[1:].sum() == pytest.approx(1.0)  # the bars: shares of the rest
    page.sink.setChecked(False)
    assert "sink" not in page.note.text()
    np.testing.assert_allclose(page.plot.values, heads[0, 0])
