"""Two models in lockstep: model A writes, model B scores the same prefix at every step. Per
step the two top-N lists side by side, the KL divergence, the top-N Jaccard index and whether
the greedy picks agree; curves of KL and Jaccard over the steps and a summary line. A refusal
(two tokenizers) is one message in the view; earlier results stay until a new run replaces
them. The view only draws the engine's ``LockstepStep`` / ``LockstepSummary`` records."""

from __future__ import annotations

import html
from collections.abc import Sequence

import numpy as np
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QHBoxLayout, QPushButton, QSplitter, QVBoxLayout, QWidget

from engine.experiments.lockstep import LockstepStep, LockstepSummary, Ranked
from gui.widgets.series_plot import SeriesPlot
from gui.widgets.step_text import pct, short
from gui.widgets.sweep_view import cell, note_label, plain_table

COLUMNS = ("Step", "A wrote", "KL", "Jaccard", "Greedy", "A's top", "B's top")
SHOWN_TOP = 5  # per list in a table cell; the tooltip has all N


def ranked_text(top: Sequence[Ranked], n: int = SHOWN_TOP) -> str:
    return "  ".join(f"{short(r.text, 10)} {pct(r.prob)}" for r in top[:n])


def summary_text(s: LockstepSummary, a: str, b: str) -> str:
    return (
        f"<b>A</b> = {html.escape(a)}, <b>B</b> = {html.escape(b)}: {s.tokens} tokens; mean KL "
        f"<b>{s.mean_kl:.3f}</b> nats (largest {s.max_kl:.3f} at step {s.max_kl_step + 1}); "
        f"top-N Jaccard <b>{s.mean_jaccard:.2f}</b>; greedy picks agree at "
        f"<b>{s.greedy_agreement:.0%}</b> of the steps."
    )


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
        top = QHBoxLayout()
        top.addWidget(self.info, 1)
        top.addWidget(self.run)
        self.plot = SeriesPlot(
            "A against B", "per step", [("KL (nats)", "#0072b2"), ("Jaccard", "#e69f00")]
        )
        self.plot.setObjectName("lockstep_plot")
        self.table = plain_table(COLUMNS, "lockstep_table")
        split = QSplitter(Qt.Orientation.Vertical)
        split.addWidget(self.plot)
        split.addWidget(self.table)
        split.setStretchFactor(0, 2)
        split.setStretchFactor(1, 3)
        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addWidget(self.message)
        layout.addWidget(split, 1)
        self.run.clicked.connect(self.lockstep_requested)

    def refuse(self, message: str) -> None:
        """One clear message; what was shown before stays."""
        self.message.setText(html.escape(message))
        self.message.show()

    def show_steps(self, steps: Sequence[LockstepStep], summary: LockstepSummary | None,
                   a: str = "A", b: str = "B") -> None:  # fmt: skip
        self.message.hide()
        self.steps = list(steps)
        self.table.setRowCount(len(steps))
        for r, s in enumerate(steps):
            cells = (str(s.index + 1), short(s.text, 12), f"{s.kl:.3f}", f"{s.jaccard:.2f}",
                     "agree" if s.greedy_agree else "differ")  # fmt: skip
            for c, text in enumerate(cells):
                self.table.setItem(r, c, cell(text, right=c in (0, 2, 3)))
            for c, top in ((5, s.a_top), (6, s.b_top)):
                tip = "\n".join(f"{short(x.text, 20)}  {pct(x.prob)}" for x in top)
                self.table.setItem(r, c, cell(ranked_text(top), tip=tip))
        x = np.arange(len(steps), dtype=float)
        self.plot.set_series(x, {
            "KL (nats)": np.array([s.kl for s in steps], dtype=float),
            "Jaccard": np.array([s.jaccard for s in steps], dtype=float),
        })  # fmt: skip
        if summary is not None:
            self.info.setText(summary_text(summary, a, b))
