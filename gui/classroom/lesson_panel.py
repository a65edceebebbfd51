"""The lesson side panel: the stage's words in large type, Back/Next, and one signal that
tells the window to set itself up for the stage (the window applies it; this panel only shows
the lesson)."""

from __future__ import annotations

import html
from typing import Any

from PySide6.QtCore import Qt, Signal, Slot
from PySide6.QtGui import QFont, QTextDocumentFragment
from PySide6.QtWidgets import (
    QGridLayout,
    QLabel,
    QPushButton,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)

from engine.classroom.lessons import (
    ACTION_COMPARE,
    ACTION_GENERATE,
    ACTION_SCORE,
    ACTION_STEP,
    ACTION_TREE,
    Lesson,
    LessonStage,
)
from engine.records import RUN_METHODS
from gui.experiments.api import EXPERIMENT_PRESS

LIVE_NAMES = {"guess": "guess the word", "vote": "vote", "sampler": "be the sampler"}
LIVE_PRESS = "The class answers on their phones: Reveal in the Live round panel."
BASE_TEXT_PT = 15  # the stage's text: readable from the back of a classroom

PRESS = {
    ACTION_GENERATE: "Press Generate.",
    ACTION_STEP: "Press Step.",
    ACTION_COMPARE: "Run the comparison.",
    ACTION_TREE: "The prepared tree opens in the tree view: click a node.",
    ACTION_SCORE: "The text is scored: click a token.",
    **EXPERIMENT_PRESS,  # lessons 09 and 10: what the class will see
}


class LessonPanel(QWidget):
    """Walks through a lesson's stages. ``stage_selected(LessonStage)`` fires on load and on
    every change of stage; ``closed()`` when the teacher ends the lesson."""

    stage_selected = Signal(object)  # LessonStage
    closed = Signal()

    def __init__(self, parent: QWidget | None = None, text_pt: int = BASE_TEXT_PT) -> None:
        super().__init__(parent)
        self.setObjectName("lesson_panel")
        self.lesson: Lesson | None = None
        self.index = 0
        layout = QVBoxLayout(self)

        self.lesson_title = QLabel("No lesson open")
        self.lesson_title.setObjectName("lesson_title")
        self.lesson_title.setWordWrap(True)
        self.progress = QLabel("")
        self.progress.setObjectName("lesson_progress")
        self.stage_title = QLabel("")
        self.stage_title.setObjectName("stage_title")
        self.stage_title.setWordWrap(True)
        self.text = QLabel("Open a lesson from the Lessons menu.")
        self.text.setObjectName("stage_text")
        self.text.setWordWrap(True)
        self.text.setTextFormat(Qt.TextFormat.RichText)
        self.text.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
        self.text.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.point_at = QLabel("")
        self.point_at.setObjectName("stage_point_at")
        self.point_at.setWordWrap(True)
        self.question = QLabel("")
        self.question.setObjectName("stage_question")
        self.question.setWordWrap(True)
        self.setup = QLabel("")
        self.setup.setObjectName("stage_setup")
        self.setup.setWordWrap(True)

        body = QWidget()
        inner = QVBoxLayout(body)
        inner.setSpacing(12)
        for w in (self.stage_title, self.text, self.point_at, self.question, self.setup):
            inner.addWidget(w)
        inner.addStretch(1)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        scroll.setWidget(body)

        self.back = QPushButton("◀ Back")
        self.back.setObjectName("lesson_back")
        self.back.setToolTip("The previous stage (Alt+Left)")
        self.back.setShortcut("Alt+Left")
        self.next = QPushButton("Next ▶")
        self.next.setObjectName("lesson_next")
        self.next.setToolTip("The next stage (Alt+Right)")
        self.next.setShortcut("Alt+Right")
        self.close_button = QPushButton("End lesson")
        self.close_button.setObjectName("lesson_close")
        # Back and Next on one row, End lesson under them: one row of three made the lesson
        # wider than the controls beside it, and the window 9 px wider than a 1280 screen
        buttons = QGridLayout()
        buttons.addWidget(self.back, 0, 0)
        buttons.addWidget(self.next, 0, 1)
        buttons.addWidget(self.close_button, 1, 0, 1, 2)

        layout.addWidget(self.lesson_title)
        layout.addWidget(self.progress)
        layout.addWidget(scroll, 1)
        layout.addLayout(buttons)

        self.back.clicked.connect(self.go_back)
        self.next.clicked.connect(self.go_next)
        self.close_button.clicked.connect(self.closed)
        self.set_font_size(text_pt)
        self._show()

    # -- API -----------------------------------------------------------------------------------

    def set_lesson(self, lesson: Lesson, index: int = 0) -> None:
        """Show ``lesson`` from stage ``index`` and emit ``stage_selected`` for it."""
        self.lesson = lesson
        self.go_to(index)

    @property
    def stage(self) -> LessonStage | None:
        return self.lesson.stages[self.index] if self.lesson else None

    @Slot()
    def go_next(self) -> None:
        self.go_to(self.index + 1)

    @Slot()
    def go_back(self) -> None:
        self.go_to(self.index - 1)

    def go_to(self, index: int) -> None:
        if self.lesson is None:
            return
        # Asking for the current stage again re-applies it: the teacher's way to reset.
        self.index = max(0, min(index, len(self.lesson.stages) - 1))
        self._show()
        self.stage_selected.emit(self.stage)

    def set_font_size(self, points: int) -> None:
        """The stage text's size; titles scale with it (the window's zoom calls this)."""
        self.text_pt = points
        for label, scale, bold in (
            (self.lesson_title, 1.25, True), (self.stage_title, 1.15, True),
            (self.text, 1.0, False), (self.point_at, 0.9, False), (self.question, 1.0, True),
            (self.setup, 0.75, False), (self.progress, 0.75, False),
        ):  # fmt: skip
            font = QFont(label.font())
            font.setPointSizeF(points * scale)
            font.setBold(bold)
            label.setFont(font)

    # -- drawing -------------------------------------------------------------------------------

    def _show(self) -> None:
        stage, lesson = self.stage, self.lesson
        self.back.setEnabled(lesson is not None and self.index > 0)
        self.next.setEnabled(lesson is not None and self.index < len(lesson.stages) - 1)
        self.close_button.setEnabled(lesson is not None)
        if lesson is None or stage is None:
            return
        self.lesson_title.setText(lesson.title)
        self.progress.setText(f"Stage {self.index + 1} of {len(lesson.stages)}")
        self.stage_title.setText(stage.title)
        paragraphs = [p.strip() for p in stage.text.split("\n\n") if p.strip()]
        self.text.setText("".join(f"<p>{html.escape(' '.join(p.split()))}</p>" for p in paragraphs))
        self.point_at.setText(f"<b>Point at:</b> {html.escape(stage.point_at)}")
        self.point_at.setVisible(bool(stage.point_at))
        self.question.setText(f"Ask the class: {stage.question}" if stage.question else "")
        self.question.setVisible(bool(stage.question))
        self.setup.setText(setup_line(stage))

    def text_plain(self) -> str:
        """Everything the panel shows, as plain text (for tests and screen readers)."""
        return "\n".join(
            QTextDocumentFragment.fromHtml(w.text()).toPlainText()
            for w in (
                self.lesson_title,
                self.progress,
                self.stage_title,
                self.text,
                self.point_at,
                self.question,
                self.setup,
            )  # fmt: skip
            if w.isVisibleTo(self)
        )


def setup_line(stage: LessonStage) -> str:
    """One small line saying what the stage sets and what to press."""
    s = stage.settings
    parts = [RUN_METHODS.get(stage.method, stage.method)]
    parts.append("greedy" if s.temperature == 0 else f"temperature {s.temperature:g}")
    for name, value, neutral in (
        ("top-k", s.top_k, 0), ("top-p", s.top_p, 1.0), ("min-p", s.min_p, 0.0),
        ("repetition penalty", s.repetition_penalty, 1.0),
        ("no repeated n-grams", s.no_repeat_ngram_size, 0),
    ):  # fmt: skip
        if value != neutral:
            parts.append(f"{name} {value:g}")
    if stage.guess:
        parts.append("guess round")
    if stage.live:
        parts.append(f"live round: {LIVE_NAMES.get(stage.live, stage.live)}")
    press = PRESS.get(stage.action, "") if not stage.live else LIVE_PRESS
    return "Set: " + ", ".join(parts) + (f". {press}" if press else ".")


def apply_to_panels(stage: LessonStage, sampler: Any, method: Any) -> list[str]:
    """Set the sampler panel (``set_settings``/``settings``) and the method panel
    (``set_current``, ``beams``, ``gamma``) to ``stage``. Returns the names of the settings the
    sampler panel could not hold (it has no control for them): the window must then run the
    stage with ``stage.settings`` itself rather than read the panel back."""
    sampler.set_settings(stage.settings)
    method.set_current(stage.method)
    method.beams.setValue(stage.num_beams)
    method.gamma.setValue(stage.gamma)
    shown = sampler.settings().to_dict()
    return [name for name, value in stage.settings.to_dict().items() if shown[name] != value]
