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


def test_a_source_plots_token_labels_never_run_into_each_other(qtbot):
    """The attention and input bars labelled every 2nd of 47 tokens at any width: 8-character
    labels ran into each other ('<extra s…<0xC…') at 1280x720. Each label now stands at least
    its width from the next, at every width and text size, and a wider plot labels more."""
    import numpy as np
    from PySide6.QtGui import QFontMetrics

    from gui.inside.plots import SourcePlot

    plot = SourcePlot()
    qtbot.addWidget(plot)
    labels = [f"<extra_id_{i}>" if i % 3 else "p" for i in range(47)]
    plot.show_values(labels, np.linspace(0.01, 0.2, 47), "share")
    plot.show()
    shown = {}
    for width, points in ((520, 10), (520, 20), (1400, 10)):
        plot.set_font_size(points)
        plot.resize(width, 240)
        qtbot.wait(60)
        axis = plot.getPlotItem().getAxis("bottom")
        ticks = axis._tickLevels[0]
        metrics = QFontMetrics(axis.style["tickFont"])
        per_bar = plot.getPlotItem().vb.width() / 47
        for (a, text), (b, _) in zip(ticks, ticks[1:], strict=False):
            assert (b - a) * per_bar >= metrics.horizontalAdvance(text), (width, points, text)
        shown[(width, points)] = len(ticks)
    assert shown[(1400, 10)] > shown[(520, 10)] > shown[(520, 20)] >= 1


def test_no_plots_numbers_run_into_each_other_on_a_short_axis(qtbot):
    """pyqtgraph draws three numbers on any axis: '2 1 0' touched on the presentation view's
    60 px logit-attribution chart at 20 pt. Every still plot's axes (gui.common.fitted_axis)
    now step their spacing up until each label has its room; a long axis keeps pyqtgraph's."""
    import pyqtgraph as pg
    from audit_probe import drawn_labels  # the screen audit's reading of an axis

    from gui.common.series_plot import still_plot, tick_font

    plot = pg.PlotWidget()
    qtbot.addWidget(plot)
    still_plot(plot)
    plot.plot([0, 1, 2, 3], [-0.8, 2.5, 0.1, 1.0])
    tick_font(plot, 20)
    plot.show()
    counts = {}
    for width, height in ((120, 60), (200, 100), (400, 200), (900, 500)):
        plot.resize(width, height)
        qtbot.wait(30)
        for name in ("left", "bottom"):
            labels = drawn_labels(plot.getPlotItem().getAxis(name))
            assert labels, (name, width, height)
            for i, (a, text) in enumerate(labels):
                crowded = [t for b, t in labels[i + 1 :] if a.intersects(b)]
                assert not crowded, (name, width, height, text, crowded)
            counts[name, height] = len(labels)
    assert counts["left", 500] > counts["left", 100] >= 1
