"""The speed and entropy curves (one point per step), and the axis styling every plot shares.
Items are created once and updated with setData; only the GUI thread calls these."""

from __future__ import annotations

import html

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QEvent, Qt, QTimer
from PySide6.QtGui import QFont, QFontMetrics, QResizeEvent
from PySide6.QtWidgets import QWidget

from gui.common.events import OnEvent
from gui.common.fitted_axis import fit_axes
from gui.common.theme import Theme


def tick_font(widget: pg.PlotWidget, points: int) -> QFont:
    """Set both axes' tick labels to ``points`` and return the font."""
    font = QFont()
    font.setPointSize(points)
    for name in ("left", "bottom"):
        widget.getPlotItem().getAxis(name).setStyle(tickFont=font)
    return font


def still_plot(widget: pg.PlotWidget) -> pg.PlotItem:
    """A plot the class reads, not drives: no context menu, no auto-range button, no mouse pan
    or zoom, axes whose numbers never run into each other. Returns its plot item."""
    item = widget.getPlotItem()
    fit_axes(item)  # numbers never closer than their labels need (gui.common.fitted_axis)
    item.setMenuEnabled(False)
    item.hideButtons()
    item.getViewBox().setMouseEnabled(x=False, y=False)
    return item


def style_axes(widget: pg.PlotWidget, theme: Theme) -> None:
    """Background, axes and title in the theme's colours."""
    widget.setBackground(theme.plot_bg)
    plot = widget.getPlotItem()
    for name in ("left", "bottom"):
        axis = plot.getAxis(name)
        axis.setPen(pg.mkPen(theme.muted))
        axis.setTextPen(pg.mkPen(theme.text))
    plot.titleLabel.setAttr("color", theme.text)


def title_font(widget: pg.PlotWidget) -> QFont:
    """The font a plot's title is drawn in (pyqtgraph keeps its size as "<n>pt")."""
    font = QFont()
    size = str(widget.getPlotItem().titleLabel.opts.get("size", "")).removesuffix("pt")
    if size.replace(".", "", 1).isdigit():
        font.setPointSizeF(float(size))
    return font


def title_room(widget: pg.PlotWidget) -> int:
    """The pixels a plot's title has. pyqtgraph centres it in its cell, which spans the data's
    box and the (hidden) right axis's column and runs past the widget's right edge, so the
    room is twice the distance from that centre to the nearer edge of the widget (before the
    cell is laid out: the widget less its axes)."""
    item = widget.getPlotItem()
    margin = 2 * item.titleLabel.item.document().documentMargin()  # the rich text's own frame
    cell = item.titleLabel.mapRectToScene(item.titleLabel.boundingRect())
    if cell.width() > 1:
        half = min(cell.center().x(), widget.width() - cell.center().x())
        return max(40, int(2 * half - margin) - 4)
    axes = sum(item.getAxis(a).width() for a in ("left", "right") if item.getAxis(a).isVisible())
    return max(40, int(widget.width() - axes - margin) - 12)


def key_line(keys: list[tuple[str, str]], room: int, font: QFont) -> tuple[str, bool]:
    """A curves' key (a coloured mark and a name each, rich text) in ``room`` pixels: where
    the whole key is wider, each name gets an equal share, cut with "…". Returns the line and
    whether anything was cut."""
    metrics = QFontMetrics(font)
    mark = metrics.horizontalAdvance("━  ")
    cut = metrics.horizontalAdvance(" ".join(f"━  {n}" for n, _c in keys)) > room
    if cut:
        share = max(8, room // max(1, len(keys)) - mark)
        keys = [(metrics.elidedText(n, Qt.TextElideMode.ElideRight, share), c) for n, c in keys]
    line = " ".join(f"<span style='color:{c}'>━</span>&nbsp;{html.escape(n)}" for n, c in keys)
    return line, cut


class KeyTitle:
    """A plot whose title is its curves' key, kept within the plot's width at every resize
    and text size; while a name is cut, the whole key is the plot's tooltip."""

    def __init__(self, plot: pg.PlotWidget, keys: list[tuple[str, str]]) -> None:
        self.plot, self.keys = plot, list(keys)
        self.follow = OnEvent(plot, (QEvent.Type.Resize,), self.show)
        self.show()

    def show(self) -> None:
        line, cut = key_line(self.keys, title_room(self.plot), title_font(self.plot))
        self.plot.getPlotItem().setTitle(line)
        self.plot.setToolTip(" · ".join(n for n, _c in self.keys) if cut else "")


class AxisTitle:
    """An axis title in the longest of its ``forms`` that fits the axis (pyqtgraph centres it
    and cuts what runs past): "logit difference" on a tall plot, "Δ logit" on a short one, none
    where not even that fits (the view's words say the unit). Follows resizes and text size."""

    def __init__(self, plot: pg.PlotWidget, axis: str, forms: tuple[str, ...]) -> None:
        self.plot, self.axis, self.forms = plot, plot.getPlotItem().getAxis(axis), forms
        # fitted after the layout has given the axis its new length
        self.follow = OnEvent(plot, (QEvent.Type.Resize, QEvent.Type.FontChange), self.fit, True)
        self.fit()

    def fit(self) -> None:
        if self.axis.label is None:  # the plot was closed (pyqtgraph let go of its items)
            return
        length = self.axis.height() if self.axis.orientation in ("left", "right") else (
            self.axis.width())  # fmt: skip
        for form in self.forms:  # measured as drawn (the rich text, its style and margins)
            if form != self.axis.labelText or not self.axis.label.isVisible():
                self.axis.setLabel(form)
            if self.axis.label.boundingRect().width() <= length - 2:
                return
        self.axis.showLabel(False)


class SeriesPlot(pg.PlotWidget):
    """Per-step curves with a growing, explicitly set x range."""

    def __init__(
        self, title: str, y_label: str, series: list[tuple[str, str]], parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self.base_title = title
        plot = still_plot(self)
        self.setLabel("bottom", "step")
        self.setLabel("left", y_label)
        plot.getAxis("left").enableAutoSIPrefix(False)
        self.curves: dict[str, pg.PlotDataItem] = {}
        self.colors = dict(series)
        # Long runs have thousands of points: thin pens, no antialiasing, peak downsampling
        # keep a redraw to a few milliseconds.
        plot.setDownsampling(auto=True, mode="peak")
        plot.setClipToView(True)
        for name, color in series:
            curve = plot.plot([], [], name=name, pen=pg.mkPen(color, width=1.5))
            curve.setCurveClickable(False)
            curve.opts["antialias"] = False
            curve.opts["connect"] = "finite"  # a gap where a step has no value (the prompt's)
            self.curves[name] = curve
        self.marker = pg.InfiniteLine(angle=90, movable=False)
        self.addItem(self.marker)
        self.marker.hide()
        self._y_max = 1.0
        self.note = ""  # said after the key, e.g. "paced at 2 tok/s"
        self.explain = ""  # the tooltip's words on what the plot shows (setToolTip)
        self._title = title
        self._show_title()
        self.setXRange(0, 50, padding=0)
        # the title's cell moves as the left axis grows with its numbers: fitted again
        self._refit = QTimer(self)
        self._refit.setSingleShot(True)
        self._refit.timeout.connect(self._show_title)
        plot.titleLabel.geometryChanged.connect(lambda: self._refit.start(0))

    def set_theme(self, theme: Theme) -> None:
        style_axes(self, theme)
        self.marker.setPen(pg.mkPen(theme.chosen, width=1, style=pg.QtCore.Qt.PenStyle.DashLine))
        self._show_title()

    def set_text_size(self, points: int, presenting: bool) -> None:  # the display clock
        self.set_font_size(points if presenting else points - 1)

    def set_font_size(self, points: int) -> None:
        font = tick_font(self, points)
        plot = self.getPlotItem()
        for name in ("left", "bottom"):
            plot.getAxis(name).label.setFont(font)
        plot.titleLabel.setAttr("size", f"{points}pt")
        self._show_title()

    def set_series(
        self, x: np.ndarray, values: dict[str, np.ndarray], title: str | None = None
    ) -> None:
        for name, y in values.items():
            self.curves[name].setData(x, y)
        n = len(x)
        self.setXRange(0, max(50, n + 1), padding=0)
        peak = max(
            (float(np.nanmax(v)) for v in values.values() if np.isfinite(v).any()), default=0.0
        )
        if peak > self._y_max or peak < self._y_max / 4:
            self._y_max = max(1.0, peak * 1.25)
        self.setYRange(0, self._y_max, padding=0)
        if title is not None:
            self._title = title
            self._show_title()

    def mark(self, index: int | None) -> None:
        if index is None:
            self.marker.hide()
        else:
            self.marker.setPos(index)
            self.marker.show()

    def clear_series(self) -> None:
        for curve in self.curves.values():
            curve.setData([], [])
        self._y_max = 1.0
        self._title = self.base_title
        self._show_title()
        self.mark(None)

    def _show_title(self) -> None:
        """The title and the key, each cut to the plot's width with "…" where it is narrower
        than the text (a 1024 px projector, the presentation view); the whole of both is then
        the plot's tooltip."""
        if self.getPlotItem() is None:  # closed: pyqtgraph let go of its items
            return
        note = f" · {self.note}" if self.note else ""
        head = f"{self._title}{note}"
        room, font = title_room(self), title_font(self)
        shown = QFontMetrics(font).elidedText(head, Qt.TextElideMode.ElideRight, room)
        key, key_cut = key_line(list(self.colors.items()), room, font)
        self.getPlotItem().setTitle(f"{html.escape(shown)}<br>{key}")
        cut = f"{head}\n{' · '.join(self.colors)}" if shown != head or key_cut else ""
        super().setToolTip("\n\n".join(t for t in (cut, self.explain) if t))

    def setToolTip(self, tip: str) -> None:  # noqa: N802 - Qt's name: what the plot shows
        """What the plot shows (its tooltip); the whole title comes first while it is cut."""
        self.explain = tip
        self._show_title()

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 - Qt override
        super().resizeEvent(event)
        if hasattr(self, "_title"):  # pyqtgraph resizes once before __init__ ends
            self._show_title()

    def title_text(self) -> str:
        return self.getPlotItem().titleLabel.text

    def set_note(self, note: str) -> None:
        if note != self.note:
            self.note = note
            self._show_title()
