"""The lesson "Where does the model decide?" (issue 33) on the bundled SmolLM2: each stage's
run ends with the Inside tab on the stage's token and page, and what its text tells the class
is what the views show (an early comma, a late number, a head that looks at the noun, the
push of the last layers)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import load, run

from engine.classroom.lessons import load_lesson
from engine.models.catalog import RESOURCES

pytestmark = pytest.mark.slow
LESSON = RESOURCES / "lessons" / "13-where-does-the-model-decide.yaml"


def stage(qtbot, window, i: int):  # noqa: ANN201
    window.classroom.panel.go_to(i)
    qtbot.waitUntil(lambda: window.bundle is not None and not window.runner.busy, timeout=180000)
    run(qtbot, window, window.generate, timeout=120000)
    want, prompt = window.classroom.stage.options["inside_step"], window.classroom.stage.prompt

    def shown() -> bool:  # the stage's token, read (a key holds the path up to its token)
        key = window.inside.shown
        return key in window.inside.results and len(key[-1]) == want and key[1] == prompt

    qtbot.waitUntil(lambda: shown() and not window.runner.busy, timeout=60000)
    return window.inside.results[window.inside.shown]


def test_the_lessons_stages_show_what_they_say(qtbot, window) -> None:
    load(qtbot, window, "smollm2-135m", timeout=180000)  # before the lesson sets the template
    window.classroom.open_lesson(load_lesson(LESSON))
    inside = stage(qtbot, window, 1)  # an early token: the comma after " five"
    assert window.tabs.currentWidget() is window.inside.view
    assert window.inside.view.pages.currentIndex() == 0  # the lens
    assert inside.step == 1 and inside.token[1] == ","
    assert inside.lens.decision_layer is not None and inside.lens.decision_layer <= 15
    late = stage(qtbot, window, 2)  # a late one: " six"
    assert late.token[1] == " six" and late.lens.decision_layer >= 28
    qtbot.waitUntil(lambda: bool(window.pane.decisions), timeout=60000)  # coloured by them
    assert window.pane.decisions[2] == late.lens.decision_layer
    pronoun = stage(qtbot, window, 3)
    page = window.inside.view.attention
    assert window.inside.view.pages.currentWidget() is page
    assert (page.layer.value(), page.head.value(), page.view.currentData()) == (14, 9, "head")
    row = pronoun.attention.heads[13, 8]
    texts = [t for _, t in pronoun.attention.sources]
    assert texts[int(np.argmax(row[1:])) + 1] == " dog"
    paris = stage(qtbot, window, 4)
    assert paris.token[1] == " Paris"
    dla = paris.attribution
    assert dla.blocks[20:].sum() > 0.5 * abs(dla.total)
    assert dla.parts_sum == pytest.approx(dla.total, abs=1e-3)
