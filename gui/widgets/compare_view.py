"""Several methods on the same prompt and seed, side by side."""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from engine.records import ROW_PLAIN, MethodResult

COLUMNS = ("Method", "Tokens/s", "Speed-up", "Target passes", "Accepted", "= greedy", "Output")


class CompareView(QWidget):
    run_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        layout = QVBoxLayout(self)
        top = QHBoxLayout()
        self.info = QLabel(
            "Runs plain decoding (with and without the KV cache), beam search and speculative "
            "decoding on the current prompt and seed. Tokens/s are measured with the device "
            "synchronised."
        )
        self.info.setWordWrap(True)
        self.run = QPushButton("Run comparison")
        self.run.setObjectName("run_comparison")
        top.addWidget(self.info, 1)
        top.addWidget(self.run)
        layout.addLayout(top)
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setObjectName("compare_table")
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.setWordWrap(True)
        header = self.table.horizontalHeader()
        for i in range(len(COLUMNS) - 1):
            header.setSectionResizeMode(i, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(len(COLUMNS) - 1, QHeaderView.ResizeMode.Stretch)
        self.table.verticalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        layout.addWidget(self.table, 1)
        self.run.clicked.connect(self.run_requested)
        self.results: list[MethodResult] = []

    def clear_results(self) -> None:
        self.show_results([])

    def add_result(self, result: MethodResult) -> None:
        """A row as soon as a method finishes (speed-ups follow once the baseline is in)."""
        self.show_results([*self.results, result])

    def show_results(self, results: Sequence[MethodResult]) -> None:
        self.results = list(results)
        base = next((r for r in results if r.method == ROW_PLAIN), None)
        self.table.setRowCount(len(results))
        for row, r in enumerate(results):
            cells = (
                r.method,
                f"{r.tokens_per_s:.1f}",
                f"{r.tokens_per_s / base.tokens_per_s:.2f}×" if base and base.tokens_per_s else "–",
                str(r.forward_passes),
                f"{r.acceptance:.0%}" if r.acceptance is not None else "–",
                "yes" if r.identical_to_greedy else "no",
                r.text.strip(),
            )
            for col, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setFlags(item.flags() & ~Qt.ItemFlag.ItemIsEditable)
                if col in (1, 2, 3, 4):
                    item.setTextAlignment(
                        Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter
                    )
                self.table.setItem(row, col, item)
