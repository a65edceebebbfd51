"""The speed and entropy curves (one point per step), and the axis styling every plot shares.
Items are created once and updated with setData; only the GUI thread calls these."""

from __future__ import annotations

import html

import numpy as np
import pyqtgraph as pg
from PySide6.QtGui import QFont
from PySide6.QtWidgets import QWidget

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
    or zoom. Returns its plot item."""
    item = widget.getPlotItem()
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
        self._title = title
        self._show_title()
        self.setXRange(0, 50, padding=0)

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

    def key_html(self) -> str:
        """The curves' key, in the title above the plot (never on the data)."""
        return " ".join(
            f"<span style='color:{color}'>━</span>&nbsp;{html.escape(name)}"
            for name, color in self.colors.items()
        )

    def _show_title(self) -> None:
        note = f" · {html.escape(self.note)}" if self.note else ""
        self.getPlotItem().setTitle(f"{html.escape(self._title)}{note}<br>{self.key_html()}")

    def title_text(self) -> str:
        return self.getPlotItem().titleLabel.text

    def set_note(self, note: str) -> None:
        if note != self.note:
            self.note = note
            self._show_title()
