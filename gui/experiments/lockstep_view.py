"""Two models in lockstep: model A writes, model B scores the same prefix at every step. Per
step the two top-N lists side by side, the KL divergence, the top-N Jaccard index and whether
the greedy picks agree; curves of KL and Jaccard over the steps and a summary line. A refusal
(two tokenizers) is one message in the view; earlier results stay until a new run replaces
them. The view only draws the engine's ``LockstepStep`` / ``LockstepSummary`` records."""

from __future__ import annotations

import html
from collections.abc import Sequence

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QHeaderView, QPushButton, QSplitter, QVBoxLayout, QWidget

from engine.experiments.records import LockstepStep, LockstepSummary, Ranked
from gui.common.series_plot import KeyTitle, still_plot, style_axes, tick_font
from gui.common.step_text import pct, short
from gui.common.theme import LIGHT, Theme
from gui.experiments.sweep_view import button_row, cell, note_label, plain_table

KL_TITLE, KL_BOUND_TITLE = "KL divergence A→B, nats", "KL A→B (at least), nats"
MORE_COLORS = ("#d55e00", "#009e73")  # Okabe-Ito vermilion and green: a second and third B
COLUMNS = ("Step", "A wrote", "KL", "Jaccard", "Greedy", "A's top", "B's top")
SHOWN_TOP, SHOWN_TOP_COMPACT = 2, 1  # per list in a table cell; the tooltip has all N
COMPACT_HIDDEN = (3,)  # the Jaccard column: the presentation view keeps KL and the lists


def ranked_text(top: Sequence[Ranked], n: int = SHOWN_TOP) -> str:
    return "  ".join(f"{short(r.text, 10)} {pct(r.prob)}" for r in top[:n])


def summary_text(
    s: LockstepSummary, a: str, b: str, compact: bool = False, bounds: str = ""
) -> str:
    """The summary line; ``bounds``: B is served and sent its top-N only (what is a bound)."""
    ge = "≥ " if bounds else ""
    if compact:
        return (
            f"Mean KL <b>{ge}{s.mean_kl:.3f}</b> nats · greedy picks agree <b>"
            f"{s.greedy_agreement:.0%}</b> · Jaccard {s.mean_jaccard:.2f}"
        )
    said = f"<br><i>{html.escape(bounds[0].upper() + bounds[1:])}.</i>" if bounds else ""
    return (
        f"<b>A</b> = {html.escape(a)}, <b>B</b> = {html.escape(b)}: {s.tokens} tokens; mean KL "
        f"<b>{ge}{s.mean_kl:.3f}</b> nats (largest {ge}{s.max_kl:.3f} at step "
        f"{s.max_kl_step + 1}); top-N Jaccard <b>{s.mean_jaccard:.2f}</b>; greedy picks agree "
        f"at <b>{s.greedy_agreement:.0%}</b> of the steps.{said}"
    )


def kl_text(s: LockstepStep) -> str:
    """A step's KL; "≥" where it is a lower bound (B sent its top-N only)."""
    return f"{'≥' if s.kl_lower_bound else ''}{s.kl:.3f}"


Extra = tuple[str, Sequence[LockstepStep], "LockstepSummary | None"]  # another B: name, steps


def weights_label(b: str) -> str:
    """A B's short name for the presentation view: its weights where its name ends with them
    ("SmolLM2 135M Instruct (int4)" -> "int4"), else "B"."""
    if b.endswith(")") and "(" in b:
        return b[b.rindex("(") + 1 : -1] or "B"
    return "B"


def more_text(s: LockstepSummary, b: str, compact: bool = False) -> str:
    """One more B against the same A, one line (its curves are the dashed ones)."""
    name = f"<b>{html.escape(weights_label(b))}</b>: " if compact else (
        f"<b>B</b> = {html.escape(b)} (dashed): ")  # fmt: skip
    return (
        f"{name}mean KL <b>{s.mean_kl:.3f}</b> nats; top-N Jaccard <b>{s.mean_jaccard:.2f}"
        f"</b>; greedy picks agree at <b>{s.greedy_agreement:.0%}</b> of the steps."
    )


class StepCurve(pg.PlotWidget):
    """One value per step, a one-line title (no key: one curve), the y range fitted to the
    data (``upper`` fixed for a bounded quantity such as Jaccard)."""

    def __init__(self, title: str, color: str, upper: float | None = None) -> None:
        super().__init__()
        self.title, self.color, self.upper = title, color, upper
        item = still_plot(self)
        item.getAxis("left").enableAutoSIPrefix(False)
        item.getAxis("left").setStyle(maxTickLevel=0)  # major ticks only: short plots
        self.setLabel("bottom", "step")
        self.curve = item.plot([], [], pen=pg.mkPen(color, width=2.5), symbol="o",
                               symbolSize=6, symbolBrush=color, symbolPen=None)  # fmt: skip
        # more B's against the same A (float32 vs int8 vs int4): one dashed curve each
        self.more = [item.plot([], [], pen=pg.mkPen(c, width=2.5, style=Qt.PenStyle.DashLine),
                               symbol="t", symbolSize=6, symbolBrush=c, symbolPen=None)
                     for c in MORE_COLORS]  # fmt: skip
        if upper is not None:  # a bounded quantity: three ticks say it
            item.getAxis("left").setTicks([[(0.0, "0"), (0.5, "0.5"), (1.0, "1")]])
        self.key = KeyTitle(self, [(title, color)])  # within the plot's width, whole on hover
        self.set_theme(LIGHT)

    def set_theme(self, theme: Theme) -> None:
        self.theme = theme
        style_axes(self, theme)
        self.key.show()

    def set_font_size(self, points: int) -> None:
        font = tick_font(self, points)
        self.getPlotItem().getAxis("bottom").label.setFont(font)
        self.getPlotItem().titleLabel.setAttr("size", f"{points}pt")
        self.set_theme(self.theme)  # the title again, at the new size

    def set_values(self, values: np.ndarray, more: Sequence[np.ndarray] = ()) -> None:
        x = np.arange(1, len(values) + 1, dtype=float)
        self.curve.setData(x, values)
        for i, curve in enumerate(self.more):
            ys = more[i] if i < len(more) else np.zeros(0)
            curve.setData(np.arange(1, len(ys) + 1, dtype=float), ys)
        peak = max([float(values.max(initial=0.0))] + [float(m.max(initial=0.0)) for m in more])
        top = self.upper or max(1e-3, peak * 1.25)
        self.setYRange(0, top, padding=0)
        self.setXRange(0.5, max(2, len(values)) + 0.5, padding=0)


class LockstepView(QWidget):
    lockstep_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.steps: list[LockstepStep] = []
        self.run = QPushButton("Compare two models…")
        self.run.setObjectName("lockstep_run")
        self.info = note_label(
            "Model A writes; model B reads the same text and scores every next token. Where do "
            "they disagree? (Two models sharing a tokenizer, or one model in two precisions.)",
            "lockstep_info",
        )
        self.message = note_label("", "lockstep_message")
        self.message.setStyleSheet("color: #d55e00; font-weight: bold;")  # Okabe-Ito vermilion
        self.message.hide()
        self.kl = StepCurve(KL_TITLE, "#0072b2")
        self.jaccard = StepCurve("Top-N Jaccard, 1 = same", "#e69f00", upper=1.05)
        self.kl.setObjectName("lockstep_kl")
        self.plots = QSplitter(Qt.Orientation.Horizontal)
        self.plots.setChildrenCollapsible(False)  # a drag never leaves a part at 0 px
        self.plots.addWidget(self.kl)
        self.plots.addWidget(self.jaccard)
        self.table = plain_table(COLUMNS, "lockstep_table")
        header = self.table.horizontalHeader()
        for column in (5, 6):  # the two top-N lists share the width, side by side
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.Stretch)
        split = QSplitter(Qt.Orientation.Vertical)
        split.setChildrenCollapsible(False)  # a drag never leaves a part at 0 px
        split.addWidget(self.plots)
        split.addWidget(self.table)
        split.setSizes([200, 200])
        self.compact = False
        self.summary: tuple[LockstepSummary | None, str, str] = (None, "A", "B")
        self.bounds = ""  # B served: what is a bound
        self.extra: tuple[Extra, ...] = ()
        layout = QVBoxLayout(self)
        layout.addLayout(button_row(self.run))
        layout.addWidget(self.info)
        layout.addWidget(self.message)
        layout.addWidget(split, 1)
        self.run.clicked.connect(self.lockstep_requested)

    def set_compact(self, on: bool) -> None:
        """The presentation view: the table (KL, the two top lists) and one summary line."""
        self.compact = on
        self.plots.setVisible(not on)
        for column in COMPACT_HIDDEN:
            self.table.setColumnHidden(column, on)
        if self.steps:
            self.show_steps(self.steps, *self.summary, self.bounds, self.extra)

    def refuse(self, message: str) -> None:
        """One clear message; what was shown before stays."""
        self.message.setText(html.escape(message))
        self.message.show()

    def show_steps(self, steps: Sequence[LockstepStep], summary: LockstepSummary | None,
                   a: str = "A", b: str = "B", bounds: str = "",
                   extra: Sequence[Extra] = ()) -> None:  # fmt: skip
        """``bounds``: B is served and sent its top-N only; its KL values are lower bounds.
        The table shows A against the first B; ``extra`` B's (the same text scored by the
        same model in other weights) add a dashed curve each and a line to the summary."""
        self.message.hide()
        self.extra = tuple(extra)
        self.steps = list(steps)
        self.table.setRowCount(len(steps))
        for r, s in enumerate(steps):
            cells = (str(s.index + 1), short(s.text, 12), kl_text(s), f"{s.jaccard:.2f}",
                     "agree" if s.greedy_agree else "differ")  # fmt: skip
            for c, text in enumerate(cells):
                self.table.setItem(r, c, cell(text, right=c in (0, 2, 3)))
            shown = SHOWN_TOP_COMPACT if self.compact else SHOWN_TOP
            for c, top in ((5, s.a_top), (6, s.b_top)):
                tip = "\n".join(f"{short(x.text, 20)}  {pct(x.prob)}" for x in top)
                self.table.setItem(r, c, cell(ranked_text(top, shown), tip=tip))
        # served B: "at least", no longer than the title it replaces (the two curves share
        # the column at 1280x720, and a longer title pushed the Jaccard curve past its edge)
        self.kl.title = KL_BOUND_TITLE if bounds else KL_TITLE
        self.kl.set_theme(self.kl.theme)
        self.kl.set_values(np.array([s.kl for s in steps], dtype=float))
        self.jaccard.set_values(np.array([s.jaccard for s in steps], dtype=float))
        kls = [np.array([s.kl for s in more], dtype=float) for _n, more, _s in self.extra]
        jac = [np.array([s.jaccard for s in more], dtype=float) for _n, more, _s in self.extra]
        self.kl.set_values(np.array([s.kl for s in steps], dtype=float), kls)
        self.jaccard.set_values(np.array([s.jaccard for s in steps], dtype=float), jac)
        self.summary = (summary, a, b)
        self.bounds = bounds
        if summary is not None:
            text = summary_text(summary, a, b, self.compact, bounds)
            if self.compact and self.extra:  # several B's, one line each: say whose
                text = f"<b>{html.escape(weights_label(b))}</b>: " + text
            for name, _more, s in self.extra:
                if s is not None:
                    text += "<br>" + more_text(s, name, self.compact)
            self.info.setText(text)
