"""Issue 34, item 5 (text that matters is cut off): the presentation view shows the prompt on
one line (its end kept), every tab's name whole, the tree's rows wrapped; a sweep's outputs
and a comparison's read whole in a text pane; the Compare tab hides columns with nothing in
them (a sweep's rows had four "–" columns and the output cut to "na…")."""

from PySide6.QtGui import QFontMetrics
from PySide6.QtWidgets import QLabel
from test_tree_answers import step

from engine.records import MethodResult, RunStarted
from gui.shell.presentation import SHORT_TABS

STORY = (
    "Once upon a time, in a kingdom by the sea, there lived a dragon who collected "
    "lighthouses, and every night it polished their lamps until they shone like stars"
)


def presenting(qtbot, window):
    window.resize(1280, 720)
    window.set_presentation(True)
    qtbot.wait(50)


def test_the_presentation_view_shows_the_prompt(qtbot, window):
    window.prompt.setPlainText("Once upon a time, a dragon")
    presenting(qtbot, window)
    line = window.findChild(QLabel, "presentation_prompt")
    assert line is not None and line.isVisible()
    shown = line.shown_text()
    assert shown.startswith("Prompt: ") and shown.endswith("Once upon a time, a dragon"[-8:])
    if "…" in shown:  # too long for the line at 20 pt: cut at its start, before a word
        assert shown.startswith("Prompt: … ")
    window.prompt.setPlainText(STORY * 3)  # longer than the line: the start is cut
    shown = line.shown_text()
    assert shown.startswith("Prompt: … ") and shown.endswith("shone like stars")
    assert QFontMetrics(line.font()).horizontalAdvance(shown) <= line.contentsRect().width()
    window.set_presentation(False)
    assert not line.isVisible()


def test_every_tab_name_reads_whole_in_the_presentation_view(qtbot, window):
    bar = window.plots.tabs.tabBar()
    presenting(qtbot, window)
    full = [bar.tabToolTip(i) for i in range(bar.count())]  # the full name, each
    assert "Distribution" in full and "Experiments" in full
    for i in range(bar.count()):  # a tab narrower than its name's size is elided ("Tr…")
        assert bar.tabRect(i).width() >= bar.tabSizeHint(i).width(), bar.tabText(i)
    window.set_presentation(False)
    qtbot.wait(50)
    for i in range(bar.count()):  # back in the normal view: whole too (full names if they fit)
        assert bar.tabRect(i).width() >= bar.tabSizeHint(i).width(), bar.tabText(i)
        assert bar.tabText(i) in (full[i], SHORT_TABS.get(full[i]))


def test_tree_rows_wrap_in_the_presentation_view(qtbot, window):
    store = window.store
    store.push(RunStarted("sampling", "p", 2))
    words = STORY.split(" ")
    store.inbox.extend(step(i, 10 + i, 0.9, " " + w) for i, w in enumerate(words))
    window.drain()
    window.tabs.setCurrentWidget(window.plots.tree_view)
    window.tree.redraw(force=True)  # drawn in the normal view, then the view switches
    presenting(qtbot, window)
    window.tree.redraw(force=True)
    outline = window.plots.tree_view.outline
    item = outline.topLevelItem(0).child(0)
    # one line per row (the outline, issue 54), its whole text on hover; "Whole text" wraps
    assert " ".join(words) in item.toolTip(0)
    window.plots.tree_view.whole_text.setChecked(True)
    qtbot.waitUntil(lambda: outline.visualItemRect(item).height() > 0)
    width = outline.columnWidth(0) - 2 * outline.indentation()
    metrics = QFontMetrics(item.font(0).resolve(outline.font()))  # as drawn: 20 pt, bold
    lines = metrics.horizontalAdvance(item.text(0)) // max(1, width) + 1
    assert lines > 1 and "…" not in item.text(0)
    qtbot.waitUntil(lambda: outline.visualItemRect(item).height() >= lines * metrics.height())
    assert outline.isColumnHidden(4)  # log p: room for the text


def test_a_sweeps_rows_in_compare_read_whole(qtbot, window):
    view = window.compare_view
    texts = [f" named Erebo had a daughter number {i} who " + "flew far " * 12 for i in range(5)]
    view.show_results([MethodResult(method=f"temp {i / 2:g}", token_ids=(1, 2), text=t,
                                    seconds=0.5, forward_passes=30)
                       for i, t in enumerate(texts)])  # fmt: skip
    table = view.table
    hidden = [table.horizontalHeaderItem(c).text() for c in range(table.columnCount())
              if table.isColumnHidden(c)]  # fmt: skip
    assert hidden == ["×", "Accepted", "=greedy"]  # nothing but "–" in them
    assert table.verticalHeader().isHidden()
    detail = view.detail.toPlainText()
    assert all(" ".join(t.split()) in detail for t in texts)  # every output whole


def test_tab_names_shorten_beside_a_narrow_plots_column(qtbot, window):
    """With the Inside tab the normal view's bar at 1280x720 scrolled and cut "Experim…":
    short names when the full ones do not fit, the full ones when they do."""
    tabs = window.plots.tabs
    bar = tabs.tabBar()
    window.resize(1280, 720)
    window.splitter.setSizes([20, 1260])  # a wide plots column: the full names
    full = [window.presentation._tab_names.get(tabs.widget(i)) for i in range(tabs.count())]
    assert "Distribution" in full and "Experiments" in full
    qtbot.waitUntil(lambda: [bar.tabText(i) for i in range(bar.count())] == full)
    window.splitter.setSizes([810, 470])  # a narrow one
    qtbot.waitUntil(lambda: bar.tabText(0) != full[0])
    for i in range(bar.count()):
        assert bar.tabRect(i).width() >= bar.tabSizeHint(i).width(), bar.tabText(i)
        assert bar.tabToolTip(i) == full[i]
