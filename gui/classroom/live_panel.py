"""The live round's dock: where the students join (the address, the URL and its QR code, the
join code, in large type), the question's mode, Ask / Close / Reveal, the students joined and
the answers counted live, the class's answers after the reveal, the class's mean log score
beside the model's own, a hideable leaderboard, removing a nickname, and Export. Every text a
student sent is shown as plain text (never rich text)."""

from __future__ import annotations

import io
import math
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt
from PySide6.QtGui import QFont, QPixmap, QResizeEvent
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QComboBox,
    QFormLayout,
    QGridLayout,
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
from gui.common.fitting import ElidedCombo

if TYPE_CHECKING:
    from engine.classroom.live_sampler import TextComparison

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


def qr_pixmap(url: str, scale: int = 6, width: int = 0) -> QPixmap:
    """The URL's QR code, ``scale`` pixels a module, smaller (down to 2) to fit ``width``."""
    import segno

    code = segno.make(url, error="m")
    if width > 0:
        modules = code.symbol_size(scale=1, border=2)[0]
        scale = max(2, min(scale, width // modules))
    buffer = io.BytesIO()
    code.save(buffer, kind="png", scale=scale, border=2)
    pixmap = QPixmap()
    pixmap.loadFromData(buffer.getvalue(), "PNG")
    return pixmap


def breakable(url: str) -> str:
    """The URL with places to wrap (a zero-width space after ``/ . : ? =``), so that in large
    type on a narrow panel it wraps instead of widening it."""
    return "".join(c + "\u200b" if c in "/.:?=" else c for c in url).rstrip("\u200b")


def shrinkable(combo: QComboBox) -> QComboBox:
    """A combo box that may be narrower than its longest entry (it then elides its text)."""
    combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
    combo.setMinimumContentsLength(6)
    return combo


def visible(token: str) -> str:
    return token.replace(" ", "\u2423").replace("\n", "\u21b5").replace("\t", "\u21e5") or "\u2205"


class LivePanel(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("live_panel")
        self.address = shrinkable(ElidedCombo(objectName="live_address"))
        self.port = QSpinBox(objectName="live_port", minimum=0, maximum=65535)
        self.port.setSpecialValueText("free")
        self.start_button = QPushButton("Open the round", objectName="live_start")
        self.url = plain("", "live_url")  # wraps (``breakable``); the tooltip holds it whole
        self.link = ""  # the page's URL as it is
        self.qr_scale = 6  # pixels a module: 8 in the presentation view
        self.qr = QLabel(objectName="live_qr")
        self.qr.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.code = plain("", "live_code")
        self.mode = shrinkable(ElidedCombo(objectName="live_mode"))
        for key, name in MODE_NAMES:
            self.mode.addItem(name, key)
        self.how = shrinkable(ElidedCombo(objectName="live_how"))
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
        self.totals = plain("", "live_totals")  # the round: the class's log score, the model's
        self.score_button = QPushButton("Score the text", objectName="live_score_text")
        self.score_button.setToolTip(
            "Be the sampler's end: the class's text beside the model's greedy "
            "and sampled texts of the same length, by perplexity"
        )
        self.text_score = plain("", "live_text_score")
        self.students = QListWidget(objectName="live_students")
        self.students.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        self.remove_button = QPushButton("Remove nickname", objectName="live_remove")
        self.show_board = QCheckBox("Leaderboard", objectName="live_show_board")
        self.show_board.setToolTip("Show the leaderboard: nicknames by their mean surprise")
        self.board = QTableWidget(0, 3, objectName="live_board")
        self.board.setHorizontalHeaderLabels(("Nickname", "Bits", "#"))
        self.board.horizontalHeaderItem(1).setToolTip("Mean surprise in bits: lower is better")
        self.board.horizontalHeaderItem(2).setToolTip("Questions answered")
        self.board.verticalHeader().setVisible(False)
        self.board.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        header = self.board.horizontalHeader()  # the nickname takes the room the numbers leave
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
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
        # every row as narrow as a presentation view's dock at 20 pt: labels above their
        # fields when they do not fit beside them, Close answers on a row of its own
        where, ask = QFormLayout(), QFormLayout()
        for form in (where, ask):
            form.setRowWrapPolicy(QFormLayout.RowWrapPolicy.WrapLongRows)
        where.addRow("Address", self.address)
        where.addRow("Port", self.port)
        ask.addRow("Mode", self.mode)
        ask.addRow("Choices", self.choices)
        ask.addRow(self.how)
        buttons = QGridLayout()
        buttons.addWidget(self.ask_button, 0, 0)
        buttons.addWidget(self.reveal_button, 0, 1)
        buttons.addWidget(self.close_button, 1, 0, 1, 2)
        body = QWidget()
        layout = QVBoxLayout(body)
        for part in (where, self.start_button, self.url, self.qr, self.code, ask, buttons,
                     self.counts, self.answers, self.summary, self.totals, self.score_button,
                     self.text_score, self.show_board, self.board, self.students,
                     self.remove_button, self.export_button):  # fmt: skip
            if isinstance(part, QWidget):
                layout.addWidget(part)
            else:
                layout.addLayout(part)
        layout.addStretch(1)
        scroll = QScrollArea(objectName="live_scroll")
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QScrollArea.Shape.NoFrame)
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
        self.link = str(url) if opened else ""
        self.url.setText(breakable(self.link))
        self.url.setToolTip(self.link)
        self.code.setText(f"Code: {code}" if opened else "")
        self._draw_qr()
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
        for label in (self.counts, self.answers, self.summary, self.totals, self.text_score):
            label.setFont(mid)
        self.qr_scale = 8 if presenting else 6
        self._draw_qr()

    def _draw_qr(self) -> None:
        """The QR code as large as its scale asks, or as the panel's width allows."""
        room = self.width() - 40  # the margins and a vertical scroll bar
        if not self.link:
            self.qr.setPixmap(QPixmap())
        elif room > 0:
            self.qr.setPixmap(qr_pixmap(self.link, self.qr_scale, room))

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 - Qt override
        super().resizeEvent(event)
        self._draw_qr()

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
        """The round so far: the class's mean log score (its mean surprise over every answer)
        beside the model's own expected score (its mean entropy over the same questions)."""
        self.totals.setText(
            f"Over the round: the class's mean log score {class_bits:.2f} bits · the model's "
            f"own expected score {model_bits:.2f} bits (its entropy)"
            if class_bits is not None and model_bits is not None else ""
        )  # fmt: skip
        self.board.setRowCount(len(board))
        for row, (nick, bits, answered) in enumerate(board):
            cells = (nick, "—" if math.isinf(bits) else f"{bits:.2f}", str(answered))
            for col, text in enumerate(cells):
                self.board.setItem(row, col, QTableWidgetItem(text))

    def show_text_score(self, result: TextComparison) -> None:
        """The class's text beside greedy's and the samples', by perplexity under the model."""
        mine, greedy = result.mine, result.greedy
        self.text_score.setText(
            f"The class's text ({tokens(len(mine.tokens))}, {result.chosen} chosen by the "
            f"class): perplexity {mine.perplexity:.2f}\n"
            f"Greedy, same length: {greedy.perplexity:.2f}\n"
            f"Sampled (temperature 1, {len(result.samples)} texts): "
            f"{result.sampled_perplexity:.2f}"
        )
        self.text_score.setToolTip(  # the texts themselves, for whoever hovers
            f"The class wrote: {visible_text(mine.text)}\nGreedy wrote: "
            f"{visible_text(greedy.text)}\nA sample wrote: "
            f"{visible_text(result.samples[0].text) if result.samples else ''}"
        )


def visible_text(text: str, limit: int = 80) -> str:
    """A model's text on one line: newlines as ↵, cut at ``limit`` characters."""
    text = text.replace("\n", "\u21b5")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def tokens(n: int) -> str:
    return f"{n} token" if n == 1 else f"{n} tokens"
