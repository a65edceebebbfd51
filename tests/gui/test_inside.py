"""The Inside tab and the decision-layer colours (issue 33), offscreen on a tiny model: nothing
is computed while the tab is closed, the tab follows a click, the output's decision colours are
the engine's strip, input attribution runs on demand with its completeness check, and what
cannot be read inside (a served model) is said in the tab, not in a dialog; a scored text is
read with the Score view left open."""

from __future__ import annotations

import pytest
from conftest import load, run

from engine.internals.inspect import decision_strip, inspect_step, path_for
from gui.common.token_pane import COLOR_BY_DECISION


@pytest.fixture
def ran(qtbot, window, tiny_dir):
    load(qtbot, window, tiny_dir)
    window.sampler.set_settings(window.sampler.settings().with_(temperature=0.8, seed=5,
                                                                max_new_tokens=16))  # fmt: skip
    window.prompt.setPlainText("Once upon a time")
    jobs: list[str] = []
    window.runner.busy_changed.connect(lambda busy: busy and jobs.append(window.runner.job_name))
    run(qtbot, window, window.generate)
    return window, jobs


def settle(qtbot, window, name: str = "inside") -> None:
    qtbot.waitUntil(lambda: window.runner.job_name == name or window.inside.shown is not None,
                    timeout=5000)  # fmt: skip
    qtbot.waitUntil(lambda: not window.runner.busy and window.inside.shown is not None,
                    timeout=30000)  # fmt: skip


def test_nothing_is_read_inside_while_the_tab_is_closed(qtbot, ran) -> None:
    window, jobs = ran
    qtbot.wait(600)  # three polls of the tab
    window.select_step(3)
    qtbot.wait(600)
    assert jobs == ["generate"]
    window.tabs.setCurrentWidget(window.inside.view)
    settle(qtbot, window)
    qtbot.wait(600)  # the lens page: no rollout is read (gui.inside.rollout), nothing else
    assert jobs == ["generate", "inside"]


def test_the_tab_follows_a_click_and_equals_the_engine(qtbot, ran) -> None:
    window, _ = ran
    window.tabs.setCurrentWidget(window.inside.view)
    settle(qtbot, window)
    assert "Token 16 of the run" in window.inside.view.header.text()
    window.pane.token_clicked.emit(4)  # what a click on the fifth token sends
    qtbot.waitUntil(lambda: "Token 5 of the run" in window.inside.view.header.text(),
                    timeout=30000)  # fmt: skip
    bundle, steps = window.bundle, window.store.steps
    path = path_for(bundle, bundle.encode_prompt("Once upon a time", False), steps)
    shown = window.inside.results[window.inside.shown]
    want = inspect_step(bundle, path, 4)
    assert shown.lens.decision_layer == want.lens.decision_layer
    assert shown.lens.candidates == want.lens.candidates
    assert window.inside.view.grid.lens is shown.lens
    # going back to a step seen before takes no job
    jobs: list[str] = []
    window.runner.busy_changed.connect(lambda busy: busy and jobs.append("job"))
    window.pane.token_clicked.emit(15)
    qtbot.waitUntil(lambda: "Token 16 of the run" in window.inside.view.header.text(),
                    timeout=5000)  # fmt: skip
    assert jobs == []


def test_decision_colours_are_the_engines_strip(qtbot, ran) -> None:
    window, _ = ran
    combo = window.output.color_mode
    combo.setCurrentIndex(combo.findData(COLOR_BY_DECISION))
    qtbot.waitUntil(lambda: bool(window.pane.decisions) and not window.runner.busy,
                    timeout=30000)  # fmt: skip
    bundle, steps = window.bundle, window.store.steps
    prompt = bundle.encode_prompt("Once upon a time", False)
    strip = decision_strip(bundle, path_for(bundle, prompt, steps))
    assert [window.pane.decisions[i] for i in range(len(steps))] == list(strip.decision)
    assert "Decided at layer" in window.output.legend.text()
    colours = {window.pane.color_for(s).name() for s in steps}
    assert len(colours) >= 2  # a sampled run: decided and never-top-1 tokens differ


def test_input_attribution_on_demand(qtbot, ran) -> None:
    window, _ = ran
    window.tabs.setCurrentWidget(window.inside.view)
    settle(qtbot, window)
    page = window.inside.view.inputs
    with qtbot.waitSignal(window.runner.job_done, timeout=60000):
        page.button.click()
    qtbot.waitUntil(lambda: not window.runner.busy, timeout=5000)
    assert "Completeness check" in page.note.text() and "delta" in page.note.text()
    assert page.button.isEnabled() and not page.progress.isVisible()


def test_a_served_model_says_internals_need_the_weights(qtbot, ran, monkeypatch) -> None:
    window, _ = ran
    monkeypatch.setattr(window.models.bundle, "model", None)
    shown: list[str] = []
    monkeypatch.setattr(window, "show_error", shown.append)
    window.tabs.setCurrentWidget(window.inside.view)
    qtbot.waitUntil(lambda: "weights" in window.inside.view.header.text(), timeout=5000)
    assert "local model" in window.inside.view.header.text()
    assert shown == [] and not window.runner.busy


def test_a_scored_token_is_read_with_the_score_view_left_open(qtbot, ran) -> None:
    """Reading inside is not a run: the Score view stays, and so does the Inside tab."""
    window, _ = ran
    window.tabs.setCurrentWidget(window.inside.view)
    settle(qtbot, window)
    with qtbot.waitSignal(window.runner.job_done, timeout=30000):
        window.show_score("a cat sat on the mat", "Once")
    qtbot.waitUntil(lambda: not window.runner.busy, timeout=5000)
    window.score.select(2)
    qtbot.waitUntil(lambda: "Token 3 of the scored text" in window.inside.view.header.text(),
                    timeout=30000)  # fmt: skip
    qtbot.waitUntil(lambda: not window.runner.busy, timeout=30000)
    assert window.score.view.isVisible()
    assert window.tabs.currentWidget() is window.inside.view
    score = window.score.score
    path = path_for(window.bundle, score.context_ids, [t.token_id for t in score.tokens])
    want = inspect_step(window.bundle, path, 2)
    assert window.inside.results[window.inside.shown].lens.candidates == want.lens.candidates


def test_a_scored_text_is_coloured_by_decision_layer(qtbot, ran) -> None:
    window, _ = ran
    with qtbot.waitSignal(window.runner.job_done, timeout=30000):
        window.show_score("a cat sat on the mat", "Once")
    qtbot.waitUntil(lambda: not window.runner.busy, timeout=5000)
    view = window.score.view
    view.colour.setCurrentIndex(view.colour.findData(COLOR_BY_DECISION))
    qtbot.waitUntil(lambda: bool(view.pane.decisions) and not window.runner.busy,
                    timeout=30000)  # fmt: skip
    score = window.score.score
    path = path_for(window.bundle, score.context_ids, [t.token_id for t in score.tokens])
    strip = decision_strip(window.bundle, path)
    assert [view.pane.decisions[i] for i in range(len(score.tokens))] == list(strip.decision)
    assert "Decided at layer" in view.legend.text()
    assert not window.pane.decisions  # the run's pane was not asked


def test_hovering_the_lens_grid_shows_a_layers_numbers(qtbot, ran) -> None:
    """A hover over a cell of the lens grid shows that layer's probability and top 5 (it raised
    AttributeError on every move: QPoint has no toPoint)."""
    from PySide6.QtCore import QPointF
    from PySide6.QtWidgets import QToolTip

    window, _ = ran
    window.tabs.setCurrentWidget(window.inside.view)
    settle(qtbot, window)
    grid = window.inside.view.grid
    qtbot.waitUntil(lambda: grid.lens is not None, timeout=5000)
    vb = grid.plot.vb
    for layer in (0, grid.lens.layers):  # pytest-qt fails the test on an error in the slot
        grid.scene().sigMouseMoved.emit(vb.mapViewToScene(QPointF(layer, 0)))
    assert "Layer" in QToolTip.text() and "top 5" in QToolTip.text()
