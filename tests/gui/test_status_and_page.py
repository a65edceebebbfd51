"""Issue 54, item 7: the status bar reads its messages whole at 1280 px ("Done: 113 tokens; the
model ende…" was cut: the model's and the speed's extra parts now step aside, and hover shows
them whole); counts say "1 token", not "1 tokens"; the exported web page takes its colours from
the window's own palette (it was viridis and red outlines); lesson 13's attention stage points
at what its view shows in both the normal and the presentation view."""

import re

from PySide6.QtGui import QHelpEvent
from PySide6.QtWidgets import QApplication, QToolTip

from engine.classroom.lessons import bundled_lessons
from engine.classroom.share import run_to_html
from engine.records import Candidate, RunStarted, Step
from engine.tree import RunTree
from gui.common.theme import DARK, LIGHT
from gui.common.token_pane import COLOR_BY_PROB, decision_color
from gui.tree.view import PROB_COLOURS, prob_colour

MODEL = "SmolLM2 135M Instruct · decoder-only · cpu · float32"
RATE = "113 tokens · 5.8 tok/s · 172 ms/token · first token 0.46 s"
MESSAGES = (
    "Done: 113 tokens; reached the token limit (Continue for more).",
    "Done: 113 tokens; the model ended its answer.",
    "Decision layers of 113 tokens in 5.21 s.",
)


def step(i: int, p: float = 0.5, **kw) -> Step:
    cands = (Candidate(5, " a", p, p), Candidate(6, " b", p / 2, p / 2))
    return Step(i, 5, " a", " a", p, p, 1, cands, 2, 1.0, 1.0, 0.01, 10.0, **kw)


def test_status_messages_read_whole_at_1280_px(qtbot, window):
    window.resize(1280, 720)
    window.model_label.setText(MODEL)
    window.rate_label.setText(RATE)
    for message in MESSAGES:
        window.status_text.setText(message)
        QApplication.processEvents()
        assert window.status_text.shown_text() == message
    # what stepped aside is one hover away, whole
    rate = window.status.rate
    assert rate.text() == RATE and RATE.startswith(rate.shown_text()) and rate.shown_text()
    assert rate.shown_text().startswith("113 tokens · 5.8 tok/s")
    if rate.shown_text() != RATE:
        centre = rate.rect().center()
        event = QHelpEvent(QHelpEvent.Type.ToolTip, centre, rate.mapToGlobal(centre))
        QApplication.sendEvent(rate, event)
        assert RATE in QToolTip.text()
    window.status_text.setText("Ready.")  # a short message: the parts come back
    QApplication.processEvents()
    assert window.status.rate.shown_text() == RATE
    assert window.status.model.shown_text() == MODEL


def test_one_token_is_one_token(qtbot, window):
    store = window.store
    store.push(RunStarted("sampling", "p", 2))
    store.push(step(0))
    window.drain()
    window.views.redraw(busy=False)
    assert window.rate_label.text().startswith("1 token · "), window.rate_label.text()
    window.tabs.setCurrentWidget(window.plots.tree_view)
    window.tree.redraw(force=True)
    info = window.plots.tree_view.info.text()
    assert info.startswith("1 node, 1 leaf ·") and "here: 1 token," in info
    window.tree.goto(store.tree.cursor)
    window.tree.goto(0)
    window.tree.goto(1)
    assert "At node 1: 1 token." in window.status_text.text()
    assert "1 tokens" not in window.plots.tree_view.outline.topLevelItem(0).child(0).toolTip(0)


def variables(css: str) -> dict[str, str]:
    return dict(re.findall(r"--([\w-]+):\s*(#[0-9a-fA-F]{6})", css))


def test_the_web_page_takes_the_windows_colours(qtbot, window):
    tree = RunTree([1], "p")
    a = tree.add_child(0, 5, " a", 0.6, 0.6, -0.51)
    tree.add_child(a, 6, " b", 0.03, 0.03, -3.5)
    page = run_to_html("p", "m", {}, [step(0, 0.05), step(1, 0.95, forced=True)], tree=tree,
                       decisions={0: 3, 1: None}, layers=9)  # fmt: skip
    style = re.search(r"<style>(.*?)</style>", page, re.S).group(1)
    light, dark = style.split("@media (prefers-color-scheme: dark)")
    every = set(re.findall(r"#[0-9a-fA-F]{6}\b", style))
    assert every <= set(variables(light).values()) | set(variables(dark).values()), (
        "a colour written into the page's style outside the palette's variables"
    )
    pane = window.pane
    window.output.color_mode.setCurrentIndex(window.output.color_mode.findData(COLOR_BY_PROB))
    for theme, css in ((LIGHT, light), (DARK, dark)):
        window.set_theme(theme.name)
        found = variables(css)
        for k in range(10):  # each band's colour: the window's at the band's middle
            app_colour = pane.color_for(step(0, (k + 0.5) / 10)).name()
            assert found[f"b{k}"] == app_colour, (theme.name, k)
            assert found[f"d{k}"] == decision_color(theme, k, 9).name()
        assert found["dn"] == decision_color(theme, None, 9).name()
        assert found["forced"] == theme.forced and found["accent"] == theme.accent
        assert found["fg"] == theme.text and found["bg"] == theme.base
        assert found["raw"] == theme.raw_bar and found["after"] == theme.kept_bar
        for k, (low, colour, _label) in enumerate(PROB_COLOURS):  # the Tree tab's key
            assert found[f"t{k}"] == colour == prob_colour(low)
    assert 'class="tok b9 f"' in page  # the token you chose, in the window's "chosen by you"
    assert "viridis" not in page.lower()


def test_lesson_13_stage_4_points_at_what_its_view_shows(qtbot, window):
    lesson = next(les for les in bundled_lessons() if les.path.name.startswith("13-"))
    stage = lesson.stages[3]
    assert stage.options.get("inside_page") == "attention"
    page = window.inside.view.attention
    for presenting in (False, True):
        window.set_presentation(presenting)
        words = f"{stage.text} {stage.point_at}".lower()
        if "plot" in words or "bars" in words:
            assert not page.plot.isHidden(), (presenting, stage.point_at)
        if "shaded" in words:
            assert not page.text.isHidden()
    window.set_presentation(False)
