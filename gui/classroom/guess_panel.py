"""The guess round: type the class's guesses, Reveal, see ranks, probabilities and points, and
a running score. Scoring is ``engine.classroom.guess`` (3 points for the picked token, 2 for the
model's top 3, 1 for its top 10)."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QEvent, QObject, Qt, Signal, Slot
from PySide6.QtGui import QFont, QKeyEvent
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from engine.classroom.guess import GuessRound, Scoreboard, score_round
from engine.records import Step

COLUMNS = ("Guess", "Token", "Rank", "Probability", "Points")


def visible(token: str) -> str:
    """A token as the class should see it: spaces and line ends made visible."""
    return token.replace(" ", "\u2423").replace("\n", "\u21b5").replace("\t", "\u21e5") or "\u2205"


class GuessPanel(QWidget):
    """``set_step(step, tokenizer)`` arms a round for a step whose distribution the window
    keeps hidden. Reveal (the button, Ctrl+Return, or ``reveal()``) scores the typed guesses,
    shows them, adds them to the running score and emits ``revealed(GuessRound)``; the window
    then shows the distribution. With no step armed, Reveal emits ``reveal_requested()`` so the
    window can make the step first (then ``set_step`` and ``reveal``)."""

    reveal_requested = Signal()
    revealed = Signal(object)  # GuessRound

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("guess_panel")
        self.step: Step | None = None
        self.tokenizer: Any = None
        self.board = Scoreboard()
        self.last_round: GuessRound | None = None

        self.status = QLabel("Step to hide the next token, then take the class's guesses.")
        self.status.setObjectName("guess_status")
        self.status.setWordWrap(True)
        self.guesses = QPlainTextEdit()
        self.guesses.setObjectName("guesses")
        self.guesses.setPlaceholderText('Guesses, separated by commas or lines: Paris, the, "a"')
        self.guesses.setTabChangesFocus(True)
        self.reveal_button = QPushButton("Reveal")
        self.reveal_button.setObjectName("guess_reveal")
        self.reveal_button.setToolTip("Show the distribution and score the guesses (Ctrl+Return)")
        self.guesses.installEventFilter(self)  # Ctrl+Return in the box reveals
        self.reset_button = QPushButton("Reset score")
        self.reset_button.setObjectName("guess_reset")
        self.results = QTableWidget(0, len(COLUMNS))
        self.results.setObjectName("guess_results")
        self.results.setHorizontalHeaderLabels(COLUMNS)
        self.results.verticalHeader().setVisible(False)
        self.results.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.results.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Stretch)
        self.picked = QLabel("")
        self.picked.setObjectName("guess_picked")
        self.picked.setWordWrap(True)
        self.score = QLabel("")
        self.score.setObjectName("guess_score")
        font = QFont(self.score.font())
        font.setBold(True)
        font.setPointSizeF(font.pointSizeF() * 1.3)
        self.score.setFont(font)

        buttons = QHBoxLayout()
        buttons.addWidget(self.reveal_button)
        buttons.addStretch(1)
        buttons.addWidget(self.reset_button)
        layout = QVBoxLayout(self)
        layout.addWidget(self.status)
        layout.addWidget(self.guesses, 1)
        layout.addLayout(buttons)
        layout.addWidget(self.picked)
        layout.addWidget(self.results, 2)
        layout.addWidget(self.score)

        self.reveal_button.clicked.connect(self._on_reveal)
        self.reset_button.clicked.connect(self.reset_score)
        self._show_score()

    # -- API -----------------------------------------------------------------------------------

    def set_step(self, step: Step, tokenizer: Any = None) -> None:
        """Arm a round: ``step`` is the hidden next token; ``tokenizer`` finds guesses that are
        outside the step's top-N. Clears the previous round's guesses and results."""
        self.step, self.tokenizer = step, tokenizer
        self.last_round = None
        self.guesses.clear()
        self.results.setRowCount(0)
        self.picked.setText("")
        self.status.setText(
            f"Token {step.index + 1} is hidden. Type the class's guesses, then Reveal."
        )
        self.reveal_button.setEnabled(True)

    @property
    def armed(self) -> bool:
        return self.step is not None and self.last_round is None

    def reveal(self) -> GuessRound | None:
        """Score the typed guesses for the armed step, show them and emit ``revealed``."""
        if not self.armed:
            return None
        step = self.step
        assert step is not None
        round_ = score_round(self.guesses.toPlainText(), step, self.tokenizer)
        self.last_round = round_
        self.board.add(round_)
        self._show_round(round_)
        self._show_score()
        self.status.setText(f"Token {step.index + 1} revealed.")
        self.revealed.emit(round_)
        return round_

    @Slot()
    def reset_score(self) -> None:
        self.board.reset()
        self._show_score()

    # -- drawing -------------------------------------------------------------------------------

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt override
        if (
            watched is self.guesses
            and event.type() == QEvent.Type.KeyPress
            and isinstance(event, QKeyEvent)
            and event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter)
            and event.modifiers() & Qt.KeyboardModifier.ControlModifier
        ):
            self._on_reveal()
            return True
        return super().eventFilter(watched, event)

    @Slot()
    def _on_reveal(self) -> None:
        if self.armed:
            self.reveal()
        else:
            self.reveal_requested.emit()

    def _show_round(self, round_: GuessRound) -> None:
        step = self.step
        assert step is not None
        self.picked.setText(
            f"The model picked {visible(step.token_str)} "
            f"(rank {step.rank}, {step.raw_prob:.1%}). "
            f"This round: {round_.points} point{'s' if round_.points != 1 else ''}."
        )
        self.results.setRowCount(len(round_.results))
        for row, r in enumerate(round_.results):
            cells = (
                r.guess,
                visible(r.token_text) if r.token_id is not None else "—",
                str(r.rank) if r.rank is not None else r.note,
                f"{r.raw_prob:.1%}" if r.raw_prob is not None else "",
                str(r.points),
            )
            for col, text in enumerate(cells):
                item = QTableWidgetItem(text)
                if col in (2, 3, 4):
                    item.setTextAlignment(Qt.AlignmentFlag.AlignCenter)
                if r.chosen:
                    font = item.font()
                    font.setBold(True)
                    item.setFont(font)
                if r.note and col == 1:
                    item.setToolTip(r.note)
                self.results.setItem(row, col, item)

    def _show_score(self) -> None:
        self.score.setText(f"Score: {self.board.describe()}")

    def result_rows(self) -> list[tuple[str, ...]]:
        """The results table as text (for tests and export)."""
        return [
            tuple(self.results.item(r, c).text() for c in range(self.results.columnCount()))
            for r in range(self.results.rowCount())
        ]
