"""The sweep (one setting over a list of values, the same prompt and seed) as a table and a plot
across the values, and the stochastic variation (N seeded runs grouped by output) as a list.
The views only draw the engine's ``SweepRow`` / ``Variation`` records they are handed."""

from __future__ import annotations

import html
import math
from collections.abc import Sequence

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QSizePolicy,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from engine.experiments.records import SweepRow, Variation
from gui.common.series_plot import KeyTitle, still_plot, style_axes, tick_font
from gui.common.theme import LIGHT, Theme

SWEEP_COLUMNS = ("Value", "Log-prob", "Surprise", "Entropy", "Distinct-2", "Output")
SWEEP_TIPS = (
    "The value of the swept setting",
    "Log-probability of the output under the model (natural log; nearer 0 = more likely)",
    "Bits of surprise per token: −log2 p of each chosen token under the model, averaged",
    "Mean entropy after the sampler, bits per step: how open each choice was",
    "Distinct token pairs / all pairs in the output: 1 = no pair repeats",
    "The text it wrote",
)
CURVES = (("surprise (bits/token)", "#0072b2"), ("entropy (bits)", "#e69f00"),
          ("distinct-2 (0–1)", "#009e73"))  # fmt: skip
OUTPUT = len(SWEEP_COLUMNS) - 1  # the table's output column: hidden, the pane below has them
VARIATION_COLUMNS = ("Runs", "Share", "Differs at", "Output")


def surprise(row: SweepRow) -> float:
    """Bits per token: the output's log-probability spread over its tokens."""
    n = len(row.token_ids)
    return -row.logprob / math.log(2) / n if n and math.isfinite(row.logprob) else float("nan")


def cell(text: str, right: bool = False, tip: str = "") -> QTableWidgetItem:
    item = QTableWidgetItem(text)
    item.setFlags(item.flags() & ~Qt.ItemFlag.ItemIsEditable)
    if right:
        item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
    if tip:
        item.setToolTip(tip)
    return item


def plain_table(columns: Sequence[str], name: str) -> QTableWidget:
    table = QTableWidget(0, len(columns))
    table.setObjectName(name)
    table.setHorizontalHeaderLabels(list(columns))
    table.setWordWrap(False)
    table.setTextElideMode(Qt.TextElideMode.ElideRight)
    table.setSelectionBehavior(QTableWidget.SelectionBehavior.SelectRows)
    header = table.horizontalHeader()
    for i in range(len(columns) - 1):
        header.setSectionResizeMode(i, QHeaderView.ResizeMode.ResizeToContents)
    header.setSectionResizeMode(len(columns) - 1, QHeaderView.ResizeMode.Stretch)
    table.verticalHeader().hide()
    return table


def button_row(button: QPushButton) -> QHBoxLayout:
    """The page's button at the left, above its text (the text then has the whole width)."""
    row = QHBoxLayout()
    row.addWidget(button)
    row.addStretch(1)
    return row


def note_label(text: str, name: str) -> QLabel:
    label = QLabel(text)
    label.setObjectName(name)
    label.setWordWrap(True)
    label.setTextFormat(Qt.TextFormat.RichText)
    label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
    return label


class SweepView(QWidget):
    sweep_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.rows: list[SweepRow] = []
        self.run = QPushButton("Sweep a setting…")
        self.run.setObjectName("sweep_run")
        self.info = note_label(
            "The same prompt and seed at several values of one setting (temperature, top-p, "
            "min-p, …): how the text, its likelihood and its variety change.",
            "sweep_info",
        )
        self.table = plain_table(SWEEP_COLUMNS, "sweep_table")
        for i, tip in enumerate(SWEEP_TIPS):
            self.table.horizontalHeaderItem(i).setToolTip(tip)
        self.plot = pg.PlotWidget()
        self.plot.setObjectName("sweep_plot")
        item = still_plot(self.plot)
        item.getAxis("left").enableAutoSIPrefix(False)
        item.getAxis("bottom").enableAutoSIPrefix(False)
        self.curves = {
            name: item.plot([], [], pen=pg.mkPen(color, width=2.5), symbol="o", symbolSize=9,
                            symbolBrush=color, symbolPen=None)
            for name, color in CURVES
        }  # fmt: skip
        self.plot.setMinimumHeight(150)  # below that the ticks of three curves pile up
        self.key = KeyTitle(self.plot, list(CURVES))  # within the plot's width, whole on hover
        item.getAxis("left").setStyle(maxTickLevel=0)
        self.table.setColumnHidden(OUTPUT, True)
        # every output whole, wrapped, one paragraph per value (in a table's cell they were
        # cut to "named Ereb…" and two rows showed at 1280x720)
        self.outputs = QTextBrowser()
        self.outputs.setObjectName("sweep_outputs")
        self.outputs.setPlaceholderText("Each value's output appears here, whole.")
        self.split = QSplitter(Qt.Orientation.Vertical)
        self.split.setChildrenCollapsible(False)  # a drag never leaves a part at 0 px
        self.split.addWidget(self.plot)
        self.split.addWidget(self.table)
        self.split.addWidget(self.outputs)
        self.split.setStretchFactor(2, 1)
        self.split.setSizes([150, 150, 300])  # the outputs need the room more than the plot
        self.compact = False
        self._seed: int | None = None
        self._also_on: tuple[str, ...] = ()
        layout = QVBoxLayout(self)
        top = QHBoxLayout()  # the button beside its words: a line more for the outputs
        top.addWidget(self.run, 0, Qt.AlignmentFlag.AlignTop)
        top.addWidget(self.info, 1)
        layout.addLayout(top)
        layout.addWidget(self.split, 1)
        self.run.clicked.connect(self.sweep_requested)
        self.set_theme(LIGHT)

    def set_theme(self, theme: Theme) -> None:
        style_axes(self.plot, theme)
        self._title()

    def set_compact(self, on: bool) -> None:
        """The presentation view: the outputs only, big, each with its value and its
        surprise (no plot, no table)."""
        self.compact = on
        self.plot.setVisible(not on)
        self.table.setVisible(not on)
        self.show_rows(self.rows, self._seed, self._also_on)

    def set_font_size(self, points: int) -> None:
        font = tick_font(self.plot, points)
        for name in ("left", "bottom"):
            self.plot.getPlotItem().getAxis(name).label.setFont(font)
        self.plot.getPlotItem().titleLabel.setAttr("size", f"{points}pt")
        self._title()

    def _title(self) -> None:
        self.key.show()

    def show_rows(
        self, rows: Sequence[SweepRow], seed: int | None = None, also_on: Sequence[str] = ()
    ) -> None:
        """The rows; ``also_on``: the other stages that were on at every value."""
        self.rows, self._seed, self._also_on = list(rows), seed, tuple(also_on)
        self.table.setRowCount(len(rows))
        for r, row in enumerate(rows):
            cells = (f"{row.value:g}", f"{row.logprob:.1f}", f"{surprise(row):.2f}",
                     f"{row.mean_entropy:.2f}", f"{row.distinct[1]:.2f}")  # fmt: skip
            for c, text in enumerate(cells):
                self.table.setItem(r, c, cell(text, right=True))
            out = " ".join(row.text.split())
            self.table.setItem(r, len(cells), cell(out, tip=row.text))
        self._fit_table()
        self.outputs.setHtml(outputs_html(rows))
        if not rows:
            for curve in self.curves.values():
                curve.setData([], [])
            return
        x = np.array([row.value for row in rows], dtype=float)
        series = ([surprise(row) for row in rows], [row.mean_entropy for row in rows],
                  [row.distinct[1] for row in rows])  # fmt: skip
        for (name, _color), y in zip(CURVES, series, strict=True):
            self.curves[name].setData(x, np.array(y, dtype=float))
        setting = rows[0].setting.replace("_", "-")
        self.plot.setLabel("bottom", setting)
        same = "the same prompt and seed" + ("" if seed is None else f" {seed}")
        on = ", ".join(self._also_on)
        also = f" Also on: <b>{on}</b>." if on else " Nothing else on."
        self.info.setText(f"<b>{setting}</b> at {len(rows)} values, {same}.{also}")
        self.info.setToolTip("Surprise per token, entropy and distinct-2 per value; the rows "
                             "are in the Compare tab too.")  # fmt: skip

    def _fit_table(self) -> None:
        """The table as tall as its rows (the outputs below take the rest)."""
        t = self.table
        t.resizeRowsToContents()
        rows = sum(t.rowHeight(r) for r in range(t.rowCount()))
        tall = t.horizontalHeader().sizeHint().height() + rows + 2 * t.frameWidth() + 2
        t.setMaximumHeight(tall)
        sizes = self.split.sizes()
        if sum(sizes) and not self.compact:
            rest = max(0, sum(sizes) - sizes[0] - tall)
            self.split.setSizes([sizes[0], tall, rest])


def outputs_html(rows: Sequence[SweepRow]) -> str:
    """One paragraph per value: the value and its surprise in bold, then the whole output."""
    if not rows:
        return ""
    name = rows[0].setting.replace("_", "-")
    return "".join(
        f"<p><b>{html.escape(name)} {row.value:g}</b> · {surprise(row):.2f} bits/token<br>"
        f"{html.escape(' '.join(row.text.split()))}</p>"
        for row in rows
    )


class VariationView(QWidget):
    variation_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.result: Variation | None = None
        self.run = QPushButton("Sample N runs…")
        self.run.setObjectName("variation_run")
        self.info = note_label(
            "N sampled runs from one prompt, one seed each: which continuations come out, how "
            "often, and at which token each leaves the most common one.",
            "variation_info",
        )
        self.table = plain_table(VARIATION_COLUMNS, "variation_table")
        self.table.horizontalHeaderItem(2).setToolTip(
            "The token where this output first differs from the first row's"
        )
        layout = QVBoxLayout(self)
        layout.addLayout(button_row(self.run))
        layout.addWidget(self.info)
        layout.addWidget(self.table, 1)
        self.run.clicked.connect(self.variation_requested)

    def groups(self) -> list[tuple[int, int | None, str]]:
        """(count, diverges at, text) per row shown (tests read this)."""
        c = self.result.continuations if self.result else ()
        return [(g.count, g.diverges_at, g.text) for g in c]

    def show_variation(self, result: Variation) -> None:
        self.result = result
        groups = result.continuations
        self.table.setRowCount(len(groups))
        for r, g in enumerate(groups):
            where = "—" if g.diverges_at is None else f"token {g.diverges_at + 1}"
            cells = (str(g.count), f"{g.count / result.runs:.0%}", where)
            for c, text in enumerate(cells):
                self.table.setItem(r, c, cell(text, right=c < 2))
            seeds = ", ".join(str(s) for s in g.seeds[:10]) + (" …" if len(g.seeds) > 10 else "")
            self.table.setItem(
                r, 3, cell(" ".join(g.text.split()), tip=f"{g.text}\n\nseeds: {seeds}")
            )
        top = groups[0].count if groups else 0
        common = (
            "every run wrote something different"
            if top <= 1
            else f"the most common came {top} times ({top / max(1, result.runs):.0%})"
        )
        self.info.setText(
            f"<b>{result.runs} runs</b>, <b>{result.distinct}</b> different continuations: "
            f"{common}."
        )

    def set_compact(self, on: bool) -> None:
        self.table.setColumnHidden(1, on)  # the share: the count says it to a class
