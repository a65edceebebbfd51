"""The Score view (issue 25, GLTR's view with our plots): a text read through the model's eyes.
Every token is coloured by its rank in the model's distribution (top-1 / top-10 / top-100 /
beyond, the output pane's Okabe-Ito buckets), its surprisal is in the tooltip and in a small
bar plot below, and the totals (log-probability, perplexity) head the view.

The tokens are shown as ``Step``-shaped records (``score_steps``), so the output pane's token
drawing and the distribution plot serve a scored text as they serve a run."""

from __future__ import annotations

import html
import math

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QEvent, Qt, Signal
from PySide6.QtGui import QFont, QFontMetrics
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSizePolicy,
    QSplitter,
    QToolTip,
    QVBoxLayout,
    QWidget,
)

from engine.records import SCORED, Candidate, Step
from engine.tree.scored import ScoredToken, TextScore
from engine.words import count
from gui.common.fitting import ElidedCombo
from gui.common.series_plot import still_plot, style_axes, tick_font
from gui.common.step_text import pct, short
from gui.common.theme import BUCKET_LABELS, LIGHT, Theme, bucket_of
from gui.common.token_pane import (
    COLOR_BY_DECISION,
    COLOR_BY_RANK,
    TokenPane,
    decision_legend,
    decision_tip,
)


def score_steps(score: TextScore) -> list[Step]:
    """One Step-shaped record per scored token; ``index`` is its place among the scored tokens
    (the pane and the plot address tokens by it) and the probabilities are the model's own
    (no sampler: before and after are the same)."""
    steps = []
    for i, t in enumerate(score.tokens):
        p = math.exp(t.logprob)
        cands = tuple(Candidate(tid, text, q, q) for tid, text, q in t.top)
        steps.append(Step(index=i, token_id=t.token_id, text=t.text, token_str=t.text,
                          raw_prob=p, prob=p, rank=t.rank, candidates=cands,
                          survivors=len(cands), entropy_raw=t.entropy, entropy=t.entropy,
                          step_time=0.0, tokens_per_s=0.0, source=SCORED))  # fmt: skip
    return steps


NO_CONTEXT = (
    "no context: read after the document start alone, a guess from nothing (not counted as "
    "the most surprising)"
)


def token_tooltip(t: ScoredToken, no_context: bool = False) -> str:
    rows = "".join(
        f"<tr><td>{k + 1}.</td><td><code>{html.escape(repr(text))}</code></td>"
        f"<td align=right>{html.escape(pct(p))}</td></tr>"
        for k, (_id, text, p) in enumerate(t.top[:5])
    )
    return (
        f"<b>Token {t.index + 1}</b>: <code>{html.escape(repr(t.text))}</code> (id {t.token_id})"
        f"<br>probability {html.escape(pct(math.exp(t.logprob)))}, rank {t.rank_text}, surprisal "
        f"{t.surprisal:.2f} bits{f'<br><i>{NO_CONTEXT}</i>' if no_context else ''}"
        f"<br><table>{rows}</table>"
    )


def totals_text(score: TextScore, compact: bool = False) -> str:
    """The view's head line; ``compact`` (the presentation view): tokens and perplexity alone,
    the rest in the line's tooltip (``totals_text`` in full)."""
    n = len(score.tokens)
    if compact:
        return f"<b>{count(n, 'token')}</b> · perplexity <b>{score.perplexity:.1f}</b>"
    skipped = f" · {score.unscored} first token without context, not scored" * bool(score.unscored)
    if score.no_context and score.tokens:
        skipped = (f" · token {score.tokens[0].index + 1} (grey bar): no context, read after the"
                   " document start alone; give a context for a fairer first word")  # fmt: skip
    return (
        f"<b>{count(n, 'token')}</b> · total log-probability <b>{score.total_logprob:.2f}</b> "
        f"nats · perplexity <b>{score.perplexity:.2f}</b>{skipped}"
    )


def legend_html(theme: Theme, compact: bool = False) -> str:
    """The rank key; ``compact`` (the presentation view): the chips alone, "Rank:" before them."""
    chips = "".join(
        f"<span style='background:{color}; color:{theme.text}'>&nbsp;{label}&nbsp;</span> "
        for color, label in zip(theme.buckets, BUCKET_LABELS, strict=True)
    )
    head = "Rank" if compact else "Rank in the model's list"
    return f"{head}: {chips}"


class ScorePane(TokenPane):
    """The scored text: the output pane's drawing, coloured by rank, with the score's tooltip."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("score_pane")
        self.setPlaceholderText("File > Score a text…: paste or open a text to read it here.")
        self.mode = COLOR_BY_RANK
        self.scored: list[ScoredToken] = []
        self.no_context = False  # the first token was read with no context

    def show_score(self, score: TextScore, steps: list[Step]) -> None:
        self.clear_tokens()
        self.scored = list(score.tokens)
        self.no_context = score.no_context
        self.append_steps(steps)
        self.verticalScrollBar().setValue(0)  # read from the start

    def viewportEvent(self, event: QEvent) -> bool:  # noqa: N802 - Qt override
        if event.type() == QEvent.Type.ToolTip:
            index = self.step_at(event.pos())
            if index is not None and index < len(self.scored):
                first = self.no_context and index == 0
                tip = token_tooltip(self.scored[index], first) + decision_tip(self, index)
                QToolTip.showText(event.globalPos(), tip, self)
            else:
                QToolTip.hideText()
            return True
        return super().viewportEvent(event)


class SurprisalPlot(pg.PlotWidget):
    """One bar per token at its token number (as the header and the text number it): its
    surprisal in bits, coloured by its rank bucket, a no-context first token grey; click a bar
    to pick that token."""

    token_clicked = Signal(int)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("surprisal_plot")
        plot = still_plot(self)
        plot.getAxis("left").enableAutoSIPrefix(False)
        self.setLabel("left", "bits")
        self.setLabel("bottom", "token")
        self.bars = pg.BarGraphItem(x=[], height=[], width=0.8)
        self.addItem(self.bars)
        self.marker = pg.InfiniteLine(angle=90, movable=False)
        self.addItem(self.marker)
        self.marker.hide()
        self.theme = LIGHT
        self.ranks: list[int] = []
        self.values = np.zeros(0)
        self.numbers = np.zeros(0)  # each bar's token number (1-based, the header's)
        self.grey = False  # the first bar is a no-context token
        self.scene().sigMouseClicked.connect(self._clicked)
        self.set_theme(LIGHT)

    def set_theme(self, theme: Theme) -> None:
        self.theme = theme
        style_axes(self, theme)
        self.marker.setPen(pg.mkPen(theme.chosen, width=2, style=Qt.PenStyle.DashLine))
        self._draw()

    def set_font_size(self, points: int) -> None:
        font = tick_font(self, points)
        for name in ("left", "bottom"):
            self.getPlotItem().getAxis(name).label.setFont(font)
        # five lines of its labels, the least a plot reads at (tests/gui/audit_probe.py)
        self.setMinimumHeight(max(110, 5 * QFontMetrics(font).lineSpacing()))

    def set_tokens(self, surprisals: list[float], ranks: list[int],
                   numbers: list[int] | None = None, grey_first: bool = False) -> None:  # fmt: skip
        self.values, self.ranks = np.asarray(surprisals, dtype=float), list(ranks)
        first = numbers[0] if numbers else 1
        self.numbers = np.asarray(numbers or range(first, first + len(ranks)), dtype=float)
        self.grey = grey_first
        self._draw()
        self.mark(None)

    def _draw(self) -> None:
        n = len(self.values)
        brushes = [pg.mkBrush(self.theme.buckets[bucket_of(r)]) for r in self.ranks]
        if self.grey and brushes:
            brushes[0] = pg.mkBrush(self.theme.muted)
        self.bars.setOpts(x=self.numbers, height=self.values, brushes=brushes,
                          pen=pg.mkPen(self.theme.muted, width=0.5))  # fmt: skip
        first = float(self.numbers[0]) if n else 1.0
        self.setXRange(first - 0.6, first + max(n, 10) - 0.4, padding=0)
        top = float(self.values.max()) if n else 1.0
        self.setYRange(0, max(1.0, top * 1.15), padding=0)  # room for the top tick's label

    def mark(self, index: int | None) -> None:
        """Mark the bar of the ``index``-th token scored (a position, not a token number)."""
        shown = index is not None and 0 <= index < len(self.numbers)
        self.marker.setVisible(shown)
        if shown:
            self.marker.setPos(float(self.numbers[index]))

    def _clicked(self, event: object) -> None:
        pos = self.getPlotItem().getViewBox().mapSceneToView(event.scenePos())  # type: ignore[attr-defined]
        hit = np.flatnonzero(np.abs(self.numbers - pos.x()) <= 0.5)
        if hit.size:
            self.token_clicked.emit(int(hit[0]))


class ScoreView(QWidget):
    """Totals, the rank key, the coloured text and the surprisal plot; "Back to the run"
    closes it (``closed``); a click on a token (text or bar) emits ``token_clicked``."""

    token_clicked = Signal(int)
    closed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("score_view")
        self.title = QLabel("<b>Scored text</b>")
        self.title.setObjectName("score_title")
        self.title.setWordWrap(True)  # a long model name wraps: it never widens the column
        self.totals = QLabel("")
        self.totals.setObjectName("score_totals")
        self.totals.setWordWrap(True)
        self.totals.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.legend = QLabel(legend_html(LIGHT))
        self.legend.setObjectName("score_legend")
        self.legend.setWordWrap(True)  # the key wraps in a narrow column, never cut
        self.colour = ElidedCombo()  # as the output's: by rank, or by decision layer
        self.colour.setObjectName("score_colour")
        self.colour.addItem("Colour by rank", COLOR_BY_RANK)
        self.colour.addItem("Colour by decision layer", COLOR_BY_DECISION)
        self.colour.setToolTip("Rank in the model's list, or the layer from which each token "
                               "is the logit lens's top choice (one forward pass).")  # fmt: skip
        self.colour.currentIndexChanged.connect(self._colour_changed)
        # elided in a narrow column (the popup shows the whole text): it never widens it
        self.colour.setSizeAdjustPolicy(
            QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon
        )
        self.colour.setMinimumContentsLength(4)
        self.theme = LIGHT
        self.score: TextScore | None = None
        self.what = ""
        self.compact = False  # the presentation view's short heads (set_compact)
        self.back = QPushButton("Back to the run")
        self.back.setToolTip("Close the scored text and show the run's output again.")
        self.back.clicked.connect(self.closed)
        self.pane = ScorePane()
        self.plot = SurprisalPlot()
        self.plot.setToolTip(
            "Surprisal per token, in bits (−log₂ p): tall bars surprised the model. "
            "Colours as in the text; click a bar to pick its token."
        )
        split = QSplitter(Qt.Orientation.Vertical)
        split.setChildrenCollapsible(False)  # a drag never leaves a part at 0 px
        split.addWidget(self.pane)
        split.addWidget(self.plot)
        split.setStretchFactor(0, 3)
        split.setStretchFactor(1, 1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        top = QHBoxLayout()
        top.addWidget(self.title, 1)
        top.addWidget(self.back)
        layout.addLayout(top)
        layout.addWidget(self.totals)
        key = QHBoxLayout()  # the key beside its choice (the title's row has no room at 20 pt)
        key.addWidget(self.legend, 1)
        key.addWidget(self.colour, 0, Qt.AlignmentFlag.AlignTop)
        layout.addLayout(key)
        layout.addWidget(split, 1)
        self.pane.token_clicked.connect(self.token_clicked)
        self.plot.token_clicked.connect(self.token_clicked)

    def show_score(self, score: TextScore, steps: list[Step], what: str = "") -> None:
        self.score, self.what = score, what
        self._heads()
        self.pane.show_score(score, steps)
        self.plot.set_tokens([t.surprisal for t in score.tokens], [t.rank for t in score.tokens],
                             [t.index + 1 for t in score.tokens], score.no_context)  # fmt: skip

    def set_compact(self, compact: bool) -> None:
        """The presentation view: the heads in one short line each (the whole text a hover
        away), so the text and its plot keep the column's height at 20 pt."""
        self.compact = compact
        self.back.setText("◀ Run" if compact else "Back to the run")
        self.colour.setMinimumContentsLength(2 if compact else 4)
        self._heads()
        self.update_legend()

    def _heads(self) -> None:
        what = html.escape(self.what)
        full = f"<b>Scored text</b> {what}"
        self.title.setText("<b>Scored text</b>" if self.compact and what else full)
        self.title.setToolTip(full if self.compact else "")
        if self.score is None:
            return
        self.totals.setText(totals_text(self.score, self.compact))
        self.totals.setToolTip(totals_text(self.score) if self.compact else "")

    def select(self, index: int | None) -> None:
        self.pane.select(index)
        self.plot.mark(index)

    def _colour_changed(self, *_args: object) -> None:
        self.pane.set_mode(self.colour.currentData())
        self.update_legend()

    def update_legend(self) -> None:
        if self.pane.mode == COLOR_BY_DECISION:
            self.legend.setText(decision_legend(self.theme, self.pane.layers))
        else:
            self.legend.setText(legend_html(self.theme, self.compact))

    def set_theme(self, theme: Theme) -> None:
        self.theme = theme
        self.pane.set_theme(theme)
        self.plot.set_theme(theme)
        self.update_legend()

    def set_font_size(self, points: int) -> None:
        mono = QFont("DejaVu Sans Mono")
        mono.setStyleHint(QFont.StyleHint.Monospace)
        mono.setPointSize(points + 3)  # as the output pane
        self.pane.setFont(mono)
        self.pane.document().setDefaultFont(mono)
        self.plot.set_font_size(max(8, points - 1))


def describe_token(t: ScoredToken, compact: bool = False, no_context: bool = False) -> str:
    """The line above the distribution plot while it shows a scored token (``compact``: the
    presentation view, where two lines at 20 pt is all the room there is); ``no_context``:
    the token was read with no context."""
    p = html.escape(pct(math.exp(t.logprob)))
    word = f"<code>'{html.escape(short(t.text, 16 if compact else 24))}'</code>"
    if compact:
        alone = " · no context" if no_context else ""
        return (f"<b>Token {t.index + 1}</b>: {word} {p} · rank {t.rank_text} · "
                f"{t.surprisal:.1f} bits{alone}")  # fmt: skip
    alone = f" · <i>{NO_CONTEXT}</i>" if no_context else " · the model's own probabilities"
    return (
        f"<b>Scored token {t.index + 1}</b>: {word} {p}, rank {t.rank_text}, surprisal "
        f"{t.surprisal:.2f} bits{alone}"
    )
