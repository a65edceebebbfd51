"""The Inside tab's plots (issue 33), drawn from ``engine.internals.records``: the logit lens
as a grid (candidates down, layers across, the decision layer marked) over KL per layer, the
direct logit attribution as a bar per block, and attention (or input attribution) as a bar
per source token. Items are made once and updated; only the GUI thread draws."""

from __future__ import annotations

import html

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, Qt
from PySide6.QtGui import QColor, QFont, QFontMetrics, QResizeEvent
from PySide6.QtWidgets import QToolTip, QWidget

from engine.internals.records import LensView, LogitAttribution
from gui.common.series_plot import AxisTitle, still_plot, style_axes, tick_font
from gui.common.step_text import pct, short
from gui.common.theme import LIGHT, Theme

SUBLAYER_COLORS = {"attention": "#0072b2", "self-attention": "#0072b2", "MLP": "#e69f00",
                   "cross-attention": "#009e73"}  # fmt: skip


def _ticks(labels: list[str], every: int = 1) -> list[list[tuple[float, str]]]:
    return [[(float(i), s) for i, s in enumerate(labels) if i % every == 0]]


class InsidePlot(pg.PlotWidget):
    """A still plot with the window's theme and text size."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.plot = still_plot(self)
        self.plot.getAxis("left").enableAutoSIPrefix(False)
        self.theme = LIGHT
        self.points = 10
        self.titles: list[AxisTitle] = []  # axis titles that take a shorter form on a short axis

    def fit_titles(self, **forms: tuple[str, ...]) -> None:
        """Axis titles by axis name, each in the longest of its forms that fits (AxisTitle)."""
        self.titles = [AxisTitle(self, axis, f) for axis, f in forms.items()]

    def set_theme(self, theme: Theme) -> None:
        self.theme = theme
        style_axes(self, theme)
        self.redraw()

    def set_font_size(self, points: int) -> None:
        self.points = points
        font = tick_font(self, points)
        for name in ("left", "bottom"):
            self.plot.getAxis(name).label.setFont(font)
        if self.plot.legend is not None:
            self.plot.legend.setLabelTextSize(f"{points}pt")
        for title in self.titles:
            title.follow.call_later()
        self.redraw()

    def redraw(self) -> None:  # drawn again in the new look
        pass


class LensGrid(InsidePlot):
    """Each candidate's probability at each layer: a row per candidate (the output's top-N,
    then the chosen token), a column per layer, darker for likelier; the chosen token's row
    outlined and the decision layer a dashed line. Hover a cell for the numbers."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("lens_grid")
        self.image = pg.ImageItem()
        self.addItem(self.image)
        self.decision = pg.InfiniteLine(angle=90, movable=False)
        self.addItem(self.decision)
        self.row_box = pg.PlotDataItem()
        self.addItem(self.row_box)
        self.plot.invertY(True)
        self.setLabel("bottom", "layer (0: the embedding)")
        self.fit_titles(bottom=("layer (0: the embedding)", "layer"))
        self.lens: LensView | None = None
        self.rows: list[int] = []
        self.scene().sigMouseMoved.connect(self._hover)

    def show_lens(self, lens: LensView | None) -> None:
        self.lens = lens
        self.redraw()

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 - Qt override
        super().resizeEvent(event)
        if getattr(self, "rows", None) is not None:  # pyqtgraph resizes before __init__ ends
            self.redraw()  # as many rows as can be labelled at this height

    def rows_shown(self) -> list[int]:
        """The candidates' rows that fit one label each: the likeliest, and the chosen one."""
        assert self.lens is not None
        font = QFont()
        font.setPointSize(self.points)
        room = self.plot.vb.height() or self.height() * 0.75
        fit = max(3, int(room // (QFontMetrics(font).lineSpacing() * 1.1)))
        rows = list(range(min(fit, len(self.lens.candidates))))
        if self.lens.chosen not in rows:
            rows[-1] = self.lens.chosen
        return rows

    def redraw(self) -> None:
        lens = self.lens
        if lens is None:
            self.image.clear()
            self.decision.hide()
            self.row_box.setData([], [])
            return
        rows = self.rows_shown()
        self.rows = rows
        probs = lens.probs[:, rows]  # [layers + 1, n]
        n = probs.shape[1]
        colors = np.array([QColor(self.theme.plot_bg).getRgb(), QColor(self.theme.accent).getRgb()])
        ramp = pg.ColorMap([0.0, 1.0], colors.astype(np.ubyte))
        self.image.setImage(np.sqrt(probs), levels=(0.0, 1.0), lut=ramp.getLookupTable(nPts=256))
        self.image.setRect(-0.5, -0.5, lens.layers + 1, n)
        final = zip([lens.candidates[r] for r in rows], probs[-1], strict=True)
        labels = [f"{short(t, 10)}  {pct(float(p))}" for (_, t), p in final]
        left = self.plot.getAxis("left")
        left.setTicks(_ticks(labels))
        step = max(1, round((lens.layers + 1) / 12))
        self.plot.getAxis("bottom").setTicks(_ticks([str(i) for i in range(lens.layers + 1)], step))
        c = rows.index(lens.chosen)
        x0, x1 = -0.5, lens.layers + 0.5
        self.row_box.setData([x0, x1, x1, x0, x0], [c - 0.5, c - 0.5, c + 0.5, c + 0.5, c - 0.5],
                             pen=pg.mkPen(self.theme.chosen, width=2))  # fmt: skip
        if lens.decision_layer is None:
            self.decision.hide()
        else:
            self.decision.setPos(lens.decision_layer - 0.5)
            self.decision.setPen(pg.mkPen("#cc79a7", width=2, style=Qt.PenStyle.DashLine))
            self.decision.show()
        self.setXRange(x0, x1, padding=0)
        self.setYRange(-0.5, n - 0.5, padding=0)

    def _hover(self, pos: QPointF) -> None:
        lens = self.lens
        if lens is None or not self.plot.sceneBoundingRect().contains(pos):
            return
        point = self.plot.vb.mapSceneToView(pos)
        layer, shown = round(point.x()), round(point.y())
        if not (0 <= layer <= lens.layers and 0 <= shown < len(self.rows)):
            QToolTip.hideText()
            return
        row = self.rows[shown]
        top = "".join(f"<tr><td><code>{html.escape(repr(t))}</code></td><td align=right>"
                      f"{pct(p)}</td></tr>" for _, t, p in lens.layer_top[layer])  # fmt: skip
        token = html.escape(repr(lens.candidates[row][1]))
        text = (f"<b>Layer {layer}</b>: <code>{token}</code> {pct(float(lens.probs[layer, row]))}"
                f"; KL to the output {lens.kl_bits[layer]:.2f} bits<br>this layer's top 5:"
                f"<table>{top}</table>")  # fmt: skip
        QToolTip.showText(self.mapToGlobal(self.mapFromScene(pos)), text, self)


class KlPlot(InsidePlot):
    """KL(output || layer) in bits: how far each layer's guess is from the final answer."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("kl_plot")
        self.curve = self.plot.plot([], [])
        self.setLabel("left", "KL, bits")
        self.values = np.zeros(0)

    def show_kl(self, values: np.ndarray | None) -> None:
        self.values = np.zeros(0) if values is None else values
        self.redraw()

    def redraw(self) -> None:
        x = np.arange(len(self.values))
        self.curve.setData(x, self.values, pen=pg.mkPen(self.theme.accent, width=2),
                           symbol="o", symbolSize=4, symbolBrush=self.theme.accent)  # fmt: skip
        if len(x):
            self.setXRange(-0.5, len(x) - 0.5, padding=0)
            inner = self.values[1:] if len(x) > 1 else self.values  # layer 0 is off the scale
            self.setYRange(0, max(1.0, float(np.nanmax(inner))), padding=0.05)


class DlaPlot(InsidePlot):
    """The logit difference split by block: one bar per layer and sub-block, above zero where
    the block pushes the chosen token over the runner-up."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("dla_plot")
        self.bars: list[pg.BarGraphItem] = []
        self.zero = pg.InfiniteLine(pos=0, angle=0, movable=False)
        self.addItem(self.zero)
        self.setLabel("bottom", "layer")
        self.setLabel("left", "logit difference")
        self.fit_titles(left=("logit difference", "Δ logit"))
        self.dla: LogitAttribution | None = None  # its key: the coloured names above it

    def show_dla(self, dla: LogitAttribution | None) -> None:
        self.dla = dla
        self.redraw()

    def redraw(self) -> None:
        for item in self.bars:
            self.removeItem(item)
        self.bars.clear()
        self.zero.setPen(pg.mkPen(self.theme.muted))
        dla = self.dla
        if dla is None:
            return
        layers, parts = dla.blocks.shape
        width = 0.8 / parts
        for j, name in enumerate(dla.sublayers):
            x = np.arange(1, layers + 1) - 0.4 + width * (j + 0.5)
            color = SUBLAYER_COLORS.get(name, self.theme.accent)
            bar = pg.BarGraphItem(x=x, height=dla.blocks[:, j], width=width, brush=color,
                                  pen=pg.mkPen(None), name=name)  # fmt: skip
            self.addItem(bar)
            self.bars.append(bar)
        step = max(1, round(layers / 12))
        self.plot.getAxis("bottom").setTicks(_ticks([""] + [str(i) for i in range(1, layers + 1)],
                                                    step))  # fmt: skip
        low, high = float(dla.blocks.min()), float(dla.blocks.max())
        self.setXRange(0.4, layers + 0.6, padding=0)
        self.setYRange(min(0.0, low), max(0.0, high), padding=0.08)


class SourcePlot(InsidePlot):
    """A bar per source token: its attention weight, or its attribution score (signed)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("source_plot")
        self.bars = pg.BarGraphItem(x=[], height=[], width=0.8)
        self.addItem(self.bars)
        self.labels: list[str] = []
        self.values = np.zeros(0)
        self.signed = False
        self.scene().sigMouseMoved.connect(self._hover)
        self.plot.vb.sigResized.connect(self._label_bars)

    def show_values(self, labels: list[str], values: np.ndarray, y_label: str,
                    signed: bool = False) -> None:  # fmt: skip
        self.labels, self.values, self.signed = labels, values, signed
        self.setLabel("left", y_label)
        self.redraw()

    def redraw(self) -> None:
        v = self.values
        x = np.arange(len(v))
        brushes = [self.theme.accent if (val >= 0 or not self.signed) else self.theme.kept_bar
                   for val in v]  # fmt: skip
        self.bars.setOpts(x=x, height=v, brushes=brushes, pen=pg.mkPen(None))
        self._label_bars()
        if len(v):
            self.setXRange(-0.6, len(v) - 0.4, padding=0)
            low = min(0.0, float(v.min())) if self.signed else 0.0
            self.setYRange(low, max(float(v.max()), 1e-9), padding=0.05)

    def _label_bars(self, *_args: object) -> None:
        """A token under every n-th bar, n the fewest bars the widest label needs at the plot's
        width (labels of 8 characters ran into each other at 24 a plot)."""
        texts = [short(s, 8) for s in self.labels]
        width, every = self.plot.vb.width(), max(1, -(-len(texts) // 24))
        if texts and width > 0:
            axis = self.plot.getAxis("bottom")
            metrics = QFontMetrics(axis.style.get("tickFont") or self.font())
            widest = max(metrics.horizontalAdvance(t) for t in texts) + metrics.averageCharWidth()
            every = max(1, -(-round(widest * len(texts)) // max(1, int(width))))
        self.plot.getAxis("bottom").setTicks(_ticks(texts, every))

    def _hover(self, pos: QPointF) -> None:
        if not len(self.values) or not self.plot.sceneBoundingRect().contains(pos):
            return
        i = round(self.plot.vb.mapSceneToView(pos).x())
        if 0 <= i < len(self.values):
            value = self.values[i]
            shown = f"{value:+.3f}" if self.signed else pct(float(value))
            QToolTip.showText(self.mapToGlobal(self.mapFromScene(pos)),
                              f"{i + 1}. <code>{html.escape(repr(self.labels[i]))}</code>: "
                              f"{shown}", self)  # fmt: skip
