"""MainWindow: builds the areas, wires widgets to the runner and the run store, and turns user
actions into runner calls. Records flow one way: engine -> worker -> run store -> views, the
views redrawn by a 30 Hz timer, so the generation rate never drives the screen rate."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from PySide6.QtCore import QSettings, Qt, QTimer, Signal, Slot
from PySide6.QtGui import QCloseEvent
from PySide6.QtWidgets import (
    QApplication,
    QInputDialog,
    QMainWindow,
    QMessageBox,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from engine.drivers.workbench import BEAMS, RunRequest
from engine.models.loading import ModelBundle
from engine.records import CONTRASTIVE, SAMPLING, RunSummary, Step
from engine.validate.served import (
    CREDENTIALS_REFUSED,
    has_credentials,
    redact_url,
    unknown_ids_notice,
)
from gui.appearance import Appearance, about_text
from gui.experiment_actions import ExperimentActions
from gui.lessons import Classroom
from gui.menus import build_actions, shortcuts_html
from gui.panels import ControlsColumn, OutputBox, PlotArea, PromptBox, StatusArea
from gui.persist import Persistence, default_autosave_path
from gui.presentation import Presentation
from gui.score_actions import ScoreActions
from gui.store import RunStore
from gui.theme import Theme
from gui.tree_actions import TreeActions
from gui.views import RunView
from gui.widgets.presenter_strip import PresenterStrip
from gui.widgets.served_dialog import ServedDialog, parse_served
from gui.worker import EngineRunner

TREE_METHODS = (*BEAMS, CONTRASTIVE)  # methods that draw a tree (BeamEvent records)
REDRAW_HZ = 30
AUTOSAVE_MS = 2000  # while something changed, write the autosave at most this often
RUN_JOBS = ("generate", "step", "continue", "branch", "resume")
STOP_REASONS = {
    "eos": "the model ended its answer",
    "max_new_tokens": "reached the token limit (Continue for more)",
    "context": "the model's context is full",
    "stopped": "stopped",
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
        self.bundle: ModelBundle | None = None
        self.last_error: str | None = None
        self._error_box: QMessageBox | None = None
        self._after_idle: list[Callable[[], None]] = []
        self._loading_source: str | None = None
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
        self.classroom = Classroom(self)
        self.classroom.build_menus()
        self.appearance.on_text_size.append(self.classroom.set_text_size)
        self.views = RunView(self.store, self.output, self.plots, self.method, self.rate_label)
        self.lab = ExperimentActions(self, self.runner, self.views, self._request, self.status_text)
        self._wire()
        self.scoring = ScoreActions(self)  # File > Score a text…, the Score view, branch here
        self.appearance.on_look.append(self.scoring.apply_look)
        initial = self.persistence.restore_state()
        if self.settings_store.value("window/splitter") is None:  # first start: share it out
            QTimer.singleShot(0, self.appearance.share_width)
        self.timer = QTimer(self, interval=1000 // REDRAW_HZ, timeout=self.refresh)
        self.timer.start()
        self.autosave_timer = QTimer(self, interval=AUTOSAVE_MS, singleShot=True)
        self.autosave_timer.timeout.connect(self.autosave)
        self.prompt.textChanged.connect(self._changed)
        self.sampler.settings_changed.connect(self._changed)
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
        r.model_loaded.connect(self._on_model_loaded)
        r.load_failed.connect(self._on_load_failed)
        r.draft_loaded.connect(self._on_draft_loaded)
        r.failed.connect(self.show_error)
        r.job_done.connect(self._on_job_done)
        self.method.method_changed.connect(self._on_method_changed)
        self.method.load_draft_requested.connect(self._pick_draft)
        self.compare_view.run_requested.connect(self.run_comparison)
        self.sampler.settings_changed.connect(r.send_settings)
        self.sampler.pacing_changed.connect(r.set_pacing)
        self.sampler.pacing_changed.connect(self._set_pacing_shown)
        self.pane.token_clicked.connect(self.select_step)
        self.dist.bar_clicked.connect(self.choose_token)
        self.output.color_mode.currentIndexChanged.connect(self._set_color_mode)
        self.picker.source_chosen.connect(self.load_model)
        self.picker.served_requested.connect(self.open_served_dialog)

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
        settings = self.sampler.next_run_settings() if new_seed else self.sampler.settings()
        settings = self.classroom.settings(settings)
        return RunRequest(
            prompt=self.prompt.toPlainText(), method=self.method.current(), settings=settings,
            chat_template=self.prompt_box.use_chat(), limit=limit,
            **self.method.request_options(),
        )  # fmt: skip

    # -- models -------------------------------------------------------------------------------

    def load_model(self, source: str) -> None:
        """Load a model; a running generation is stopped first (the current model stays until
        the new one is ready)."""
        if self.runner.busy:
            self.runner.stop()
            self._after_idle.append(lambda: self.load_model(source))
            return
        served = parse_served(source)
        if served is not None and has_credentials(served[0]):  # before it is shown or kept
            self.show_error(CREDENTIALS_REFUSED.format(url=redact_url(served[0])))
            return
        self._loading_source = source
        self.picker.fill(pending=source)
        if served is not None:  # a model behind an OpenAI-compatible endpoint
            from engine.serve.remote import KeySource

            url, model, key_kind = served
            self.status_text.setText(f"Connecting to {url}…")
            self.runner.open_served(url, model or None, KeySource(key_kind))
            return
        self.status_text.setText(f"Loading {source}…")
        self.runner.load(source)

    @Slot()
    def open_served_dialog(self) -> None:
        """File > Open served model…: the endpoint, the model, where the key comes from."""
        last = next((r for r in self.picker.recents if parse_served(r)), None)
        dialog = ServedDialog(self, last)
        if dialog.exec() != ServedDialog.DialogCode.Accepted:
            return
        source = dialog.source()
        if source is None:
            self.show_error("Give the server's address, for example http://127.0.0.1:8000")
            return
        self.load_model(source)

    @Slot(object)
    def _on_model_loaded(self, bundle: ModelBundle) -> None:
        source = self._loading_source or bundle.source_key or bundle.source
        bundle.source_key = source
        previous_example = self.bundle.extra.get("example_prompt") if self.bundle else None
        self.bundle, self._loading_source = bundle, None
        self.picker.remember(source)
        self.model_label.setText(bundle.describe())
        self.method.set_served(hasattr(bundle, "make_session"))  # a served model's stream mode
        self.prompt_box.describe_model(bundle.is_encoder_decoder, bundle.has_chat_template)
        example = bundle.extra.get("example_prompt")
        current = self.prompt.toPlainText().strip()
        if example and (not current or current == previous_example):
            self.prompt.setPlainText(example)
        self.clear_output()
        self.status_text.setText(f"Ready: {bundle.name}. Press Generate (Ctrl+Enter).")

    @Slot(str)
    def _on_load_failed(self, message: str) -> None:
        self._loading_source = None
        self.picker.fill()
        self.show_error(f"Could not load the model.\n\n{message}")

    @Slot()
    def _pick_draft(self) -> None:
        text, ok = QInputDialog.getText(
            self, "Draft model", "A bundled name, a folder, a .gguf file or a Hugging Face id:"
        )
        if ok and text.strip():
            self.load_draft(text.strip())

    def load_draft(self, source: str) -> None:
        if self.runner.busy:
            return
        self.status_text.setText(f"Loading draft model {source}…")
        self.runner.load_draft(source)

    @Slot(object)
    def _on_draft_loaded(self, draft: ModelBundle) -> None:
        self.method.draft_label.setText(draft.name)
        self.status_text.setText(f"Draft model ready: {draft.name}")

    # -- running ------------------------------------------------------------------------------

    @Slot()
    def generate(self) -> None:
        if self.runner.busy:
            return
        request = self._request()
        if not request.prompt.strip():
            self.show_error("The prompt is empty: type something for the model to continue.")
            return
        if self.runner.generate(request):
            self.store.clear()  # the old run leaves the screen now, not when the new one starts
            self.views.clear()
            if request.method in TREE_METHODS:
                self.tabs.setCurrentWidget(self.plots.beam_panel)
            self.status_text.setText("Generating…")

    @Slot()
    def step_once(self) -> None:
        if self.runner.busy:
            return
        if self.store.can_resume():
            self._resume(1)
        else:
            self.runner.step(self._request(new_seed=not self.store.steps))

    @Slot()
    def continue_run(self) -> None:
        if self.runner.busy:
            return
        if self.store.can_resume():
            self._resume(None)
        else:
            self.runner.continue_(self.sampler.settings())

    def _resume(self, limit: int | None) -> None:
        """Continue or Step on a run restored from the autosave: the engine rebuilds it from
        the saved prompt and tokens (one prefill), then goes on."""
        run = self.store.run
        if self.bundle is None or run is None:
            self.show_error("Load a model first: the restored run needs one to go on.")
            return
        request = replace(
            self._request(new_seed=False), prompt=run.prompt, chat_template=run.chat_template,
            method=SAMPLING,
        )  # fmt: skip
        if self.runner.resume(request, self.store.steps, limit):
            self.status_text.setText(
                f"Rebuilding the restored run ({len(self.store.steps)} tokens), then going on…"
            )

    @Slot()
    def undo(self) -> None:
        """The last choice taken back, or (on a path the engine does not hold) the last move."""
        self.tree.undo()

    @Slot()
    def redo(self) -> None:
        self.tree.redo()

    @Slot()
    def stop(self) -> None:
        if self.runner.busy:
            self.runner.stop()
            self.status_text.setText("Stopping…")

    @Slot(int, int)
    def choose_token(self, step_index: int, token_id: int) -> None:
        """Force ``token_id`` at ``step_index`` and continue from there (a new branch)."""
        self.tree.choose_token(step_index, token_id)

    @Slot()
    def run_comparison(self) -> None:
        if self.runner.busy:
            return
        self.compare_view.clear_results()
        self.store.results.clear()
        if self.runner.compare(self._request()):
            self.tabs.setCurrentWidget(self.compare_view)
            self.status_text.setText("Comparing methods…")

    @Slot()
    def clear_output(self) -> None:
        if self.runner.busy:
            return
        self.runner.forget_run()
        self.store.clear(tree=True)
        self.views.clear()
        self._update_buttons()

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
            self._changed()
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
        self.scoring.show(text, prompt)  # gui.score_actions: scored off the GUI thread

    @Slot(str)
    def _on_job_done(self, name: str) -> None:
        self.refresh()
        self.classroom.job_done(name)
        summary = self.store.summary
        if name == "resume":
            self.store.restored = False  # the engine holds this run now
        if name in RUN_JOBS and summary is not None:
            why = STOP_REASONS.get(summary.stop_reason, summary.stop_reason)
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
        a.undo.setEnabled(not busy and store.choices.can_undo)
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

    # -- classroom: theme, zoom, colours --------------------------------------------------------

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

    @Slot()
    def show_shortcuts(self) -> None:
        box = QMessageBox(
            QMessageBox.Icon.NoIcon, "Keyboard shortcuts", shortcuts_html(self.acts),
            QMessageBox.StandardButton.Close, self,
        )  # fmt: skip
        box.setTextFormat(Qt.TextFormat.RichText)
        box.open()
        self._shortcuts_box = box

    @Slot()
    def show_about(self) -> None:
        QMessageBox.about(self, "About Decoding Lab", self.about_text())

    # -- files --------------------------------------------------------------------------------

    def export(self, kind: str, path: str | None = None) -> bool:
        """Save the run as JSON, CSV, Markdown or the plots as PNG (asks where, unless told)."""
        return self.persistence.export_run(kind, path)

    @Slot()
    def _changed(self, *_args: object) -> None:
        if not self.autosave_timer.isActive() and not self._closing:
            self.autosave_timer.start()

    @Slot()
    def autosave(self) -> bool:
        return self.persistence.write_autosave()

    def closeEvent(self, event: QCloseEvent) -> None:  # noqa: N802 - Qt override
        self._closing = True
        self.timer.stop()
        self.autosave_timer.stop()
        self.refresh()
        self.autosave()
        self.persistence.save_state()
        self.hide()
        if not self.runner.shutdown():
            self.status_text.setText("Still finishing the current job…")
        event.accept()
