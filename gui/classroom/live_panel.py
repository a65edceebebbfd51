"""The live round's dock: where the students join (the address, the URL and its QR code, the
join code, in large type), the question's mode, Ask / Close / Reveal, the students joined and
the answers counted live, the class's answers after the reveal, the class's mean log score
beside the model's own, a hideable leaderboard, removing a nickname, and Export. Every text a
student sent is shown as plain text (never rich text)."""

from __future__ import annotations

import io
import math

from PySide6.QtCore import Qt
from PySide6.QtGui import QFont, QPixmap
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QComboBox,
    QFormLayout,
    QGridLayout,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QScrollArea,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from engine.classroom.live import DRAW, GUESS, MAJORITY, MAX_CHOICES, SAMPLER, VOTE, Reveal

MODE_NAMES = ((GUESS, "Guess the word"), (VOTE, "Vote on the top tokens"),
              (SAMPLER, "Be the sampler"))  # fmt: skip
HOW_NAMES = ((MAJORITY, "the majority"), (DRAW, "a draw from the votes"))


def plain(text: str = "", name: str = "") -> QLabel:
    label = QLabel(text)
    label.setTextFormat(Qt.TextFormat.PlainText)  # students' text is never markup here
    label.setWordWrap(True)
    if name:
        label.setObjectName(name)
    return label


def qr_pixmap(url: str, scale: int = 6) -> QPixmap:
    import segno

    buffer = io.BytesIO()
    segno.make(url, error="m").save(buffer, kind="png", scale=scale, border=2)
    pixmap = QPixmap()
    pixmap.loadFromData(buffer.getvalue(), "PNG")
    return pixmap


def visible(token: str) -> str:
    return token.replace(" ", "\u2423").replace("\n", "\u21b5").replace("\t", "\u21e5") or "\u2205"


class LivePanel(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("live_panel")
        self.address = QComboBox(objectName="live_address")
        self.port = QSpinBox(objectName="live_port", minimum=0, maximum=65535)
        self.port.setSpecialValueText("free")
        self.start_button = QPushButton("Open the round", objectName="live_start")
        self.url = plain("", "live_url")
        self.url.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.qr = QLabel(objectName="live_qr")
        self.qr.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.code = plain("", "live_code")
        self.mode = QComboBox(objectName="live_mode")
        for key, name in MODE_NAMES:
            self.mode.addItem(name, key)
        self.how = QComboBox(objectName="live_how")
        for key, name in HOW_NAMES:
            self.how.addItem(name, key)
        self.choices = QSpinBox(objectName="live_choices", minimum=2, maximum=MAX_CHOICES)
        self.choices.setValue(5)
        self.ask_button = QPushButton("Ask", objectName="live_ask")
        self.close_button = QPushButton("Close answers", objectName="live_close")
        self.reveal_button = QPushButton("Reveal", objectName="live_reveal")
        self.counts = plain("", "live_counts")
        self.answers = plain("", "live_answers")
        self.summary = plain("", "live_summary")
        self.students = QListWidget(objectName="live_students")
        self.students.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        self.remove_button = QPushButton("Remove nickname", objectName="live_remove")
        self.show_board = QCheckBox("Show the leaderboard", objectName="live_show_board")
        self.board = QTableWidget(0, 3, objectName="live_board")
        self.board.setHorizontalHeaderLabels(("Nickname", "Mean surprise (bits)", "Answers"))
        self.board.verticalHeader().setVisible(False)
        self.board.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.board.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Stretch)
        self.board.hide()
        self.export_button = QPushButton("Export round…", objectName="live_export")
        self.show_board.toggled.connect(self.board.setVisible)
        self.how.setVisible(False)
        self.mode.currentIndexChanged.connect(
            lambda: self.how.setVisible(self.mode.currentData() == SAMPLER)
        )
        self._lay_out()
        self.set_open(False)

    def _lay_out(self) -> None:
        where = QFormLayout()
        where.addRow("Address", self.address)
        where.addRow("Port", self.port)
        ask = QGridLayout()
        ask.addWidget(QLabel("Mode"), 0, 0)
        ask.addWidget(self.mode, 0, 1)
        ask.addWidget(QLabel("Choices"), 1, 0)
        ask.addWidget(self.choices, 1, 1)
        ask.addWidget(self.how, 2, 1)
        buttons = QHBoxLayout()
        for b in (self.ask_button, self.close_button, self.reveal_button):
            buttons.addWidget(b)
        body = QWidget()
        layout = QVBoxLayout(body)
        for part in (where, self.start_button, self.url, self.qr, self.code, ask, buttons,
                     self.counts, self.answers, self.summary, self.show_board, self.board,
                     self.students, self.remove_button, self.export_button):  # fmt: skip
            if isinstance(part, QWidget):
                layout.addWidget(part)
            else:
                layout.addLayout(part)
        layout.addStretch(1)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setWidget(body)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.addWidget(scroll)

    # -- state ---------------------------------------------------------------------------------

    def set_addresses(self, addresses: list[str]) -> None:
        self.address.clear()
        self.address.addItems(addresses)

    def set_open(self, url: str | bool, code: str = "") -> None:
        """The round opened at ``url`` with ``code`` (False: closed)."""
        opened = bool(url)
        self.start_button.setText("End the round" if opened else "Open the round")
        for w in (self.address, self.port):
            w.setEnabled(not opened)
        for w in (self.ask_button, self.close_button, self.reveal_button, self.remove_button,
                  self.export_button):  # fmt: skip
            w.setEnabled(opened)
        self.url.setText(str(url) if opened else "")
        self.code.setText(f"Code: {code}" if opened else "")
        self.qr.setPixmap(qr_pixmap(str(url)) if opened else QPixmap())
        self.qr.setVisible(opened)
        if not opened:
            self.counts.setText("Open the round: students join from their phones' browsers.")
            self.answers.setText("")

    def set_text_size(self, points: int, presenting: bool) -> None:
        big = QFont(self.font())
        big.setBold(True)
        big.setPointSizeF(max(points * 1.6, 26 if presenting else 18))
        self.url.setFont(big)
        self.code.setFont(big)
        mid = QFont(self.font())
        mid.setPointSizeF(points * 1.2)
        for label in (self.counts, self.answers, self.summary):
            label.setFont(mid)
        if self.url.text():
            self.qr.setPixmap(qr_pixmap(self.url.text(), 8 if presenting else 6))

    def show_students(self, students: list[tuple[int, str, bool]], answered: int) -> None:
        """(sid, nickname, connected) for each student; answers to the open question."""
        self.students.clear()
        for sid, nick, connected in students:
            item = QListWidgetItem(nick if connected else f"{nick} (away)")
            item.setData(Qt.ItemDataRole.UserRole, sid)
            self.students.addItem(item)
        here = sum(1 for s in students if s[2])
        self.counts.setText(f"{here} joined · {answered} answered")

    def selected_students(self) -> list[int]:
        return [int(i.data(Qt.ItemDataRole.UserRole)) for i in self.students.selectedItems()]

    def show_reveal(self, v: Reveal, marks: dict[int, str]) -> None:
        n = sum(v.class_counts.values())
        parts = list(marks.values())[:6]
        chose = ""
        if v.class_choice is not None:
            chose = f" The class chose {visible(v.token_text)}."
        self.answers.setText(
            f"The model's token: {visible(v.token_text)} ({v.model_prob:.1%}).{chose} "
            f"{n} answers: " + (", ".join(parts) or "none")
        )
        mean = v.class_mean_bits
        self.summary.setText(
            f"This question: class {mean:.2f} bits, model {v.model_entropy:.2f} bits (entropy)"
            if mean is not None else f"Model's entropy: {v.model_entropy:.2f} bits"
        )  # fmt: skip

    def show_totals(self, class_bits: float | None, model_bits: float | None,
                    board: list[tuple[str, float, int]]) -> None:  # fmt: skip
        if class_bits is not None and model_bits is not None:
            self.summary.setText(
                f"{self.summary.text()}\nOver the round: the class's mean log score "
                f"{class_bits:.2f} bits, the model's own expected {model_bits:.2f} bits"
            )
        self.board.setRowCount(len(board))
        for row, (nick, bits, answered) in enumerate(board):
            cells = (nick, "—" if math.isinf(bits) else f"{bits:.2f}", str(answered))
            for col, text in enumerate(cells):
                self.board.setItem(row, col, QTableWidgetItem(text))
