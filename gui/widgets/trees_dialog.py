"""Tree > Trees…: the session's trees, the open one first and then the kept ones, newest first;
each with its prompt, whether the chat template wrapped it, its size and when it was last
open. Open (or a double click) takes one back. The dialog only shows rows it is handed."""

from __future__ import annotations

import time
from dataclasses import dataclass

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QHeaderView,
    QLabel,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

COLUMNS = ("Prompt", "Chat template", "Nodes", "Leaves", "Last open")
PROMPT_CHARS = 90  # the prompt's one line: its start and its end, the middle cut


@dataclass(frozen=True)
class TreeRow:
    prompt: str
    chat_template: bool
    nodes: int
    leaves: int
    used_at: float | None  # None: the tree open now


def one_line(prompt: str, limit: int = PROMPT_CHARS) -> str:
    flat = " ".join(prompt.split()) or "(empty prompt)"
    if len(flat) <= limit:
        return flat
    half = limit // 2 - 1
    return f"{flat[:half]}…{flat[-half:]}"


def when(used_at: float | None) -> str:
    if used_at is None:
        return "open now"
    return time.strftime("%d %b %H:%M", time.localtime(used_at))


class TreesDialog(QDialog):
    def __init__(self, parent: QWidget | None, rows: list[TreeRow]) -> None:
        super().__init__(parent)
        self.setWindowTitle("Trees of this session")
        self.table = QTreeWidget()
        self.table.setObjectName("trees_table")
        self.table.setHeaderLabels(list(COLUMNS))
        self.table.setRootIsDecorated(False)
        self.table.setWordWrap(True)
        for i, row in enumerate(rows):
            item = QTreeWidgetItem([
                one_line(row.prompt), "yes" if row.chat_template else "no", f"{row.nodes:,}",
                f"{row.leaves:,}", when(row.used_at),
            ])  # fmt: skip
            item.setToolTip(0, row.prompt[:2000])
            item.setData(0, Qt.ItemDataRole.UserRole, i)
            for col in (2, 3):
                item.setTextAlignment(col, Qt.AlignmentFlag.AlignRight)
            self.table.addTopLevelItem(item)
        header = self.table.header()
        header.setStretchLastSection(False)
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        for col in range(1, len(COLUMNS)):
            header.setSectionResizeMode(col, QHeaderView.ResizeMode.ResizeToContents)
        if rows:
            self.table.setCurrentItem(self.table.topLevelItem(0))
        note = QLabel(
            "Every tree built this session (the last 20): a new prompt or chat-template choice "
            "starts a new tree and keeps the old one. Open one to go on with it."
        )
        note.setWordWrap(True)
        buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Open | QDialogButtonBox.StandardButton.Close
        )
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        self.table.itemDoubleClicked.connect(lambda *_: self.accept())
        layout = QVBoxLayout(self)
        layout.addWidget(note)
        layout.addWidget(self.table, 1)
        layout.addWidget(buttons)
        self.resize(820, 380)

    def chosen(self) -> int | None:
        """The index of the row chosen (in the list handed in), or None."""
        item = self.table.currentItem()
        return None if item is None else int(item.data(0, Qt.ItemDataRole.UserRole))
