"""Several methods on the same prompt and seed, side by side."""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from engine.records import ROW_PLAIN, MethodResult

COLUMNS = ("Method", "tok/s", "×", "Passes", "Accepted", "=greedy", "Output")
HEADER_TIPS = (
    "The decoding method", "Tokens per second, device synchronised",
    "Speed-up over plain decoding with the cache", "Forward passes of the target model",
    "Share of drafted tokens the target accepted", "Same tokens as plain greedy decoding",
    "The text it wrote (select a row to read it whole below)",
)  # fmt: skip


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
        self.status = QLabel("")
        self.status.setObjectName("compare_progress")
        layout.addWidget(self.status)
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setObjectName("compare_table")
        self.table.setHorizontalHeaderLabels(COLUMNS)
        for i, tip in enumerate(HEADER_TIPS):
            self.table.horizontalHeaderItem(i).setToolTip(tip)
        # One line per method: the output is elided here, whole in the pane below (and the
        # tooltip); a wrapped output made rows ~300 px tall with one row on screen.
        self.table.setWordWrap(False)
        self.table.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.table.setSelectionBehavior(QTableWidget.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QTableWidget.SelectionMode.SingleSelection)
        header = self.table.horizontalHeader()
        header.setMinimumSectionSize(36)
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Interactive)
        header.resizeSection(0, 130)  # long method names elide; the tooltip has them whole
        for i in range(1, len(COLUMNS) - 1):
            header.setSectionResizeMode(i, QHeaderView.ResizeMode.ResizeToContents)
        # the output takes what is left, and never less than a few words' width (a stretched
        # section shrank to nothing once a hidden column came back in a narrow window)
        header.setSectionResizeMode(len(COLUMNS) - 1, QHeaderView.ResizeMode.Interactive)
        header.resizeSection(len(COLUMNS) - 1, 180)
        header.setStretchLastSection(True)
        self.table.verticalHeader().setDefaultSectionSize(self.table.fontMetrics().height() + 10)
        self.table.verticalHeader().hide()  # the row numbers took the output's room
        self.detail = QPlainTextEdit()
        self.detail.setObjectName("compare_detail")
        self.detail.setReadOnly(True)
        self.detail.setPlaceholderText("Every method's whole output appears here; select a row "
                                       "to read only its own.")  # fmt: skip
        split = QSplitter(Qt.Orientation.Vertical)
        split.setChildrenCollapsible(False)  # a drag never leaves a part at 0 px
        split.addWidget(self.table)
        split.addWidget(self.detail)
        split.setStretchFactor(0, 3)
        split.setStretchFactor(1, 1)
        layout.addWidget(split, 1)
        self.run.clicked.connect(self.run_requested)
        self.table.itemSelectionChanged.connect(self._show_detail)
        self.results: list[MethodResult] = []

    def clear_results(self) -> None:
        self.show_results([])
        self.detail.clear()
        self.status.setText("")

    def set_progress(self, text: str) -> None:
        self.status.setText(text)

    def _show_detail(self) -> None:
        """The selected row's whole output; with none selected, every row's, one after the
        other (the table's cells cut them to a few words)."""
        rows = self.table.selectionModel().selectedRows()
        if rows and rows[0].row() < len(self.results):
            r = self.results[rows[0].row()]
            self.detail.setPlainText(f"{r.method}:\n{r.text}")
        else:
            self.detail.setPlainText(
                "\n\n".join(f"{r.method}: {' '.join(r.text.split())}" for r in self.results)
            )

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
                {True: "yes", False: "no", None: "–"}[r.identical_to_greedy],
                r.text.strip(),
            )
            for col, text in enumerate(cells):
                item = QTableWidgetItem(" ".join(text.split()) if col == len(cells) - 1 else text)
                if col in (0, len(cells) - 1):
                    item.setToolTip(text)
                item.setFlags(item.flags() & ~Qt.ItemFlag.ItemIsEditable)
                if col in (1, 2, 3, 4):
                    item.setTextAlignment(
                        Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter
                    )
                self.table.setItem(row, col, item)
        self._hide_empty_columns()
        self._show_detail()
        rows = sum(self.table.rowHeight(r) for r in range(self.table.rowCount()))
        head = self.table.horizontalHeader().sizeHint().height()
        # as tall as its rows, the whole outputs below take the rest
        self.table.setMaximumHeight(max(120, head + rows + 2 * self.table.frameWidth() + 2))

    def _hide_empty_columns(self) -> None:
        """A column with "–" in every row (no speed-up without a plain run, no acceptance
        without drafts: a sweep's rows) is hidden; its room goes to the output."""
        t = self.table
        for col in range(1, len(COLUMNS) - 1):
            cells = [t.item(r, col) for r in range(t.rowCount())]
            empty = bool(cells) and all(c is None or c.text() in ("–", "") for c in cells)
            if t.isColumnHidden(col) != empty:  # (showing a shown column lays them out again)
                t.setColumnHidden(col, empty)
