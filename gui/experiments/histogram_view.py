"""Sample this step N times: the empirical frequencies beside the after-sampler probabilities
(horizontal bars, one row per token), with the total-variation distance and the chi-square
p-value written out. "Draw more" adds draws to the same histogram, so a class watches the bars
converge as N grows. The view only draws ``StepSample`` records it is handed."""

from __future__ import annotations

import html

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QFont, QFontMetrics
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from engine.experiments.records import MAX_SAMPLES, StepSample
from gui.common.series_plot import still_plot, style_axes, tick_font
from gui.common.step_text import pct, short
from gui.common.theme import LIGHT, Theme

CHOICES = (10, 100, 1_000, 10_000, MAX_SAMPLES)
ROWS = 12  # token rows shown at most; fewer when their labels would not fit the plot
EMPIRICAL = "#0072b2"  # Okabe-Ito blue: what the draws gave


def verdict(sample: StepSample, compact: bool = False) -> str:
    """The fit in plain words: what the numbers mean for the class."""
    if sample.p_value < 0.001:
        return "they do <b>not</b> follow the bars" if compact else (
            "the draws do <b>not</b> follow the bars (p < 0.001)")  # fmt: skip
    if sample.n < 100:
        return "too few to judge" if compact else (
            "too few draws to judge: draw more and watch the bars")  # fmt: skip
    return "they follow the bars" if compact else (
        "the draws follow the bars: the gaps are what chance gives")  # fmt: skip


def summary_html(sample: StepSample, where: str, compact: bool = False) -> str:
    tv = f"{sample.tv:.3f}"
    p = "< 0.001" if sample.p_value < 0.001 else f"{sample.p_value:.3f}"
    if compact:  # the presentation view: one line a back row reads
        return f"<b>{sample.n:,} draws</b> · distance <b>{tv}</b> · p {p}: {verdict(sample, True)}"
    return (
        f"<b>{sample.n:,} draws</b> {html.escape(where)}. "
        f"Total-variation distance <b>{tv}</b> (0 = identical); chi-square p-value <b>{p}</b> "
        f"({sample.dof} degrees of freedom): {verdict(sample)}."
    )


class HistogramView(QWidget):
    """``draw_requested(n)``: a fresh histogram of n draws; ``more_requested(n)``: n more."""

    draw_requested = Signal(int)
    more_requested = Signal(int)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("histogram_view")
        self.sample: StepSample | None = None
        self.rows_shown = ROWS
        self.compact = False  # the presentation view: a one-line summary
        self.theme = LIGHT
        self._table: list[tuple[int | None, float, int]] = []  # token id (None: the rest)
        self._where = ""
        self._tick_font = QFont()
        self.count = QComboBox()
        self.count.setObjectName("histogram_n")
        for n in CHOICES:
            self.count.addItem(f"{n:,}", n)
        self.count.setCurrentIndex(2)
        self.draw = QPushButton("Sample this step")
        self.draw.setObjectName("histogram_draw")
        self.draw.setToolTip("Draw the next token N times from the bars (one forward pass)")
        self.more = QPushButton("Draw more")
        self.more.setObjectName("histogram_more")
        self.more.setToolTip("Add N more draws to these bars: watch them settle as N grows")
        self.more.setEnabled(False)
        row = QHBoxLayout()
        row.addWidget(QLabel("N ="))
        row.addWidget(self.count)
        row.addWidget(self.draw)
        row.addWidget(self.more)
        row.addStretch(1)
        self.info = QLabel("Sample the current step many times and compare with its bars.")
        self.info.setObjectName("histogram_info")
        self.info.setTextFormat(Qt.TextFormat.RichText)
        self.info.setWordWrap(True)
        self.info.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.key = QLabel()
        self.key.setWordWrap(True)  # the key wraps: at 20 pt one line made the tab 736 px wide
        self.plot = pg.PlotWidget()
        self.plot.setObjectName("histogram_plot")
        item = still_plot(self.plot)
        item.getViewBox().invertY(True)
        item.getAxis("bottom").enableAutoSIPrefix(False)
        item.getAxis("left").setStyle(hideOverlappingLabels=False)
        self.plot.setLabel("bottom", "share of draws / probability")
        self.probs = pg.BarGraphItem(x0=[], y=[], height=0.4, width=[])
        self.freqs = pg.BarGraphItem(x0=[], y=[], height=0.4, width=[])
        self.plot.addItem(self.probs)
        self.plot.addItem(self.freqs)
        layout = QVBoxLayout(self)
        layout.addLayout(row)
        layout.addWidget(self.info)
        layout.addWidget(self.key)
        layout.addWidget(self.plot, 1)
        self.draw.clicked.connect(lambda: self.draw_requested.emit(self.n()))
        self.more.clicked.connect(lambda: self.more_requested.emit(self.n()))
        self.set_theme(LIGHT)

    def n(self) -> int:
        return int(self.count.currentData())

    def set_n(self, n: int) -> None:
        """Choose N (a lesson's own number joins the list)."""
        if self.count.findData(n) < 0:
            self.count.addItem(f"{n:,}", n)
        self.count.setCurrentIndex(self.count.findData(n))

    def set_theme(self, theme: Theme) -> None:
        self.theme = theme
        style_axes(self.plot, theme)
        self.probs.setOpts(brush=pg.mkBrush(theme.kept_bar), pen=pg.mkPen(None))
        self.freqs.setOpts(brush=pg.mkBrush(EMPIRICAL), pen=pg.mkPen(None))
        self._key()

    def _key(self) -> None:
        p, d = ("probability", "draws") if self.compact else (
            "probability after the sampler", "share of the draws")  # fmt: skip
        self.key.setText(
            f"<span style='color:{self.theme.kept_bar}'>■</span> {p} &nbsp; "
            f"<span style='color:{EMPIRICAL}'>■</span> {d} &nbsp; (labels: {p} | {d})"
            if self.compact
            else f"<span style='color:{self.theme.kept_bar}'>■</span> {p} &nbsp; "
            f"<span style='color:{EMPIRICAL}'>■</span> {d}"
        )

    def set_font_size(self, points: int, compact: bool = False) -> None:
        self._tick_font = tick_font(self.plot, points)
        self.plot.getPlotItem().getAxis("bottom").label.setFont(self._tick_font)
        self.compact = compact
        self._key()
        self._redraw(force=True)

    def _fit_rows(self) -> int:
        """Token rows whose labels fit the plot's height (the axis and a margin aside)."""
        line = QFontMetrics(self._tick_font).lineSpacing()
        room = self.plot.height() - 2 * line  # the axis and its title
        return max(3, min(ROWS, int(room / (1.15 * line)) - 1))  # one row for "all others"

    def resizeEvent(self, event: object) -> None:  # noqa: N802 - Qt override
        super().resizeEvent(event)
        self._redraw()

    def _redraw(self, force: bool = False) -> None:
        rows = self._fit_rows()
        changed, self.rows_shown = rows != self.rows_shown, rows
        if self.sample is not None and (changed or force):
            self.show_sample(self.sample, self._where)

    def clear(self) -> None:
        self.sample = None
        self.more.setEnabled(False)
        self.probs.setOpts(x0=[], y=[], width=[])
        self.freqs.setOpts(x0=[], y=[], width=[])
        self.info.setText("Sample the current step many times and compare with its bars.")

    def shown(self) -> list[tuple[int | None, float, int]]:
        """(token id, probability, count) of each row on screen, top first; the id is None
        on the "(all others)" row (tests read this)."""
        return list(self._table)

    def show_sample(self, sample: StepSample, where: str = "") -> None:
        self.sample, self._where = sample, where
        rows = [(short(r.text), r.prob, r.count) for r in sample.rows[: self.rows_shown]]
        rest_p = sample.other_prob + sum(r.prob for r in sample.rows[self.rows_shown :])
        rest_n = sample.n - sum(c for _t, _p, c in rows)
        if rest_n > 0 or rest_p > 0.0005:
            rows.append(("(all others)", rest_p, rest_n))
        ids = [r.token_id for r in sample.rows[: self.rows_shown]]
        self._table = [(i, p, c) for i, (_t, p, c) in zip([*ids, None], rows, strict=False)]
        y = np.arange(len(rows), dtype=float)
        p = np.array([r[1] for r in rows])
        f = np.array([r[2] for r in rows], dtype=float) / max(1, sample.n)
        self.probs.setOpts(x0=np.zeros_like(y), y=y - 0.2, width=p, height=0.4)
        self.freqs.setOpts(x0=np.zeros_like(y), y=y + 0.2, width=f, height=0.4)
        ticks = [(float(i), f"{label}  {pct(prob)} | {pct(c / max(1, sample.n))}")
                 for i, (label, prob, c) in enumerate(rows)]  # fmt: skip
        self.plot.getPlotItem().getAxis("left").setTicks([ticks])
        upper = float(max(p.max(initial=0.0), f.max(initial=0.0)))
        self.plot.setXRange(0, min(1.0, upper * 1.08 + 0.01), padding=0)
        self.plot.setYRange(-0.6, len(rows) - 0.4, padding=0)
        self.info.setText(summary_html(sample, where, self.compact))
        self.more.setEnabled(True)
