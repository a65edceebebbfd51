"""The Tree tab's outline widget: a tree of rows whose text column is drawn one line per row
(the outline: the tree's shape fits a 1280x720 screen, each row's whole text on hover) or, with
"Whole text", each row's whole stretch wrapped at the column's width; the keys that move the
cursor leave as a signal."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QRect, QSize, Qt, Signal
from PySide6.QtGui import QFontMetrics, QKeyEvent, QResizeEvent
from PySide6.QtWidgets import QStyledItemDelegate, QStyleOptionViewItem, QTreeWidget

KEYS = {
    Qt.Key.Key_Left: "parent",
    Qt.Key.Key_Right: "child",
    Qt.Key.Key_Down: "next",
    Qt.Key.Key_Up: "previous",
    Qt.Key.Key_Home: "root",
}


class RowText(QStyledItemDelegate):
    """The text column: one line cut with "…" (the outline), or, when the view shows the whole
    text, rows as tall as their wrapped text at the column's width (a tree view's own size hint
    ignores the width and the default delegate then elides)."""

    def __init__(self, view: Outline) -> None:
        super().__init__(view)
        self.view = view

    def initStyleOption(self, option: QStyleOptionViewItem, index: Any) -> None:  # noqa: N802
        super().initStyleOption(option, index)
        if self.view.whole_text:
            option.features |= QStyleOptionViewItem.ViewItemFeature.WrapText
        else:
            option.features &= ~QStyleOptionViewItem.ViewItemFeature.WrapText
            option.textElideMode = Qt.TextElideMode.ElideRight

    def sizeHint(self, option: QStyleOptionViewItem, index: Any) -> QSize:  # noqa: N802
        hint = super().sizeHint(option, index)
        if index.column() != 0 or not self.view.whole_text:
            return hint
        depth, up = 0, index.parent()
        while up.isValid():
            depth, up = depth + 1, up.parent()
        room = self.view.columnWidth(0) - self.view.indentation() * (depth + 1) - 8
        drawn = QStyleOptionViewItem(option)
        self.initStyleOption(drawn, index)  # the font as painted: the row's bold on the view's
        rect = QFontMetrics(drawn.font).boundingRect(
            QRect(0, 0, max(40, room), 100_000), int(Qt.TextFlag.TextWordWrap), drawn.text
        )
        return QSize(hint.width(), max(hint.height(), rect.height() + 4))


class Outline(QTreeWidget):
    key_move = Signal(str)

    def __init__(self) -> None:
        super().__init__()
        self.whole_text = False  # the outline: one line per row
        self.setItemDelegateForColumn(0, RowText(self))
        self.setTextElideMode(Qt.TextElideMode.ElideNone)  # the numbers are never cut
        self.setUniformRowHeights(True)

    def show_whole_text(self, on: bool) -> None:
        """Each row's whole stretch, wrapped (on), or one line per row (off)."""
        self.whole_text = on
        self.setWordWrap(on)
        self.setUniformRowHeights(not on)
        self.scheduleDelayedItemsLayout()
        self.viewport().update()

    def keyPressEvent(self, event: QKeyEvent) -> None:  # noqa: N802 - Qt override
        move = KEYS.get(Qt.Key(event.key()))
        if move is not None and not event.modifiers():
            self.key_move.emit(move)
            event.accept()
            return
        super().keyPressEvent(event)

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 - Qt override
        super().resizeEvent(event)
        if self.whole_text:
            self.scheduleDelayedItemsLayout()  # wrapped rows take the new width's height

    def relayout(self, *_args: object) -> None:
        """A column was resized: the wrapped rows are measured again."""
        if self.whole_text:
            self.scheduleDelayedItemsLayout()
