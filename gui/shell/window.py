"""MainWindow: builds the areas, wires widgets to the runner and the run store, and composes
the parts that turn user actions into runner calls and own their state: the theme and zoom
(gui.shell.appearance), the presentation view (gui.shell.presentation), settings, autosave and
exports (gui.shell.persist), models (gui.models.actions), the run's buttons (gui.run.actions),
lessons (gui.classroom.actions), the run tree, scoring and experiments. Each sees the window
through a small
protocol and never imports it; the window's public methods forward to them.

Records flow one way: engine -> worker -> run store -> views, the views redrawn by a 30 Hz
timer, so the generation rate never drives the screen rate."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QSettings, Qt, QTimer, Signal, Slot
from PySide6.QtGui import QCloseEvent
from PySide6.QtWidgets import (
    QApplication,
    QMainWindow,
    QMessageBox,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from engine.drivers.workbench import RunRequest
from engine.models.loading import ModelBundle
from engine.records import BEAMS, RunSummary, Step
from engine.validate.served import unknown_ids_notice
from gui.classroom.actions import Classroom
from gui.common.theme import Theme
from gui.controls.presenter_strip import PresenterStrip
from gui.core.store import RunStore
from gui.core.worker import EngineRunner
from gui.experiments.actions import ExperimentActions
from gui.inside.actions import InsideActions
from gui.models.actions import ModelActions
from gui.run.actions import TREE_METHODS, RunActions
from gui.run.view import RunView
from gui.score.actions import ScoreActions
from gui.shell.appearance import Appearance, about_text
from gui.shell.areas import ControlsColumn, OutputBox, PlotArea, PromptBox, StatusArea
from gui.shell.menus import build_actions
from gui.shell.persist import Persistence, default_autosave_path
from gui.shell.presentation import Presentation
from gui.tree.actions import TreeActions

REDRAW_HZ = 30
RUN_JOBS = ("generate", "step", "continue", "branch", "resume")
STOP_REASONS = {
    "eos": "the model ended its answer",
    "max_new_tokens": "reached the token limit (Continue for more)",
    "context": "the model's context is full",
    "stopped": "stopped",
    "grammar": "stopped by the grammar",
}


class MainWindow(QMainWindow):
    run_finished = Signal(object)  # RunSummary, once its records are drawn

    def __init__(
        self,
        settings_store: QSettings | None = None,
        autoload: bool = True,
        autosave_path: Path | None = None,
    ) -> None:
        super().__init__()
        self.setWindowTitle("Decoding Lab")
        self.store = RunStore()
        self.runner = EngineRunner(self.store, self)
        self.last_error: str | None = None
        self._error_box: QMessageBox | None = None
        self._after_idle: list[Callable[[], None]] = []
        self._closing = False
        # the window's parts with their own state, each seeing the window through a protocol
        self.appearance = Appearance(self)  # the theme and the zoom
        self.presentation = Presentation(self, self.appearance)  # the F5 view
        self.persistence = Persistence(
            self, self.appearance, settings_store or QSettings("DecodingLab", "Decoding Lab"),
            Path(autosave_path or default_autosave_path()),
        )  # fmt: skip

        self._build_ui()
        self.acts = build_actions(self)
        self.picker = self.acts.picker
        self.models = ModelActions(self)  # the loaded model, the picker, the draft model
        self.run = RunActions(self)  # Generate, Step, Continue, Stop, Compare, Clear
        self.classroom = Classroom(self)
        self.classroom.build_menus()
        self.appearance.on_text_size.append(self.classroom.set_text_size)
        self.views = RunView(self.store, self.output, self.plots, self.method, self.rate_label)
        self.experiments = ExperimentActions(
            self, self.runner, self.views, self._request, self.status_text
        )
        self._wire()
        self.score = ScoreActions(self)  # File > Score a text…, the Score view, branch here
        self.inside = InsideActions(self)  # the Inside tab, the decision layers (issue 33)
        self.appearance.on_look.append(self.score.apply_look)
        initial = self.persistence.restore_state()
        if self.settings_store.value("window/splitter") is None:  # first start: share it out
            QTimer.singleShot(0, self.appearance.share_width)
        self.timer = QTimer(self, interval=1000 // REDRAW_HZ, timeout=self.refresh)
        self.timer.start()
        self.prompt.textChanged.connect(self.persistence.changed)  # autosaved soon
        self.sampler.settings_changed.connect(self.persistence.changed)
        self.tree = TreeActions(self)  # the run tree: going to nodes, expanding, forks, files
        self.open_tree = self.tree.open_tree  # also for lessons that open a prepared tree
        self.restored_from_autosave = self.persistence.read_autosave()
        self._update_buttons()
        if autoload:
            QTimer.singleShot(0, lambda: self.load_model(initial))

    # -- layout -------------------------------------------------------------------------------

    def _build_ui(self) -> None:
        self.left = ControlsColumn()
        self.method, self.sampler = self.left.method, self.left.sampler
        self.prompt_box = PromptBox()
        self.prompt = self.prompt_box.editor
        self.output = OutputBox()
        self.pane = self.output.pane
        middle = QSplitter(Qt.Orientation.Vertical)
        middle.addWidget(self.prompt_box)
        middle.addWidget(self.output)
        middle.setStretchFactor(0, 1)
        middle.setStretchFactor(1, 3)
        self.plots = PlotArea()
        self.dist, self.tabs = self.plots.dist_box.plot, self.plots.tabs
        self.beam_tree, self.compare_view = self.plots.beam_tree, self.plots.compare_view
        self.splitter = QSplitter(Qt.Orientation.Horizontal)
        for i, (widget, stretch) in enumerate(((self.left, 0), (middle, 2), (self.plots, 3))):
            self.splitter.addWidget(widget)
            self.splitter.setStretchFactor(i, stretch)
        self.splitter.setSizes([350, 550, 820])
        self.strip = PresenterStrip(self.sampler)
        self.strip.hide()
        central = QWidget()
        column = QVBoxLayout(central)
        column.setContentsMargins(0, 0, 0, 0)
        column.setSpacing(0)
        column.addWidget(self.strip)
        column.addWidget(self.splitter, 1)
        self.setCentralWidget(central)
        self.status = StatusArea(self.statusBar())
        self.model_label, self.busy_bar = self.status.model, self.status.busy
        self.status_text, self.rate_label = self.status.text, self.status.rate
        screen = QApplication.primaryScreen()  # first start: most of the screen
        area = screen.availableGeometry() if screen is not None else None
        if area is None:
            self.resize(1600, 900)
        else:
            self.resize(min(1720, int(area.width() * 0.96)), min(1000, int(area.height() * 0.94)))

    def _wire(self) -> None:
        r = self.runner
        r.busy_changed.connect(self._on_busy)
        r.progress.connect(self._on_progress)
        r.fraction.connect(self._on_fraction)
        r.failed.connect(self.show_error)
        r.job_done.connect(self._on_job_done)
        self.method.method_changed.connect(self._on_method_changed)
        self.compare_view.run_requested.connect(self.run_comparison)
        self.sampler.settings_changed.connect(r.send_settings)
        self.sampler.pacing_changed.connect(r.set_pacing)
        self.sampler.pacing_changed.connect(self._set_pacing_shown)
        self.pane.token_clicked.connect(self.select_step)
        self.dist.bar_clicked.connect(self.choose_token)
        self.output.color_mode.currentIndexChanged.connect(self._set_color_mode)

    # -- reading ------------------------------------------------------------------------------

    @property
    def theme(self) -> Theme:
        return self.appearance.theme

    @property
    def font_pt(self) -> int:  # the zoom
        return self.appearance.font_pt

    @property
    def presenting(self) -> bool:
        return self.presentation.presenting

    @property
    def settings_store(self) -> QSettings:
        return self.persistence.settings_store

    @property
    def autosave_path(self) -> Path:
        return self.persistence.autosave_path

    @property
    def steps(self) -> list[Step]:
        return self.store.steps

    @property
    def last_summary(self) -> RunSummary | None:
        return self.store.summary

    def _request(self, new_seed: bool = True, limit: int | None = None) -> RunRequest:
        return self.run.request(new_seed, limit)

    # -- models (gui.models.actions) ----------------------------------------------------------

    @property
    def bundle(self) -> ModelBundle | None:
        return self.models.bundle

    @bundle.setter
    def bundle(self, bundle: ModelBundle | None) -> None:
        self.models.bundle = bundle

    def load_model(self, source: str) -> None:
        self.models.load_model(source)

    def load_draft(self, source: str) -> None:
        self.models.load_draft(source)

    def open_served_dialog(self) -> None:
        self.models.open_served_dialog()

    def _on_model_loaded(self, bundle: ModelBundle) -> None:  # gui.devtools.bench hands one in here
        self.models.adopt(bundle)

    # -- running (gui.run.actions; undo, redo and a chosen token: gui.tree.actions) ------------

    def generate(self) -> None:
        self.run.generate()

    def step_once(self) -> None:
        self.run.step_once()

    def continue_run(self) -> None:
        self.run.continue_run()

    def stop(self) -> None:
        self.run.stop()

    def run_comparison(self) -> None:
        self.run.run_comparison()

    def clear_output(self) -> None:
        self.run.clear_output()

    def show_capability(self, versions: tuple[str, ...]) -> None:
        """A served model's capability line above the distribution: the brief version (two
        lines at most), the whole one on hover; () hides it."""
        label = self.plots.dist_box.capability
        label.setText(versions[1] if len(versions) > 1 else "".join(versions))
        label.setToolTip(versions[0] if versions else "")  # no tags in it: shown as text
        label.setVisible(bool(versions))

    @Slot()
    def undo(self) -> None:
        """The last choice taken back, or (on a path the engine does not hold) the last move."""
        self.tree.undo()

    @Slot()
    def redo(self) -> None:
        self.tree.redo()

    @Slot(int, int)
    def choose_token(self, step_index: int, token_id: int) -> None:
        """Force ``token_id`` at ``step_index`` and continue from there (a new branch)."""
        self.tree.choose_token(step_index, token_id)

    @Slot(str)
    def _on_method_changed(self, method: str) -> None:
        self.views.update_legend(self.theme)
        if method in TREE_METHODS:
            self.tabs.setCurrentWidget(self.plots.beam_panel)
        elif self.tabs.currentWidget() is self.plots.beam_panel:
            self.tabs.setCurrentIndex(0)

    @Slot(float)
    def _set_pacing_shown(self, rate: float) -> None:
        self.views.pacing = rate

    @Slot(int)
    def select_step(self, index: int) -> None:
        self.views.select(index)

    # -- drawing (timer) and job events -------------------------------------------------------

    @Slot()
    def refresh(self) -> None:
        """Move what the worker sent onto the screen, redrawing once."""
        change = self.store.drain()
        if change:
            self.views.apply(change, busy=self.runner.busy)
            self.persistence.changed()
            if change.choices is not None or change.reset:
                self._update_buttons()

    drain = refresh  # the name the tests and the benchmark use

    @Slot(str)
    def _on_progress(self, text: str) -> None:
        self.status_text.setText(text)
        if self.runner.job_name == "compare":
            self.compare_view.set_progress(text)

    @Slot(float)
    def _on_fraction(self, fraction: float) -> None:
        """A long step that knows how far it got (reading a long prompt): a filling bar."""
        self.busy_bar.setRange(0, 1000)
        self.busy_bar.setValue(round(1000 * min(1.0, max(0.0, fraction))))

    @Slot(bool)
    def _on_busy(self, busy: bool) -> None:
        self.busy_bar.setRange(0, 0)  # busy, for as long as nothing says how far it got
        self.busy_bar.setVisible(busy)
        if not busy:
            self.refresh()  # always flush, so the last token shows
            self.views.redraw(busy=False)  # and every curve has its last point
            queued, self._after_idle = self._after_idle, []
            for fn in queued:
                fn()
        self._update_buttons()

    def after_idle(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` once the current job has ended (at once when none runs)."""
        if self.runner.busy:
            self._after_idle.append(fn)
        else:
            fn()

    def text_points(self) -> int:
        return self.appearance.text_points()

    def show_score(self, text: str, prompt: str = "") -> None:
        self.score.show(text, prompt)  # gui.score.actions: scored off the GUI thread

    @Slot(str)
    def _on_job_done(self, name: str) -> None:
        self.refresh()
        self.classroom.job_done(name)
        summary = self.store.summary
        if name == "resume":
            self.store.restored = False  # the engine holds this run now
        if name in RUN_JOBS and summary is not None:
            why = summary.ending or STOP_REASONS.get(summary.stop_reason, summary.stop_reason)
            notice = unknown_ids_notice(self.bundle)  # served ids the tokenizer lacks
            self.status_text.setText(f"Done: {summary.tokens} tokens; {why}.{notice}")
            self.run_finished.emit(summary)
        elif name in ("undo", "redo"):
            self.status_text.setText(f"{name.capitalize()}: {len(self.store.steps)} tokens.")
        elif name == "compare":
            self.status_text.setText(f"Compared {len(self.store.results)} methods.")
            self.compare_view.set_progress(f"Done: {len(self.store.results)} methods compared.")

    def _update_buttons(self) -> None:
        busy, has_model = self.runner.busy, self.bundle is not None
        a, store = self.acts, self.store
        a.generate.setEnabled(not busy and has_model)
        a.stop.setEnabled(busy)
        a.step.setEnabled(not busy and has_model)
        can_go_on = store.can_resume() or (
            store.can_continue() and store.method not in BEAMS and not store.restored
        )
        a.continue_.setEnabled(not busy and can_go_on)
        a.undo.setEnabled(not busy and store.can_undo())
        a.redo.setEnabled(not busy and store.choices.can_redo)
        a.clear.setEnabled(not busy)

    # -- errors -------------------------------------------------------------------------------

    @Slot(str)
    def show_error(self, message: str) -> None:
        """One dialog with the message; while one is open, later errors go to the status bar."""
        self.last_error = message
        self.status_text.setText(message.splitlines()[0])
        if self._closing or (self._error_box is not None and self._error_box.isVisible()):
            return
        box = QMessageBox(
            QMessageBox.Icon.Warning, "Decoding Lab", message, QMessageBox.StandardButton.Ok, self
        )
        box.setTextFormat(Qt.TextFormat.PlainText)
        box.setWindowModality(Qt.WindowModality.WindowModal)
        box.open()
        self._error_box = box

    # -- looks: theme, zoom, the presentation view, Help (shell.appearance, shell.presentation) ---

    def toggle_theme(self) -> None:
        self.set_theme("dark" if self.theme.name == "light" else "light")

    def set_theme(self, name: str) -> None:
        self.appearance.apply_theme(name)

    def set_zoom(self, points: int) -> None:
        self.appearance.apply_zoom(points)

    def set_presentation(self, on: bool) -> None:
        self.presentation.set_presentation(on)

    @Slot()
    def _set_color_mode(self, *_args: object) -> None:
        self.pane.set_mode(self.output.color_mode.currentData())
        self.views.update_legend(self.theme)

    def about_text(self) -> str:
        return about_text()

    def show_shortcuts(self) -> None:
        self.appearance.show_shortcuts()

    def show_about(self) -> None:
        self.appearance.show_about()

    # -- files --------------------------------------------------------------------------------

    def export(self, kind: str, path: str | None = None) -> bool:
        """Save the run as JSON, CSV, Markdown or the plots as PNG (asks where, unless told)."""
        return self.persistence.export_run(kind, path)

    @Slot()
    def autosave(self) -> bool:
        return self.persistence.write_autosave()

    def closeEvent(self, event: QCloseEvent) -> None:  # noqa: N802 - Qt override
        self._closing = True
        self.timer.stop()
        self.persistence.stop()
        self.refresh()
        self.autosave()
        self.persistence.save_state()
        self.hide()
        if not self.runner.shutdown():
            self.status_text.setText("Still finishing the current job…")
        event.accept()
