"""Lessons in the window: the Lessons menu and File > Open lesson…, the lesson panel (a dock
that walks through the stages and sets the window up for each), the guess round (the class
guesses the next token; Reveal makes the step and shows its distribution with the guesses
marked), and File > Export run as web page. ``Classroom`` is given
``ClassroomNeeds`` below, never the window."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import Qt
from PySide6.QtGui import QFont
from PySide6.QtWidgets import (
    QDockWidget,
    QFileDialog,
    QWidget,
)

from engine.classroom.lessons import (
    ACTION_GENERATE,
    ACTION_SCORE,
    ACTION_TREE,
    FOCUS_BEAM_TREE,
    FOCUS_COMPARE,
    FOCUS_ENTROPY,
    FOCUS_INSIDE,
    FOCUS_SPEED,
    Lesson,
    LessonError,
    LessonStage,
    bundled_lessons,
    load_lesson,
    load_stage_tree,
)
from engine.records import SPEC_DRAFT
from engine.sampling.settings import SamplerSettings
from gui.classroom.guess_panel import GuessPanel
from gui.classroom.lesson_panel import LIVE_PRESS, LessonPanel, apply_to_panels
from gui.common.actions import ActionSpec, Place
from gui.common.theme import PRESENT_TOP_N
from gui.core.session import Session

if TYPE_CHECKING:
    from engine.classroom.guess import GuessRound
    from engine.tree.model import RunTree
    from gui.controls.method_panel import MethodPanel
    from gui.controls.sampler_panel import SamplerPanel
    from gui.run.api import RunView


@dataclass
class ClassroomNeeds(Session):
    """What a lesson is given: the panels a stage sets, the docks' place in the window, and
    the calls a stage makes (load a model, make a step, score a text, open a tree, prepare an
    experiment or the Inside tab)."""

    views: RunView
    prompt_box: Any  # gui.shell.areas.PromptBox
    sampler: SamplerPanel
    method: MethodPanel
    plots: Any  # gui.shell.areas.PlotArea
    output: Any  # gui.shell.areas.OutputBox
    add_dock: Callable[[QDockWidget], None]  # on the window's left side
    tabify: Callable[[QDockWidget, QDockWidget], None]
    load_model: Callable[[str], None]
    load_draft: Callable[[str], None]
    step_once: Callable[[], None]
    export: Callable[[str], object]
    show_score: Callable[[str, str], None]
    open_tree: Callable[[RunTree], None]
    prepare_experiment: Callable[[LessonStage], None]  # an experiment stage's N or values
    prepare_inside: Callable[[dict], None]  # an Inside stage's page, view and token
    inside_tab: QWidget  # the tab an Inside stage shows
    # a live stage's round: opened if need be, asked in the stage's mode (live_actions)
    live_stage: Callable[[str], None] = lambda _mode: None


class Classroom:
    """The window's lesson and guess-round state (the window owns one)."""

    def __init__(self, w: ClassroomNeeds) -> None:
        self.w = w
        self.stage: LessonStage | None = None
        self.lost: list[str] = []  # stage settings the sampler panel has no control for
        self.panel = LessonPanel()
        self.guess = GuessPanel()
        self.lesson_dock = self._dock("Lesson", "lesson_dock", self.panel)
        self.guess_dock = self._dock("Guess the next token", "guess_dock", self.guess)
        w.tabify(self.lesson_dock, self.guess_dock)
        self.lesson_dock.raise_()
        self.panel.stage_selected.connect(self.apply_stage)
        self.panel.closed.connect(self.close_lesson)
        self.guess.reveal_requested.connect(self.step_for_guess)
        self.guess.revealed.connect(self.show_guesses)
        self._revealing = False
        self._teacher: tuple[SamplerSettings, str, bool] | None = None

    def _dock(self, title: str, name: str, widget: object) -> QDockWidget:
        dock = QDockWidget(title, self.w.parent)
        dock.setObjectName(name)
        dock.setWidget(widget)  # type: ignore[arg-type]
        dock.setAllowedAreas(Qt.DockWidgetArea.LeftDockWidgetArea
                             | Qt.DockWidgetArea.RightDockWidgetArea)  # fmt: skip
        self.w.add_dock(dock)
        dock.hide()
        return dock

    # -- menus --------------------------------------------------------------------------------

    def action_specs(self) -> list[ActionSpec]:
        """The Lessons menu (every bundled lesson, then the guess round), File > Open lesson…
        and File > Export run as web page…"""
        try:
            lessons = bundled_lessons()
        except LessonError as exc:  # a broken bundled file: say so, keep the others usable
            lessons = []
            self.w.say(str(exc))
        specs = [
            ActionSpec(f"lesson_{i}", lesson.title, lambda les=lesson: self.open_lesson(les),
                       (Place("lessons", "lessons", i),))
            for i, lesson in enumerate(lessons)
        ]  # fmt: skip
        return [
            *specs,
            ActionSpec("guess_round", "Guess round", self.show_guess_round,
                       (Place("lessons", "guess", 0),), "Ctrl+G",
                       "The class guesses the next token; Reveal makes the step"),
            ActionSpec("open_lesson", "Open lesson…", lambda: self.open_file(None),
                       (Place("file", "lesson", 0),),
                       tip="A lesson file of your own (YAML; see the teacher's guide)"),
            ActionSpec("share", "Export run as web page…", lambda: self.w.export("html"),
                       (Place("file", "export", 4),),
                       tip="One HTML file students can open in any browser: the text coloured "
                       "by probability, the top tokens of every step"),
        ]  # fmt: skip

    # -- lessons ------------------------------------------------------------------------------

    def open_file(self, path: str | None) -> bool:
        if path is None:
            path, _ = QFileDialog.getOpenFileName(
                self.w.parent, "Open lesson", str(Path.home()), "Lessons (*.yaml *.yml)"
            )
            if not path:
                return False
        try:
            lesson = load_lesson(path)
        except LessonError as exc:
            self.w.show_error(f"This lesson file cannot be used.\n\n{exc}")
            return False
        self.open_lesson(lesson)
        return True

    def open_lesson(self, lesson: Lesson) -> None:
        if self._teacher is None:  # the teacher's own settings, given back when it ends
            w = self.w
            self._teacher = (w.sampler.settings(), w.method.current(),
                             w.sampler.random_seed.isChecked())  # fmt: skip
        self.lesson_dock.show()
        self.lesson_dock.raise_()
        self.panel.set_font_size(self.w.looks.text_points())
        self.panel.set_lesson(lesson)  # emits stage_selected for the first stage

    def close_lesson(self) -> None:
        """End the lesson: the sampler, the method and the seed's tick as the teacher had
        them before it (a stage's greedy, 3-token settings stayed and the next Generate gave 3
        tokens)."""
        self.stage, self.lost = None, []
        self.lesson_dock.hide()
        if self._teacher is not None:
            settings, method, random_seed = self._teacher
            self._teacher = None
            self.w.method.set_current(method)
            self.w.sampler.set_settings(settings)
            self.w.sampler.random_seed.setChecked(random_seed)

    def apply_stage(self, stage: LessonStage) -> None:
        """Set the window up as the stage says; the teacher then presses what it says."""
        w = self.w
        if w.runner.busy:
            w.runner.stop()
            w.after_idle(lambda: self.apply_stage(stage))
            return
        self.stage = stage
        if stage.model and (w.bundle is None or w.bundle.source_key != stage.model):
            w.load_model(stage.model)
        w.prompt_box.editor.setPlainText(stage.prompt)
        if stage.use_chat_template is not None and w.prompt_box.chat_template.isEnabled():
            w.prompt_box.chat_template.setChecked(stage.use_chat_template)
        w.sampler.random_seed.setChecked(False)  # the lesson's seed, so the class sees it
        self.lost = apply_to_panels(stage, w.sampler, w.method)
        if stage.top_n:  # in the presentation view no more bars than 20 pt labels allow
            cap = PRESENT_TOP_N if w.looks.presenting else stage.top_n
            w.plots.dist_box.top_n.setValue(min(stage.top_n, cap))
        if stage.method == SPEC_DRAFT and stage.draft_model:
            w.after_idle(lambda: w.load_draft(stage.draft_model))
        tabs = {FOCUS_BEAM_TREE: w.plots.beam_panel, FOCUS_COMPARE: w.plots.compare_view,
                FOCUS_INSIDE: w.inside_tab}  # fmt: skip
        colour = stage.options.get("colour")
        if colour is not None:
            combo = w.output.color_mode
            combo.setCurrentIndex(max(0, combo.findData(colour)))
        w.prepare_inside(stage.options)
        w.plots.tabs.setCurrentWidget(tabs.get(stage.focus, w.plots.dist_box))
        if stage.focus in (FOCUS_SPEED, FOCUS_ENTROPY) and not w.looks.presenting:
            w.plots.curves.show()
        if stage.guess:
            self.show_guess_round()
        if stage.action in (ACTION_TREE, ACTION_SCORE):
            w.say(f"Lesson: {stage.title}. {self.show_multiverse(stage)}")
            return
        press = "Generate" if stage.action == ACTION_GENERATE else stage.action.capitalize()
        w.say(f"Lesson: {stage.title}. Press {press} when ready.")
        w.prepare_experiment(stage)  # an experiment stage: its N or values, page, words
        if stage.live:  # a live round's question, asked on the students' phones
            w.say(f"Lesson: {stage.title}. {LIVE_PRESS}")
            w.live_stage(stage.live)

    def show_multiverse(self, stage: LessonStage) -> str:
        """Open a tree stage's prepared tree or score a score stage's text; what to tell the
        class next (or why nothing opened)."""
        w, lesson = self.w, self.panel.lesson
        if stage.action == ACTION_SCORE:
            # once the window is idle: the stage may have just started loading its model
            w.after_idle(lambda: w.show_score(stage.score_text or "", stage.prompt))
            return "Click a token of the scored text."
        try:  # a fresh copy from the file: checked when the lesson was read, but files change
            tree = load_stage_tree(stage, lesson.path if lesson else None)
        except LessonError as exc:
            self.w.show_error(f"This lesson's tree cannot be opened.\n\n{exc}")
            return "The prepared tree could not be opened."
        w.after_idle(lambda: w.open_tree(tree))
        return "Click a node of the tree."

    def settings(self, panel: SamplerSettings) -> SamplerSettings:
        """The panel's settings, plus the stage's values for settings the panel cannot show."""
        if self.stage is None or not self.lost:
            return panel
        return panel.with_(**{name: getattr(self.stage.settings, name) for name in self.lost})

    def set_text_size(self, points: int, presenting: bool) -> None:  # the display clock
        """The window's text size: the lesson text, the guess round's score."""
        self.panel.set_font_size(max(points + 3, 27) if presenting else points + 3)
        score = QFont()
        score.setBold(True)
        score.setPointSizeF(points * 1.3)
        self.guess.score.setFont(score)
        self.guess.score.setWordWrap(True)

    # -- guess round --------------------------------------------------------------------------

    def show_guess_round(self) -> None:
        self.guess_dock.show()
        self.guess_dock.raise_()
        self.guess.guesses.setFocus()

    def step_for_guess(self) -> None:
        """Reveal with no step armed: make the next token now, then score and show it."""
        w = self.w
        if w.runner.busy or w.bundle is None:
            return
        self._revealing = True
        w.step_once()
        if not w.runner.busy:  # the step could not start (the run had ended, ...)
            self._revealing = False

    def job_done(self, name: str) -> None:
        """The window calls this after every job: a guess's step arrives here."""
        if not self._revealing:
            return
        self._revealing = False
        if name in ("step", "resume") and self.w.store.steps:
            bundle = self.w.bundle
            typed = self.guess.guesses.toPlainText()  # set_step clears the box
            self.guess.set_step(self.w.store.steps[-1], bundle.tokenizer if bundle else None)
            self.guess.guesses.setPlainText(typed)
            self.guess.reveal()

    def show_guesses(self, round_: GuessRound) -> None:
        w = self.w
        w.plots.tabs.setCurrentWidget(w.plots.dist_box)
        w.views.select(None)
        w.plots.dist_box.plot.set_marks(round_.marks())
