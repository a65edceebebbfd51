"""Labels that fit their box instead of clipping: one that elides its plain text (the whole
text in its tooltip), and one that picks the longest of several rich-text versions that fits
on one line (a legend that never takes two lines)."""

from __future__ import annotations

from PySide6.QtCore import QEvent, Qt
from PySide6.QtGui import QFontMetrics, QPaintEvent, QResizeEvent, QTextDocument
from PySide6.QtWidgets import (
    QComboBox,
    QLabel,
    QSizePolicy,
    QStyle,
    QStyleOptionComboBox,
    QStylePainter,
    QWidget,
)


class ElidedLabel(QLabel):
    """Plain text on one line, cut with "…" when the box is too narrow; the tooltip then
    holds the whole text (a status message must never widen the window, nor be lost)."""

    def __init__(
        self, text: str = "", parent: QWidget | None = None,
        mode: Qt.TextElideMode = Qt.TextElideMode.ElideRight, prefix: str = "",
    ) -> None:  # fmt: skip
        super().__init__(parent)
        self.setTextFormat(Qt.TextFormat.PlainText)
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.setMinimumWidth(1)
        self._full = ""
        self._mode = mode  # ElideLeft: the end of the text matters (a prompt's last words)
        self._prefix = prefix  # shown whole before the text ("Prompt: ")
        self.setText(text)

    def text(self) -> str:  # the whole message, as set (what is drawn: shown_text)
        return self._full

    def full_text(self) -> str:
        return self._full

    def shown_text(self) -> str:
        return super().text()

    def setText(self, text: str) -> None:  # noqa: N802 - Qt override
        self._full = text
        self._elide()

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 - Qt override
        super().resizeEvent(event)
        self._elide()

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802 - Qt override
        super().changeEvent(event)
        if event.type() == QEvent.Type.FontChange:  # the presentation view, A+ / A-
            self._elide()

    def _elide(self) -> None:
        metrics = QFontMetrics(self.font())
        room = max(1, self.contentsRect().width() - metrics.horizontalAdvance(self._prefix))
        shown = metrics.elidedText(self._full, self._mode, room)
        if self._mode == Qt.TextElideMode.ElideLeft and shown != self._full:
            shown = _from_a_word(self._full, shown)
        super().setText(self._prefix + shown if self._full else "")
        self.setToolTip(self._full if shown != self._full else "")


def _from_a_word(full: str, shown: str) -> str:
    """A text cut at its start ("…ce upon a time") begun at a word instead ("… upon a time")."""
    tail = shown[1:]  # after the "…"
    cut = len(full) - len(tail)
    if cut <= 0 or full[cut - 1] == " " or " " not in tail:
        return shown
    return "…" + tail[tail.index(" ") :]


class OneLineLabel(QLabel):
    """Rich text on one line: shows the first of ``versions`` (longest first) that fits, the
    first one in the tooltip, so a legend shortens instead of wrapping onto a second line."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setTextFormat(Qt.TextFormat.RichText)
        self.setWordWrap(False)
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.setMinimumWidth(1)
        self._versions: tuple[str, ...] = ("",)

    def set_versions(self, versions: tuple[str, ...]) -> None:
        self._versions = versions or ("",)
        self.setToolTip(self._versions[0])
        self._pick()

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 - Qt override
        super().resizeEvent(event)
        self._pick()

    def _pick(self) -> None:
        room = self.contentsRect().width()
        doc = QTextDocument()
        doc.setDefaultFont(self.font())
        for html in self._versions:
            doc.setHtml(html)
            if doc.idealWidth() <= room:
                break
        if self.text() != html:
            super().setText(html)


class ElidedCombo(QComboBox):
    """A combo box that draws its current text cut with "…" when the box is too narrow (Qt
    cuts it mid-letter) and then shows the whole text in the tooltip; the popup is unchanged."""

    def shown_text(self) -> str:
        """The text as drawn in the box now."""
        opt = QStyleOptionComboBox()
        self.initStyleOption(opt)
        room = (
            self.style()
            .subControlRect(
                QStyle.ComplexControl.CC_ComboBox, opt, QStyle.SubControl.SC_ComboBoxEditField, self
            )
            .width()
        )
        return QFontMetrics(self.font()).elidedText(
            self.currentText(), Qt.TextElideMode.ElideRight, max(1, room)
        )

    def paintEvent(self, _event: QPaintEvent) -> None:  # noqa: N802 - Qt override
        painter = QStylePainter(self)
        opt = QStyleOptionComboBox()
        self.initStyleOption(opt)
        shown = self.shown_text()
        opt.currentText = shown
        painter.drawComplexControl(QStyle.ComplexControl.CC_ComboBox, opt)
        painter.drawControl(QStyle.ControlElement.CE_ComboBoxLabel, opt)
        clipped = shown != self.currentText()
        if clipped and self.property("elided_tip") != self.currentText():
            self.setProperty("elided_tip", self.currentText())
            self.setProperty("own_tip", self.toolTip())
            self.setToolTip(f"{self.currentText()}\n\n{self.toolTip()}".strip())
        elif not clipped and self.property("elided_tip"):
            self.setToolTip(str(self.property("own_tip") or ""))
            self.setProperty("elided_tip", "")
