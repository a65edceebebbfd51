"""Tree > Trees…: the session's trees, the open one first and then the kept ones, newest first;
each with its prompt, whether the chat template wrapped it, its size and when it was last
open. Open (or a double click) takes one back. The dialog only shows rows it is handed."""

from __future__ import annotations

import time
from dataclasses import dataclass

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QShowEvent
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QHeaderView,
    QLabel,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

COLUMNS = ("Prompt", "Template", "Nodes", "Leaves", "Last open")
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
        self.table = QTableWidget(len(rows), len(COLUMNS))
        self.table.setObjectName("trees_table")
        self.table.setHorizontalHeaderLabels(list(COLUMNS))
        self.table.horizontalHeaderItem(1).setToolTip("Whether the chat template wrapped the "
                                                      "prompt")  # fmt: skip
        self.table.verticalHeader().hide()
        self.table.setWordWrap(True)  # a long prompt wraps in its cell
        self.table.setSelectionBehavior(QTableWidget.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QTableWidget.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        for i, row in enumerate(rows):
            cells = (one_line(row.prompt), "yes" if row.chat_template else "no",
                     f"{row.nodes:,}", f"{row.leaves:,}", when(row.used_at))  # fmt: skip
            for col, text in enumerate(cells):
                item = QTableWidgetItem(text)
                if col in (2, 3):
                    item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignTop)
                self.table.setItem(i, col, item)
            self.table.item(i, 0).setToolTip(row.prompt[:2000])
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        for col in range(1, len(COLUMNS)):
            header.setSectionResizeMode(col, QHeaderView.ResizeMode.ResizeToContents)
        if rows:
            self.table.selectRow(0)
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
        self.table.cellDoubleClicked.connect(lambda *_: self.accept())
        layout = QVBoxLayout(self)
        layout.addWidget(note)
        layout.addWidget(self.table, 1)
        layout.addWidget(buttons)
        # most of the window (at 20 pt a fixed size left the prompt as "Once upo…")
        big = parent.window().size() * 0.85 if parent is not None else QSize(820, 380)
        self.resize(max(640, big.width()), max(320, int(big.height() * 0.7)))

    def showEvent(self, event: QShowEvent) -> None:  # noqa: N802 - Qt override
        super().showEvent(event)
        self.table.resizeRowsToContents()  # wrapped prompts at the width they got

    def chosen(self) -> int | None:
        """The index of the row chosen (in the list handed in), or None."""
        rows = self.table.selectionModel().selectedRows()
        return rows[0].row() if rows else None
