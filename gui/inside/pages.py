"""The Inside tab's Attention and Inputs pages (issue 33), and the shaded tokens under their
plots: where the query looked (rollout, the heads averaged, one head, the encoder), and which
input tokens pushed the token (integrated gradients, on demand, with progress and Stop)."""

from __future__ import annotations

import html
from bisect import bisect_right

import numpy as np
from PySide6.QtCore import QEvent, Signal
from PySide6.QtGui import QColor, QTextCharFormat, QTextCursor
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QHBoxLayout,
    QProgressBar,
    QPushButton,
    QSpinBox,
    QTextEdit,
    QToolTip,
    QVBoxLayout,
    QWidget,
)

from engine.internals.records import InputAttribution, StepInside
from engine.words import count
from gui.common.step_text import pct
from gui.common.theme import LIGHT, mix
from gui.common.token_pane import visible_text
from gui.inside.plots import SourcePlot
from gui.inside.text import label, q

ROLLOUT, MEAN, HEAD, CROSS = "rollout", "mean", "head", "cross"


def sink_note(first: float, rest: float) -> str:
    """What leaving out the first token did, in words a class reads (issue 54: "the first token
    (100%) left out, the rest scaled to 100%" read as nonsense)."""
    if first >= 0.5:
        return (f"the first token takes {pct(first)} of it (an 'attention sink': heads park "
                f"attention there that they do not need), so it is left out and the other "
                f"tokens' {pct(rest)} is shown scaled up to 100%")  # fmt: skip
    return (f"the first token's {pct(first)} is left out and the other tokens' {pct(rest)} is "
            f"shown scaled up to 100%")  # fmt: skip


class ShadedText(QTextEdit):
    """Tokens as the model read them, each shaded by a weight; hover one for its value."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setReadOnly(True)
        self.setObjectName("shaded_text")
        self.theme = LIGHT
        self._spans: list[tuple[int, int]] = []
        self._tips: list[str] = []

    def show_tokens(self, texts: list[str], weights: np.ndarray, signed: bool) -> None:
        self.clear()
        self._spans, self._tips = [], []
        top = float(np.abs(weights).max()) if len(weights) else 0.0
        cursor = QTextCursor(self.document())
        cursor.beginEditBlock()
        for i, (text, w) in enumerate(zip(texts, weights, strict=True)):
            fmt = QTextCharFormat()
            hue = self.theme.kept_bar if (signed and w < 0) else self.theme.accent
            shade = 0.7 * abs(float(w)) / top if top else 0.0  # the text stays readable on it
            fmt.setBackground(mix(self.theme.base, hue, shade))
            fmt.setForeground(QColor(self.theme.text))
            if i % 2:
                fmt.setUnderlineStyle(QTextCharFormat.UnderlineStyle.DotLine)
            start = cursor.position()
            cursor.insertText(visible_text(text) or "·", fmt)
            self._spans.append((start, cursor.position()))
            value = f"{w:+.3f}" if signed else pct(float(w))
            self._tips.append(f"{i + 1}. <code>{html.escape(repr(text))}</code>: {value}")
        cursor.endEditBlock()

    def viewportEvent(self, event: QEvent) -> bool:  # noqa: N802 - Qt override
        if event.type() == QEvent.Type.ToolTip:
            pos = self.cursorForPosition(event.pos()).position()
            i = bisect_right([a for a, _ in self._spans], pos) - 1
            if 0 <= i < len(self._tips) and pos < self._spans[i][1]:
                QToolTip.showText(event.globalPos(), self._tips[i], self)
            else:
                QToolTip.hideText()
            return True
        return super().viewportEvent(event)


class AttentionPage(QWidget):
    """Where the query looked: rollout, the heads averaged, one head, or (T5) the encoder."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.view = QComboBox()
        self.view.setObjectName("attention_view")
        self.view.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        self.view.setToolTip(
            "Rollout: attention followed through every layer, each with its residual connection "
            "(Abnar & Zuidema, 2020). Heads averaged / One head: a single layer's attention."
        )
        self.layer, self.head = QSpinBox(), QSpinBox()
        self.layer.setObjectName("attention_layer")
        self.head.setObjectName("attention_head")
        self.layer.setPrefix("layer ")
        self.head.setPrefix("head ")
        self.sink = QCheckBox("Leave out the first token")
        self.sink.setObjectName("attention_sink")
        self.sink.setToolTip(
            "Most heads park their attention on the first token (an 'attention sink'); leave "
            "it out to compare the other tokens' shares (the rest is scaled to 100%)."
        )
        self.sink.setChecked(True)
        self.note = label()
        self.plot = SourcePlot()
        self.text = ShadedText()
        row = QHBoxLayout()  # the check box on a line of its own: the tab stays narrow
        for w in (self.view, self.layer, self.head):
            row.addWidget(w)
        row.addStretch(1)
        layout = QVBoxLayout(self)
        layout.addLayout(row)
        layout.addWidget(self.sink)
        layout.addWidget(self.note)
        layout.addWidget(self.plot, 3)
        layout.addWidget(self.text, 2)
        self.inside: StepInside | None = None
        self.wanted: str | None = None  # a lesson's view, chosen when the next step shows
        for signal in (self.view.currentIndexChanged, self.layer.valueChanged,
                       self.head.valueChanged, self.sink.toggled):  # fmt: skip
            signal.connect(self.redraw)

    def want(self, view: str | None, layer: int | None, head: int | None) -> None:
        """Show this view (and layer, head) from the next step on: a lesson stage's choice."""
        self.wanted = view
        for box, value in ((self.layer, layer), (self.head, head)):
            if value is not None:
                box.setMaximum(max(box.maximum(), value))
                box.setValue(value)

    def show_inside(self, inside: StepInside) -> None:
        self.inside = inside
        att = inside.attention
        current, self.wanted = self.wanted or self.view.currentData(), None
        self.view.blockSignals(True)
        self.view.clear()
        if att is not None:
            self.view.addItem("Rollout", ROLLOUT)
            self.view.addItem("Heads averaged", MEAN)
            self.view.addItem("One head", HEAD)
            if att.cross is not None:
                self.view.addItem("To the encoder", CROSS)
            i = self.view.findData(current)
            self.view.setCurrentIndex(max(0, i))
            layers, heads = att.heads.shape[:2]
            self.layer.setRange(1, layers)
            self.head.setRange(1, heads)
        self.view.blockSignals(False)
        self.redraw()

    def redraw(self, *_args: object) -> None:
        inside = self.inside
        att = inside.attention if inside is not None else None
        if att is None:
            self.note.setText(" ".join(inside.notes) if inside is not None else "")
            self.plot.show_values([], np.zeros(0), "attention")
            self.text.show_tokens([], np.zeros(0), False)
            return
        kind = self.view.currentData()
        self.layer.setEnabled(kind in (MEAN, HEAD, CROSS))
        self.head.setEnabled(kind in (HEAD, CROSS))
        layer, head = self.layer.value() - 1, self.head.value() - 1
        sources = att.sources
        if kind == ROLLOUT and att.rollout is None and att.rollout_pending:
            before = count(len(sources) - 1, "token")
            self.note.setText(f"Rollout follows in a moment: it reads the attention of the "
                              f"{before} before this one.")  # fmt: skip
            self.plot.show_values([], np.zeros(0), "attention")
            self.text.show_tokens([], np.zeros(0), False)
            return
        if kind == ROLLOUT and att.rollout is not None:
            weights, what = att.rollout, "rolled-out attention"
        elif kind == CROSS and att.cross is not None:
            weights, sources = att.cross[layer, head], att.cross_sources
            what = f"layer {layer + 1}, head {head + 1}, to the encoder"
        elif kind == HEAD:
            weights, what = att.heads[layer, head], f"layer {layer + 1}, head {head + 1}"
        else:
            weights, what = att.mean[layer], f"layer {layer + 1}, {att.heads.shape[1]} heads"
        texts = [t for _, t in sources]
        first = float(weights[0]) if len(weights) else 0.0
        if self.sink.isChecked() and len(weights) > 1 and kind != CROSS:
            rest = weights[1:].sum()
            weights = np.concatenate([[0.0], weights[1:] / rest if rest > 0 else weights[1:]])
            what += "; " + sink_note(first, float(rest))
        where = q(att.sources[-1][1]) if att.sources else "?"
        self.note.setText(f"From the position of {where} (it wrote {q(inside.token[1])}): "
                          f"{html.escape(what)}.")  # fmt: skip
        self.plot.show_values(texts, np.asarray(weights), "share")
        self.text.show_tokens(texts, np.asarray(weights), False)


class InputsPage(QWidget):
    """Integrated gradients on demand: a button, then each input token's push. While it runs:
    a progress bar, a line per round (steps, completeness so far) and Stop, which puts the page
    back as it was."""

    requested = Signal()
    stop_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.button = QPushButton("Attribute to the inputs")
        self.button.setObjectName("attribute_button")
        self.button.setToolTip(
            "Integrated gradients (Captum) of the token's log-probability with respect to the "
            "input embeddings: many forward and backward passes, a few seconds on a CPU."
        )
        self.button.clicked.connect(self.requested)
        self.stop = QPushButton("Stop")
        self.stop.setObjectName("attribute_stop")
        self.stop.setToolTip("End the attribution now; the page goes back to what it showed.")
        self.stop.clicked.connect(self.stop_requested)
        self.stop.hide()
        self.progress = QProgressBar()
        self.progress.setRange(0, 1000)
        self.progress.hide()
        self.note = label("Press the button: it costs a backward pass per step of the integral.")
        self.plot = SourcePlot()
        self.text = ShadedText()
        self.shown: InputAttribution | None = None
        layout = QVBoxLayout(self)
        row = QHBoxLayout()
        row.addWidget(self.button)
        row.addWidget(self.progress, 1)
        row.addWidget(self.stop)
        layout.addLayout(row)
        layout.addWidget(self.note)
        layout.addWidget(self.plot, 3)
        layout.addWidget(self.text, 2)

    def clear_result(self, note: str) -> None:
        self.shown = None
        self.note.setText(note)
        self.plot.show_values([], np.zeros(0), "score", signed=True)
        self.text.show_tokens([], np.zeros(0), True)

    def state(self) -> tuple[str, InputAttribution | None]:
        """What the page shows, for ``restore`` after a Stop."""
        return self.note.text(), self.shown

    def start_busy(self) -> None:
        self.button.setEnabled(False)
        self.progress.setValue(0)
        self.progress.show()
        self.stop.show()
        self.stop.setEnabled(True)
        self.clear_result("Integrating the gradients along the path… (Stop ends it)")

    def end_busy(self) -> None:
        self.button.setEnabled(True)
        self.progress.hide()
        self.stop.hide()

    def restore(self, state: tuple[str, InputAttribution | None]) -> None:
        self.end_busy()
        note, shown = state
        if shown is not None:
            self.show_attribution(shown)
        else:
            self.clear_result(note)

    def show_attribution(self, ig: InputAttribution) -> None:
        self.end_busy()
        self.shown = ig
        texts = [t for _, t in ig.sources]
        top = " · ".join(f"{q(t)} {s:+.2f}" for _, t, s in ig.top(10))
        diff = ig.value - ig.baseline_value
        good = "" if ig.relative_delta < 0.05 else " <b>(over 5%: the scores are approximate)</b>"
        self.note.setText(
            f"What pushed the log-probability of {q(ig.token[1])} (from a neutral input, the "
            f"first token kept): {top}<br>Completeness check: the scores sum to "
            f"{ig.scores.sum():+.3f}, log p went {ig.baseline_value:.2f} → {ig.value:.2f} "
            f"({diff:+.3f}): delta {ig.relative_delta:.1%}, {ig.n_steps} steps, "
            f"{ig.seconds:.1f} s.{good}"
        )
        self.plot.show_values(texts, ig.scores, "push", signed=True)
        self.text.show_tokens(texts, ig.scores, True)
