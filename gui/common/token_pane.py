"""The output pane: one coloured span per token, hover for details, click to inspect a step."""

from __future__ import annotations

import html
from bisect import bisect_right
from typing import Any

from PySide6.QtCore import QEvent, QPoint, Qt, Signal
from PySide6.QtGui import QColor, QMouseEvent, QTextCharFormat, QTextCursor, QTextFormat
from PySide6.QtWidgets import QTextEdit, QToolTip, QWidget

from engine.palette import decision_colour, prob_colour
from engine.records import Step
from gui.common.step_text import how_chosen
from gui.common.theme import LIGHT, Theme, bucket_of

COLOR_BY_RANK = "rank"
COLOR_BY_PROB = "probability"
COLOR_BY_DECISION = "decision"  # the layer from which the token is the logit lens's top-1


SPECIAL_SMALLER = -2  # a special token's chip: two of Qt's relative steps below the pane's type


def decision_legend(theme: Theme, layers: int) -> str:
    """The key of the decision colours (rich text), or what is being read."""
    if not layers:
        return "Decision layer: reading the model's layers…"

    def chip(color: QColor, label: str) -> str:
        style = f"background:{color.name()}; color:{theme.text}"
        return f"<span style='{style}'>&nbsp;{label}&nbsp;</span>"

    marks = sorted({0, layers // 3, 2 * layers // 3, layers})
    chips = " ".join(chip(decision_color(theme, k, layers), str(k)) for k in marks)
    never = chip(decision_color(theme, None, layers), "never top-1")
    return f"Decided at layer: {chips} (of {layers}) {never}"


def decision_tip(pane: Any, index: int) -> str:
    """The tooltip's line about a token's decision layer, where the pane has read it."""
    if index not in pane.decisions:
        return ""
    d = pane.decisions[index]
    return ("<br>never the logit lens's top-1" if d is None
            else f"<br>decided at layer {d} of {pane.layers}")  # fmt: skip


def decision_color(theme: Theme, layer: int | None, layers: int) -> QColor:
    """The colour of a token decided at ``layer`` of ``layers`` (None: never the top-1)."""
    return QColor(decision_colour(theme.name, layer, layers))  # the web page's colour too


def visible_text(text: str) -> str:
    """Make whitespace a person cannot see visible: newlines get a ↵ mark, tabs an arrow."""
    return text.replace("\t", "→\t").replace("\n", "↵\n")


def tooltip_html(step: Step) -> str:
    rows = "".join(
        f"<tr><td>{i + 1}.</td><td><code>{html.escape(repr(c.text))}</code></td>"
        f"<td align=right>{c.raw_prob:.1%}</td></tr>"
        for i, c in enumerate(step.candidates[:5])
    )
    how = how_chosen(step)  # "the class's choice" for a live round's sampler
    return (
        f"<b>Step {step.index + 1}</b>: <code>{html.escape(repr(step.token_str))}</code> "
        f"(id {step.token_id}, {how})<br>"
        f"probability {step.raw_prob:.1%} (after the sampler {step.prob:.1%}), rank {step.rank}<br>"
        f"<table>{rows}</table>"
    )


def span_at(spans: list[tuple[int, int]], position: int) -> int | None:
    """The index of the span holding document ``position`` (the end of the last span counts as
    in it); spans are sorted and may be empty (a hidden special token). A binary search: a long
    run has tens of thousands of spans and this runs on every hover."""
    i = bisect_right(spans, position, key=lambda span: span[0]) - 1
    while i >= 0 and spans[i][0] == spans[i][1]:
        i -= 1
    if i >= 0 and spans[i][0] <= position < spans[i][1]:
        return i
    last = len(spans) - 1
    return last if spans and position == spans[last][1] else None


class TokenPane(QTextEdit):
    token_clicked = Signal(int)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setReadOnly(True)
        self.setObjectName("token_pane")
        self.setMouseTracking(True)
        self.setPlaceholderText(
            "Generated tokens appear here, one coloured box per token. Hover a token for its "
            "details; click it to show its step in the plots."
        )
        self.theme: Theme = LIGHT
        self.mode = COLOR_BY_RANK
        self._steps: list[Step] = []  # the run store's list once bound; read, never changed
        self._spans: list[tuple[int, int]] = []  # document positions of each shown step's text
        self.selected: int | None = None
        self.show_special = True
        # the run's decision layers (Colour by decision layer): step index -> layer or None
        self.decisions: dict[int, int | None] = {}
        self.layers = 0
        # one format per look (colour, underline, selected...), shared by every span that has
        # it: 80,000 tokens need a few dozen formats, not 80,000 (which made opening slow)
        self._formats: dict[tuple[Any, ...], QTextCharFormat] = {}

    def bind(self, store: Any) -> None:
        """Show the steps of ``store`` (a ``gui.core.store.RunStore``)."""
        self._store = store

    @property
    def steps(self) -> list[Step]:
        """The shown steps (the store's records, which may have been lightened since)."""
        store = getattr(self, "_store", None)
        steps = store.steps if store is not None else self._steps
        return steps[: len(self._spans)]

    # -- content ------------------------------------------------------------------------------

    def clear_tokens(self) -> None:
        self._steps.clear()
        self._spans.clear()
        self.decisions = {}
        self.selected = None
        self.clear()

    def truncate(self, keep: int) -> None:
        """Remove the shown text of the steps from ``keep`` on."""
        if keep >= len(self._spans):
            return
        if keep == 0:
            self.clear_tokens()
            return
        self.decisions = {i: d for i, d in self.decisions.items() if i < keep}
        cursor = QTextCursor(self.document())
        cursor.setPosition(self._spans[keep][0])
        cursor.movePosition(QTextCursor.MoveOperation.End, QTextCursor.MoveMode.KeepAnchor)
        cursor.removeSelectedText()
        del self._spans[keep:]
        del self._steps[keep:]
        if self.selected is not None and self.selected >= keep:
            self.selected = None

    def append_steps(self, steps: list[Step]) -> None:
        """Show ``steps`` after the ones shown (they continue the bound store's list)."""
        if not steps:
            return
        if getattr(self, "_store", None) is None:
            self._steps.extend(steps)
        cursor = QTextCursor(self.document())
        cursor.movePosition(QTextCursor.MoveOperation.End)
        # One edit block: the document lays itself out once at the end, not after every token
        # (which made opening a long run quadratic in its length: 80,000 steps took minutes).
        cursor.beginEditBlock()
        for step in steps:
            start = cursor.position()
            cursor.insertText(self.shown_text(step), self._format(step))
            self._spans.append((start, cursor.position()))
        cursor.endEditBlock()
        self.ensureCursorVisible()
        bar = self.verticalScrollBar()
        bar.setValue(bar.maximum())

    def shown_text(self, step: Step) -> str:
        """What the pane writes for a step: its text; a special token as a small mark with its
        name (or nothing, when special tokens are hidden)."""
        if step.special:
            return f" {step.token_str.strip()} " if self.show_special else ""
        return visible_text(step.text) if step.text else ("∎" if step.is_eos else "·")

    def set_show_special(self, show: bool) -> None:
        """Show or hide special tokens (redraws the text; the steps stay)."""
        if show == self.show_special:
            return
        self.show_special = show
        steps = list(self.steps)
        selected = self.selected
        self._spans.clear()
        self.clear()
        if getattr(self, "_store", None) is None:
            self._steps = []
        self.append_steps(steps)
        if selected is not None:
            self.select(selected)

    def _format(self, step: Step, selected: bool = False) -> QTextCharFormat:
        if step.special:
            key: tuple[Any, ...] = ("special",)
        else:
            color = self.color_for(step)
            key = (color.rgba(), step.index % 2, selected)
        fmt = self._formats.get(key)
        if fmt is None:
            fmt = self._formats[key] = self._new_format(step, selected)
        return fmt

    def _new_format(self, step: Step, selected: bool) -> QTextCharFormat:
        fmt = QTextCharFormat()
        if step.special:  # a grey chip in a smaller type: not part of the prose
            fmt.setBackground(QColor(self.theme.muted))
            fmt.setForeground(QColor(self.theme.base))
            # two steps smaller than the pane's type (1.2² = 0.69x), whatever size it takes
            # later: a point size fixed here kept presentation's 16 pt in the normal view
            fmt.setProperty(QTextFormat.Property.FontSizeAdjustment, SPECIAL_SMALLER)
            return fmt
        fmt.setBackground(self.color_for(step))
        fmt.setForeground(QColor(self.theme.text))
        if step.index % 2:  # alternate a thin underline so token boundaries show
            fmt.setUnderlineStyle(QTextCharFormat.UnderlineStyle.DotLine)
            fmt.setUnderlineColor(QColor(self.theme.muted))
        if selected:
            fmt.setFontOverline(True)
            fmt.setFontUnderline(True)
            fmt.setUnderlineStyle(QTextCharFormat.UnderlineStyle.SingleUnderline)
            fmt.setUnderlineColor(QColor(self.theme.chosen))
            fmt.setForeground(QColor(self.theme.chosen))
            fmt.setFontWeight(700)
        return fmt

    def color_for(self, step: Step) -> QColor:
        if step.forced:
            return QColor(self.theme.forced)
        if step.source == "draft":
            return QColor(self.theme.draft)
        if step.source == "target":
            return QColor(self.theme.target)
        if self.mode == COLOR_BY_PROB:
            return QColor(prob_colour(self.theme.name, step.raw_prob))  # as the web page
        if self.mode == COLOR_BY_DECISION:
            if step.index not in self.decisions:  # not read yet: plain
                return QColor(self.theme.base)
            return decision_color(self.theme, self.decisions[step.index], self.layers)
        return QColor(self.theme.buckets[bucket_of(step.rank)])

    def restyle(self) -> None:
        """Re-colour every span (colour mode or theme changed)."""
        cursor = QTextCursor(self.document())
        for step, (a, b) in zip(self.steps, self._spans, strict=True):
            cursor.setPosition(a)
            cursor.setPosition(b, QTextCursor.MoveMode.KeepAnchor)
            cursor.setCharFormat(self._format(step, step.index == self.selected))

    def set_mode(self, mode: str) -> None:
        self.mode = mode
        self.restyle()

    def set_decisions(self, strip: Any) -> None:
        """The decision layers of the shown steps (an ``engine.internals`` DecisionStrip)."""
        self.layers = strip.layers
        self.decisions = {strip.first + i: d for i, d in enumerate(strip.decision)}
        if self.mode == COLOR_BY_DECISION:
            self.restyle()

    def set_theme(self, theme: Theme) -> None:
        self.theme = theme
        self._formats.clear()  # their text and underline colours were the old theme's
        self.restyle()

    def select(self, index: int | None) -> None:
        """Outline one token (or none)."""
        previous, self.selected = self.selected, index
        cursor = QTextCursor(self.document())
        for i in {previous, index} - {None}:
            if i is not None and i < len(self.steps):
                a, b = self._spans[i]
                cursor.setPosition(a)
                cursor.setPosition(b, QTextCursor.MoveMode.KeepAnchor)
                cursor.setCharFormat(self._format(self.steps[i], i == index))

    def show_step(self, index: int) -> None:
        """Scroll so that step ``index`` is in view (a third from the top), if it is not."""
        if not 0 <= index < len(self._spans):
            return
        cursor = QTextCursor(self.document())
        cursor.setPosition(self._spans[index][0])
        rect, view = self.cursorRect(cursor), self.viewport().rect()
        if not view.contains(rect):
            bar = self.verticalScrollBar()
            bar.setValue(bar.value() + rect.top() - view.height() // 3)

    # -- mouse --------------------------------------------------------------------------------

    def step_at(self, pos: QPoint) -> int | None:
        return span_at(self._spans, self.cursorForPosition(pos).position())

    def mouseReleaseEvent(self, event: QMouseEvent) -> None:  # noqa: N802 - Qt override
        super().mouseReleaseEvent(event)
        if event.button() == Qt.MouseButton.LeftButton and not self.textCursor().hasSelection():
            index = self.step_at(event.position().toPoint())
            if index is not None:
                self.select(index)
                self.token_clicked.emit(index)

    def viewportEvent(self, event: QEvent) -> bool:  # noqa: N802 - Qt override
        if event.type() == QEvent.Type.ToolTip:
            index = self.step_at(event.pos())
            if index is not None:
                tip = tooltip_html(self.steps[index]) + decision_tip(self, index)
                QToolTip.showText(event.globalPos(), tip, self)
            else:
                QToolTip.hideText()
            return True
        return super().viewportEvent(event)
