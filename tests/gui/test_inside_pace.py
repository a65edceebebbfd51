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
from engine.internals import reader as reader_module
from engine.internals.inspect import inspect_step, path_for
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
    assert jobs[:3] == ["generate", "inside", "decision strip"]  # the rollout follows them


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


def test_the_first_view_after_a_run_is_one_position_and_its_rollout_follows(
    qtbot, ran, monkeypatch
) -> None:
    """Issue 54: the first view of a token read the whole path (1.9 s at token 512). It takes
    the run's keys and values from its session now: one position for the step, then the
    rollout's rows in short passes, then the step again with its rollout, equal to the full
    pass's. A click meanwhile stops the rollout job and is drawn first."""
    window = ran
    monkeypatch.setattr(reader_module, "ROWS_CHUNK", 2)
    seen: list[int] = []
    embed = window.bundle.model.get_input_embeddings()
    handle = embed.register_forward_hook(lambda _m, a, _o: seen.append(int(a[0].shape[-1])))
    jobs: list[str] = []
    window.runner.busy_changed.connect(lambda busy: busy and jobs.append(window.runner.job_name))
    try:  # the attention page, which shows the rollout first
        window.inside.view.pages.setCurrentWidget(window.inside.view.attention)
        window.tabs.setCurrentWidget(window.inside.view)
        qtbot.waitUntil(lambda: jobs[-1:] == ["inside rollout"] and not window.runner.busy,
                        timeout=30000)  # fmt: skip
    finally:
        handle.remove()
    assert jobs == ["inside", "inside rollout"] and seen[0] == 1  # the step: one position
    assert max(seen[1:-1]) <= 2 and seen[-1] == 1  # rows in short passes, the step again
    bundle, steps = window.bundle, window.store.steps
    path = path_for(bundle, bundle.encode_prompt("Once upon a time", False), steps)
    shown = window.inside.results[window.inside.shown]
    assert not shown.attention.rollout_pending
    want = inspect_step(bundle, path, 15).attention.rollout
    np.testing.assert_allclose(shown.attention.rollout, want, atol=1e-5)
    assert window.inside.view.attention.inside is shown  # drawn again, with its rollout


def test_a_click_stops_the_rollout_job_and_is_drawn_first(qtbot, ran, monkeypatch) -> None:
    window = ran
    rows = reader_module.PathReader.read_rows
    held = []

    def slow(self, upto, cancelled=None):  # noqa: ANN001, ANN202
        held.append(upto)
        end = time.monotonic() + 30  # the first rollout job is held until it is stopped
        while len(held) == 1 and cancelled and not cancelled() and time.monotonic() < end:
            time.sleep(0.01)
        return rows(self, upto, cancelled)

    monkeypatch.setattr(reader_module.PathReader, "read_rows", slow)
    window.inside.view.pages.setCurrentWidget(window.inside.view.attention)
    window.tabs.setCurrentWidget(window.inside.view)
    qtbot.waitUntil(lambda: window.runner.job_name == "inside rollout", timeout=30000)
    started = time.monotonic()
    window.pane.token_clicked.emit(4)
    shown_token(qtbot, window, 5)
    assert time.monotonic() - started < 10  # not the 30 s the rollout job would have held
    assert window.inside.results[window.inside.shown].step == 4
    qtbot.waitUntil(lambda: not window.inside.results[window.inside.shown].attention
                    .rollout_pending and not window.runner.busy, timeout=30000)  # fmt: skip
    # token 16's rollout stopped, token 5's read after its view (the job asks, then the step)
    assert held[0] > held[1] and set(held[1:]) == {held[1]}
    assert window.inside.results[window.inside.shown].attention.rollout is not None


def test_the_attention_page_says_the_rollout_follows(qtbot) -> None:
    page = AttentionPage()
    qtbot.addWidget(page)
    heads = np.array([[[0.5, 0.3, 0.2]]])
    att = AttentionView(((1, "The"), (2, " dog"), (3, " it")), heads, None, rollout_pending=True)
    page.show_inside(StepInside(0, 2, (4, " was"), None, att, None, 0.0))  # type: ignore[arg-type]
    assert page.view.currentData() == "rollout"
    assert "Rollout follows" in page.note.text() and "2 tokens before" in page.note.text()
    assert len(page.plot.values) == 0
    page.view.setCurrentIndex(page.view.findData("mean"))
    np.testing.assert_allclose(page.plot.values[1:], [0.6, 0.4])  # the sink left out


def test_a_job_queued_for_the_end_of_a_run_goes_before_the_inside_tabs(
    qtbot, window, tiny_dir
) -> None:
    """A job queued for the end of the run (a lesson's next stage, the live round's reveal)
    starts before the tab reads the last token (the tab asks on its poll, after every other
    part's handler of the run's end), not refused as busy."""
    load(qtbot, window, tiny_dir)
    window.tabs.setCurrentWidget(window.inside.view)
    window.sampler.set_settings(window.sampler.settings().with_(max_new_tokens=8))
    window.prompt.setPlainText("Once upon a time")
    jobs: list[str] = []
    window.runner.busy_changed.connect(lambda busy: busy and jobs.append(window.runner.job_name))
    refused: list[str] = []
    window.runner.failed.connect(refused.append)
    started: list[bool] = []
    window.generate()
    window.jobs.after_idle(lambda: started.append(
        window.runner.job("queued", lambda _j, _b: 1, lambda _r: None)))  # fmt: skip
    qtbot.waitUntil(lambda: "inside" in jobs and not window.runner.busy, timeout=30000)
    assert started == [True] and not refused
    assert jobs[:3] == ["generate", "queued", "inside"]
