"""The Inside tab (issue 33): for the step in view, where in the model its token was decided
(the logit lens), what it looked at (attention, rollout), what pushed it over the runner-up
(direct logit attribution) and, on demand, which input tokens pushed it (integrated
gradients). It shows ``engine.internals`` records; gui.inside.actions asks for them."""

from __future__ import annotations

import html
from bisect import bisect_right

import numpy as np
from PySide6.QtCore import QEvent, Qt, Signal
from PySide6.QtGui import QColor, QFontMetrics, QTextCharFormat, QTextCursor
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QSizePolicy,
    QSpinBox,
    QTabWidget,
    QTextEdit,
    QToolTip,
    QVBoxLayout,
    QWidget,
)

from engine.internals.records import InputAttribution, LensView, LogitAttribution, StepInside
from gui.common.step_text import pct, short
from gui.common.theme import LIGHT, Theme, mix
from gui.common.token_pane import visible_text
from gui.inside.plots import DlaPlot, KlPlot, LensGrid, SourcePlot

ROLLOUT, MEAN, HEAD, CROSS = "rollout", "mean", "head", "cross"


def _label(text: str = "") -> QLabel:
    label = QLabel(text)
    label.setWordWrap(True)
    label.setTextFormat(Qt.TextFormat.RichText)
    label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
    return label


def q(text: str) -> str:
    """A token as the class reads it, quoted and escaped for rich text."""
    return f"<code>'{html.escape(short(text, 18))}'</code>"


def top1_by_layer(lens: LensView) -> str:
    """The lens's top-1 token as the layers go, one run of layers per token."""
    runs: list[tuple[int, int, str]] = []
    for layer, top in enumerate(lens.layer_top):
        text = top[0][1]
        if runs and runs[-1][2] == text:
            runs[-1] = (runs[-1][0], layer, text)
        else:
            runs.append((layer, layer, text))
    shown = [f"{a}{'' if a == b else f'–{b}'} {q(t)}" for a, b, t in runs[-8:]]
    more = "… " if len(runs) > 8 else ""
    return "Top-1 by layer: " + more + " · ".join(shown)


def dla_text(dla: LogitAttribution) -> str:
    """The split in one sentence, with the blocks that pushed most."""
    flat = [(v, layer + 1, dla.sublayers[j]) for (layer, j), v in np.ndenumerate(dla.blocks)]
    pushes = sorted(flat, reverse=True)[:3]
    top = ", ".join(f"layer {layer}'s {name} {v:+.2f}" for v, layer, name in pushes if v > 0)
    sums = " + ".join(f"{name} {dla.blocks[:, j].sum():+.2f}" for j, name in
                      enumerate(dla.sublayers))  # fmt: skip
    return (
        f"{q(dla.token[1])} over {q(dla.rival[1])}: logit difference <b>{dla.total:+.2f}</b> = "
        f"embedding {dla.embedding:+.2f} + {sums} + biases {dla.bias:+.2f}"
        f"<br>Pushed most by {top or 'no block'}."
    )


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
        self.note = _label()
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
            what += f"; the first token ({pct(first)}) left out, the rest scaled to 100%"
        where = q(att.sources[-1][1]) if att.sources else "?"
        self.note.setText(f"From the position of {where} (it wrote {q(inside.token[1])}): "
                          f"{html.escape(what)}.")  # fmt: skip
        self.plot.show_values(texts, np.asarray(weights), "share")
        self.text.show_tokens(texts, np.asarray(weights), False)


class InputsPage(QWidget):
    """Integrated gradients on demand: a button, then each input token's push."""

    requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.button = QPushButton("Attribute to the inputs")
        self.button.setObjectName("attribute_button")
        self.button.setToolTip(
            "Integrated gradients (Captum) of the token's log-probability with respect to the "
            "input embeddings: many forward and backward passes, a few seconds on a CPU."
        )
        self.button.clicked.connect(self.requested)
        self.progress = QProgressBar()
        self.progress.setRange(0, 1000)
        self.progress.hide()
        self.note = _label("Press the button: it costs a backward pass per step of the integral.")
        self.plot = SourcePlot()
        self.text = ShadedText()
        layout = QVBoxLayout(self)
        row = QHBoxLayout()
        row.addWidget(self.button)
        row.addWidget(self.progress, 1)
        layout.addLayout(row)
        layout.addWidget(self.note)
        layout.addWidget(self.plot, 3)
        layout.addWidget(self.text, 2)

    def clear_result(self, note: str) -> None:
        self.note.setText(note)
        self.plot.show_values([], np.zeros(0), "score", signed=True)
        self.text.show_tokens([], np.zeros(0), True)

    def show_attribution(self, ig: InputAttribution) -> None:
        self.progress.hide()
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


class InsideView(QWidget):
    """The tab: a header, then Lens / Attention / Logit attribution / Inputs."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("inside_view")
        self.header = _label("Click a token to look inside the step that made it.")
        self.header.setObjectName("inside_header")
        self.grid, self.kl = LensGrid(), KlPlot()
        self.top1 = _label()
        lens = QWidget()
        column = QVBoxLayout(lens)
        column.setContentsMargins(0, 0, 0, 0)
        column.addWidget(self.grid, 4)
        column.addWidget(self.top1)
        column.addWidget(self.kl, 1)
        self.attention = AttentionPage()
        self.dla, self.dla_note = DlaPlot(), _label()
        dla = QWidget()
        column = QVBoxLayout(dla)
        column.setContentsMargins(0, 0, 0, 0)
        column.addWidget(self.dla_note)
        column.addWidget(self.dla, 1)
        self.inputs = InputsPage()
        self.pages = QTabWidget()
        self.pages.setObjectName("inside_pages")
        self.pages.setDocumentMode(True)
        self.pages.addTab(lens, "Lens")
        self.pages.addTab(self.attention, "Attention")
        self.pages.addTab(dla, "Logit attribution")
        self.pages.addTab(self.inputs, "Inputs")
        layout = QVBoxLayout(self)
        layout.addWidget(self.header)
        layout.addWidget(self.pages, 1)
        self.inside: StepInside | None = None

    def plots(self) -> tuple:
        return (self.grid, self.kl, self.dla, self.attention.plot, self.inputs.plot)

    def show_message(self, text: str) -> None:
        """A line instead of a step (no model, a served one, waiting for the run to end)."""
        self.header.setText(html.escape(text))

    def show_inside(self, inside: StepInside, where: str) -> None:
        self.inside = inside
        lens = inside.lens
        if lens.decision_layer is None:
            first = lens.candidates[0][1]  # the output's top-1
            decided = f"<b>never the top-1</b> (the model's first choice: {q(first)})"
        else:
            decided = f"decided at <b>layer {lens.decision_layer}</b> of {lens.layers}"
        notes = "".join(f"<br><i>{html.escape(n)}</i>" for n in inside.notes)
        self.header.setText(f"<b>{html.escape(where)}</b> {q(inside.token[1])} · {decided} · "
                            f"{inside.seconds * 1000:.0f} ms{notes}")  # fmt: skip
        self.grid.show_lens(lens)
        self.kl.show_kl(lens.kl_bits)
        self.top1.setText(top1_by_layer(lens))
        self.attention.show_inside(inside)
        dla = inside.attribution
        self.dla.show_dla(dla)
        self.dla_note.setText(dla_text(dla) if dla is not None else "")
        self.inputs.clear_result("Press the button: it costs a backward pass per step of the "
                                 "integral (a few seconds).")  # fmt: skip

    def set_theme(self, theme: Theme) -> None:
        for plot in self.plots():
            plot.set_theme(theme)
        self.attention.text.theme = theme
        self.inputs.text.theme = theme
        self.attention.redraw()

    def set_font_size(self, points: int) -> None:
        for plot in self.plots():
            plot.set_font_size(points)
        line = QFontMetrics(self.font()).lineSpacing()
        # each plot at least five lines of its text high: an axis, its title and a few ticks
        # read (the KL curve was 95 px at 1280x720, the logit attribution ~80 px at 20 pt)
        self.kl.setMinimumHeight(5 * line + 6)
        self.dla.setMinimumHeight(5 * line)

    def set_compact(self, compact: bool) -> None:
        """The presentation view: the tokens shaded, without the bars (their labels would
        overlap at 20 pt); hover a token for its value."""
        for page in (self.attention, self.inputs):
            page.plot.setVisible(not compact)
        self.kl.setVisible(not compact)  # the grid needs the rows more than KL its curve
