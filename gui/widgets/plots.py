"""pyqtgraph plots. Items are created once and updated with setData / setOpts; ranges are set
explicitly (no auto-range per frame). Only the GUI thread calls these."""

from __future__ import annotations

import html

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, Signal
from PySide6.QtGui import QColor, QFont, QFontMetrics
from PySide6.QtWidgets import QWidget

from engine.records import Step
from gui.theme import LIGHT, Theme

pg.setConfigOptions(antialias=True, useOpenGL=False)


X_LIMITS = (0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0)  # the probability axis ends at one of these


def _short(text: str, limit: int = 14) -> str:
    shown = repr(text)[1:-1]  # escapes newlines and tabs, keeps spaces
    shown = shown.replace(" ", "␣")
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"


class DistributionPlot(pg.PlotWidget):
    """Top-N candidates of one step as horizontal bars: raw probability, probability after the
    sampler, tokens cut by the filters in grey, the chosen token outlined, a line where the cut
    falls. Click a bar to choose that token (``bar_clicked(step_index, token_id)``)."""

    bar_clicked = Signal(int, int)

    def __init__(self, parent: QWidget | None = None, top_n: int = 20) -> None:
        super().__init__(parent)
        self.setObjectName("distribution_plot")
        self.top_n = top_n
        self.step: Step | None = None
        self._x_upper = 1.0
        self.theme = LIGHT
        plot = self.getPlotItem()
        plot.setMenuEnabled(False)
        plot.hideButtons()
        vb = plot.getViewBox()
        vb.setMouseEnabled(x=False, y=False)
        vb.invertY(True)
        self.setXRange(0, self._x_upper, padding=0.02)
        self.setLabel("bottom", "probability")
        plot.getAxis("bottom").enableAutoSIPrefix(False)
        plot.getAxis("left").setStyle(hideOverlappingLabels=False)  # every token gets its label
        self.raw_kept = pg.BarGraphItem(x0=[], y=[], height=0.4, width=[])
        self.raw_cut = pg.BarGraphItem(x0=[], y=[], height=0.4, width=[])
        self.processed = pg.BarGraphItem(x0=[], y=[], height=0.4, width=[])
        self.chosen = pg.BarGraphItem(x0=[], y=[], height=0.9, width=[])
        self.cut_line = pg.InfiniteLine(angle=0, movable=False)
        self.cut_label = pg.TextItem(anchor=(1, 0))
        for item in (self.raw_kept, self.raw_cut, self.processed, self.chosen, self.cut_line):
            self.addItem(item)
        self.addItem(self.cut_label)
        self.legend = plot.addLegend(offset=(-10, -10))
        self.legend.addItem(self.raw_kept, "model's probability")
        self.legend.addItem(self.processed, "after the sampler")
        self.legend.addItem(self.raw_cut, "cut by a filter")
        self.scene().sigMouseClicked.connect(self._clicked)
        self.set_theme(LIGHT)
        self.set_step(None)

    def set_theme(self, theme: Theme) -> None:
        self.theme = theme
        style_axes(self, theme)
        self.raw_kept.setOpts(brush=pg.mkBrush(theme.raw_bar), pen=pg.mkPen(None))
        self.raw_cut.setOpts(brush=pg.mkBrush(theme.cut_bar), pen=pg.mkPen(None))
        self.processed.setOpts(brush=pg.mkBrush(theme.kept_bar), pen=pg.mkPen(None))
        self.chosen.setOpts(brush=pg.mkBrush(None), pen=pg.mkPen(theme.chosen, width=3))
        self.cut_line.setPen(pg.mkPen(theme.chosen, width=2, style=pg.QtCore.Qt.PenStyle.DashLine))
        self.cut_label.setColor(QColor(theme.chosen))
        self.legend.setLabelTextColor(theme.text)
        if self.step is not None:
            self.set_step(self.step)

    def set_font_size(self, points: int) -> None:
        font = tick_font(self, points)
        plot = self.getPlotItem()
        self._tick_font = font
        self.cut_label.setFont(font)
        plot.titleLabel.setAttr("size", f"{points + 1}pt")
        if self.step is not None:
            self.set_step(self.step)

    def set_top_n(self, n: int) -> None:
        self.top_n = n
        if self.step is not None:
            self.set_step(self.step)

    def set_step(self, step: Step | None) -> None:
        self.step = step
        plot = self.getPlotItem()
        if step is None:
            for item in (self.raw_kept, self.raw_cut, self.processed, self.chosen):
                item.setOpts(x0=[], y=[], width=[])
            self.cut_line.hide()
            self.cut_label.setText("")
            plot.getAxis("left").setTicks([[]])
            plot.setTitle(None)
            self.setYRange(-0.6, self.top_n - 0.4, padding=0)
            return
        cands = step.candidates[: self.top_n]
        n = len(cands)
        y = np.arange(n, dtype=float)
        raw = np.array([c.raw_prob for c in cands])
        proc = np.array([c.prob for c in cands])
        cut = proc <= 0
        self.raw_kept.setOpts(
            x0=np.zeros((~cut).sum()), y=y[~cut] - 0.2, width=raw[~cut], height=0.4
        )
        self.raw_cut.setOpts(x0=np.zeros(cut.sum()), y=y[cut] - 0.2, width=raw[cut], height=0.4)
        self.processed.setOpts(x0=np.zeros(n), y=y + 0.2, width=proc, height=0.4)
        where = [i for i, c in enumerate(cands) if c.token_id == step.token_id]
        if where:
            i = where[0]
            self.chosen.setOpts(x0=[0], y=[i], width=[max(raw[i], proc[i])], height=0.9)
        else:
            self.chosen.setOpts(x0=[], y=[], width=[])
        top = max(float(raw.max(initial=0)), float(proc.max(initial=0)))
        upper = next(u for u in X_LIMITS if u >= min(1.0, top * 1.1))
        if self._x_upper != upper:
            self._x_upper = upper
            self.setXRange(0, upper, padding=0.02)
        # The cut falls where the kept prefix ends (when the kept tokens are a prefix by rank).
        first_cut = int(np.argmax(cut)) if cut.any() else None
        if first_cut is not None and not cut[first_cut:].all():
            first_cut = None
        if first_cut is not None and first_cut > 0:
            self.cut_line.setPos(first_cut - 0.5)
            self.cut_line.show()
            self.cut_label.setText(f"cut: {step.survivors} kept")
            # at the right edge; above the line in the lower half, clear of the legend
            self.cut_label.setAnchor((1, 1) if first_cut > n / 2 else (1, 0))
            self.cut_label.setPos(QPointF(0.98 * upper, first_cut - 0.5))
        else:
            self.cut_line.hide()
            self.cut_label.setText("")
        ticks = [(i, f"{i + 1}. {_short(c.text)}") for i, c in enumerate(cands)]
        axis = plot.getAxis("left")
        axis.setTicks([ticks])
        # wide enough for the longest label: pyqtgraph drops labels that do not fit
        metrics = QFontMetrics(getattr(self, "_tick_font", QFont()))
        needed = max((metrics.horizontalAdvance(t) for _, t in ticks), default=40) + 16
        # Width and range change in steps, not with every token: each change re-lays out the
        # plot and paints it again (and a steady axis is easier to read on a projector).
        if needed > axis.width() or needed < axis.width() - 60:
            axis.setWidth(needed)
        self.setYRange(-0.6, max(n, self.top_n) - 0.4, padding=0)
        plot.setTitle(None)

    def _clicked(self, event: object) -> None:
        if self.step is None:
            return
        pos = event.scenePos()  # type: ignore[attr-defined]
        vb = self.getPlotItem().getViewBox()
        if not vb.sceneBoundingRect().contains(pos):
            return
        point = vb.mapSceneToView(pos)
        index = int(round(point.y()))
        cands = self.step.candidates[: self.top_n]
        if 0 <= index < len(cands):
            self.bar_clicked.emit(self.step.index, cands[index].token_id)


def tick_font(widget: pg.PlotWidget, points: int) -> QFont:
    """Set both axes' tick labels to ``points`` and return the font."""
    font = QFont()
    font.setPointSize(points)
    for name in ("left", "bottom"):
        widget.getPlotItem().getAxis(name).setStyle(tickFont=font)
    return font


def style_axes(widget: pg.PlotWidget, theme: Theme) -> None:
    """Background, axes and title in the theme's colours."""
    widget.setBackground(theme.plot_bg)
    plot = widget.getPlotItem()
    for name in ("left", "bottom"):
        axis = plot.getAxis(name)
        axis.setPen(pg.mkPen(theme.muted))
        axis.setTextPen(pg.mkPen(theme.text))
    plot.titleLabel.setAttr("color", theme.text)


def step_summary(step: Step | None) -> str:
    """One line a class can read about the step the distribution plot shows."""
    if step is None:
        return "Next-token probabilities appear here after the first token."
    survivors = f"{step.survivors} token{'s' if step.survivors != 1 else ''} could be picked"
    return (
        f"<b>Step {step.index + 1}</b>: chose "
        f"<code>'{html.escape(_short(step.token_str, 24))}'</code> "
        f"({step.raw_prob:.0%} → {step.prob:.0%} after the sampler) · entropy "
        f"{step.entropy_raw:.2f} → {step.entropy:.2f} bits · {survivors}"
    )


class SeriesPlot(pg.PlotWidget):
    """Per-step curves with a growing, explicitly set x range."""

    def __init__(
        self, title: str, y_label: str, series: list[tuple[str, str]], parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self.base_title = title
        plot = self.getPlotItem()
        plot.setMenuEnabled(False)
        plot.hideButtons()
        plot.getViewBox().setMouseEnabled(x=False, y=False)
        self.setLabel("bottom", "step")
        self.setLabel("left", y_label)
        plot.getAxis("left").enableAutoSIPrefix(False)
        self.legend = plot.addLegend(offset=(-10, 10))
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
            self.curves[name] = curve
        self.marker = pg.InfiniteLine(angle=90, movable=False)
        self.addItem(self.marker)
        self.marker.hide()
        self._y_max = 1.0
        plot.setTitle(title)
        self.setXRange(0, 50, padding=0)

    def set_theme(self, theme: Theme) -> None:
        style_axes(self, theme)
        plot = self.getPlotItem()
        self.legend.setLabelTextColor(theme.text)
        self.marker.setPen(pg.mkPen(theme.chosen, width=1, style=pg.QtCore.Qt.PenStyle.DashLine))
        plot.setTitle(plot.titleLabel.text)

    def set_font_size(self, points: int) -> None:
        font = tick_font(self, points)
        plot = self.getPlotItem()
        for name in ("left", "bottom"):
            plot.getAxis(name).label.setFont(font)
        plot.titleLabel.setAttr("size", f"{points}pt")
        plot.setTitle(plot.titleLabel.text)

    def set_series(
        self, x: np.ndarray, values: dict[str, np.ndarray], title: str | None = None
    ) -> None:
        for name, y in values.items():
            self.curves[name].setData(x, y)
        n = len(x)
        self.setXRange(0, max(50, n + 1), padding=0)
        peak = max((float(np.nanmax(v)) for v in values.values() if len(v)), default=0.0)
        if peak > self._y_max or peak < self._y_max / 4:
            self._y_max = max(1.0, peak * 1.25)
        self.setYRange(0, self._y_max, padding=0)
        if title is not None:
            self.getPlotItem().setTitle(title)

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
        self.getPlotItem().setTitle(self.base_title)
        self.mark(None)
