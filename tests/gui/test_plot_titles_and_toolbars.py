"""Nothing a class should read hides at a projector's width: a plot's title and key are cut
with "…" to the room over its data (pyqtgraph centres them there and cuts what runs past the
widget), whole in the plot's tooltip; the toolbars take a second row rather than hide entries
behind "»" (a 280 px model picker hid Present and Live round at 1024 px, A+ and Export… at
1280)."""

from __future__ import annotations

from gui.common.series_plot import SeriesPlot


def _title_box(plot):
    label = plot.getPlotItem().titleLabel.item
    return label.mapRectToScene(label.boundingRect())


def test_a_long_title_is_cut_to_the_plot_and_whole_on_hover(qtbot):
    plot = SeriesPlot("Speed", "tok/s", [("running", "#0072b2"), ("this step", "#e69f00")])
    qtbot.addWidget(plot)
    plot.setToolTip("What the plot shows.")
    plot.resize(210, 150)
    plot.show()
    qtbot.waitExposed(plot)
    long = "1019.9 tok/s · 1 ms/token · paced to 40 tok/s"
    plot.set_series(__import__("numpy").arange(3.0), {"running": [1.0, 2, 3]}, long)
    qtbot.wait(20)
    box = _title_box(plot)
    assert box.left() >= -1 and box.right() <= plot.width() + 1, (box, plot.width())
    assert "…" in plot.title_text()
    assert long in plot.toolTip() and "What the plot shows." in plot.toolTip()
    plot.resize(900, 300)  # room again: the whole title, no "…", the tooltip its own words
    qtbot.wait(20)
    assert long in plot.title_text() and "…" not in plot.title_text()
    assert plot.toolTip() == "What the plot shows."


def test_no_toolbar_entry_hides_behind_the_chevron_at_1024_or_1280(qtbot, window):
    for width, height in ((1280, 720), (1024, 768)):
        window.resize(width, height)
        qtbot.wait(100)
        hidden = [
            a.text() or type(tb.widgetForAction(a)).__name__
            for tb in window.bars.toolbars.values() if tb.isVisible()
            for a in tb.actions()
            if a.isVisible() and not a.isSeparator()
            and tb.widgetForAction(a) is not None and not tb.widgetForAction(a).isVisible()
        ]  # fmt: skip
        assert window.width() <= width and not hidden, (width, window.width(), hidden)


def test_no_divider_of_the_window_collapses_a_column_to_nothing(qtbot, window):
    """Dragging a divider to its end left the prompt and output at 0 px, brought back only by
    finding a 4 px handle: every splitter of the window keeps each side."""
    from PySide6.QtWidgets import QSplitter

    splitters = window.findChildren(QSplitter)
    assert len(splitters) >= 3
    collapsible = [s.objectName() or type(s.parent()).__name__ for s in splitters
                   if s.childrenCollapsible()  # Qt's default per part: the splitter's
                   and any(s.isCollapsible(i) for i in range(s.count()))]  # fmt: skip
    assert not collapsible, collapsible


def test_an_axis_title_takes_its_short_form_on_a_short_axis(qtbot):
    """'logit difference' was 220 px on a 94 px axis in the presentation view ("logit differ")."""
    from gui.inside.plots import DlaPlot

    plot = DlaPlot()
    qtbot.addWidget(plot)
    plot.set_font_size(20)
    axis = plot.getPlotItem().getAxis("left")
    for height, expected in ((600, "logit difference"), (220, "Δ logit")):
        plot.resize(500, height)
        plot.show()
        qtbot.wait(60)
        assert axis.labelText == expected and axis.label.isVisible()
        assert axis.label.boundingRect().width() <= axis.height()
    plot.resize(500, 60)  # not even the short form: no title (the sentence above names it)
    qtbot.wait(60)
    assert not axis.label.isVisible()


def test_the_logit_attribution_key_is_in_its_sentence_not_over_the_bars(qtbot):
    import numpy as np
    import pyqtgraph as pg

    from engine.internals.records import LogitAttribution
    from gui.inside.plots import SUBLAYER_COLORS, DlaPlot
    from gui.inside.view import dla_text

    dla = LogitAttribution(token=(5, "a"), rival=(6, "b"), sublayers=("attention", "MLP"),
                           blocks=np.array([[0.5, -1.0], [2.0, 0.1]]), embedding=0.1, bias=0.0,
                           total=1.7)  # fmt: skip
    text = dla_text(dla)
    assert SUBLAYER_COLORS["attention"] in text and SUBLAYER_COLORS["MLP"] in text
    plot = DlaPlot()
    qtbot.addWidget(plot)
    plot.show_dla(dla)
    assert not [i for i in plot.scene().items() if isinstance(i, pg.LegendItem)]
