"""MainWindow: the window's layout (the areas, ``_build_ui``), its own handlers of them, the
public names the tests and the developer tools use, errors and closing. Everything else is a
part, assembled in one place by ``gui.shell.compose``; no part is given the window.

Records flow one way: engine -> worker -> run store -> views, the views redrawn by one 30 Hz
display clock (``gui.common.clock``), so the generation rate never drives the screen rate."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QSettings, Qt, Signal, Slot
from PySide6.QtGui import QCloseEvent
from PySide6.QtWidgets import (
    QApplication,
    QDockWidget,
    QMainWindow,
    QMessageBox,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from engine.drivers.workbench import RunRequest
from engine.models.loading import ModelBundle
from engine.records import Step
from gui.common.theme import Theme
from gui.controls.presenter_strip import PresenterStrip
from gui.core.store import RunStore
from gui.core.worker import EngineRunner
from gui.models.picker import ModelPicker
from gui.run.actions import TREE_METHODS
from gui.shell.appearance import about_text
from gui.shell.areas import ControlsColumn, OutputBox, PlotArea, PromptBox, StatusArea
from gui.shell.compose import compose


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
        self._closing = False
        self._build_ui()
        compose(self, settings_store, autosave_path, autoload)  # every part, in one place

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
        middle.setChildrenCollapsible(False)  # a dragged divider never hides prompt or output
        self.plots = PlotArea()
        self.dist, self.tabs = self.plots.dist_box.plot, self.plots.tabs
        self.beam_tree, self.compare_view = self.plots.beam_tree, self.plots.compare_view
        self.splitter = QSplitter(Qt.Orientation.Horizontal)
        for i, (widget, stretch) in enumerate(((middle, 2), (self.plots, 3))):
            self.splitter.addWidget(widget)
            self.splitter.setStretchFactor(i, stretch)
            self.splitter.setCollapsible(i, False)  # a drag never leaves a column at nothing
        self.splitter.setSizes([550, 820])
        # The controls in a dock of their own on the left: a lesson's and a guess round's docks
        # open as tabs beside it (gui.shell.compose), so the window never grows past the screen.
        self.controls_dock = QDockWidget("Controls", self)
        self.controls_dock.setObjectName("controls_dock")
        self.controls_dock.setWidget(self.left)
        self.controls_dock.setFeatures(QDockWidget.DockWidgetFeature.NoDockWidgetFeatures)
        self.controls_dock.setTitleBarWidget(QWidget())  # alone, no title; with others, a tab
        self.addDockWidget(Qt.DockWidgetArea.LeftDockWidgetArea, self.controls_dock)
        self.strip = PresenterStrip(self.sampler)
        self.strip.hide()
        central = QWidget()
        column = QVBoxLayout(central)
        column.setContentsMargins(0, 0, 0, 0)
        column.setSpacing(0)
        column.addWidget(self.strip)
        column.addWidget(self.splitter, 1)
        self.setCentralWidget(central)
        self.picker = ModelPicker()
        self.picker.setMaximumWidth(280)
        self.status = StatusArea(self.statusBar())
        self.model_label, self.busy_bar = self.status.model, self.status.busy
        self.status_text, self.rate_label = self.status.text, self.status.rate
        screen = QApplication.primaryScreen()  # first start: most of the screen
        area = screen.availableGeometry() if screen is not None else None
        if area is None:
            self.resize(1600, 900)
        else:
            self.resize(min(1720, int(area.width() * 0.96)), min(1000, int(area.height() * 0.94)))

    @Slot(int, int)
    def _bar_clicked(self, step_index: int, token_id: int) -> None:
        if self.score.shows_scored_token():
            self.score.branch_here(step_index, token_id)
        else:
            self.tree.choose_token(step_index, token_id)

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
                self.update_actions()

    drain = refresh  # the name the tests and the benchmark use

    def show_score(self, text: str, prompt: str = "") -> None:
        self.score.show(text, prompt)  # gui.score.actions: scored off the GUI thread

    def update_actions(self) -> None:
        """Enable the actions as the run and the worker are now (each part said when)."""
        self.acts.update()

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

    # -- files --------------------------------------------------------------------------------

    def export(self, kind: str, path: str | None = None) -> bool:
        """Save the run as JSON, CSV, Markdown or the plots as PNG (asks where, unless told)."""
        return self.persistence.export_run(kind, path)

    @Slot()
    def autosave(self) -> bool:
        return self.persistence.write_autosave()

    def closeEvent(self, event: QCloseEvent) -> None:  # noqa: N802 - Qt override
        self._closing = True
        self.clock.stop()
        self.persistence.stop()
        self.refresh()
        self.autosave()
        self.persistence.save_state()
        self.hide()
        if not self.runner.shutdown():
            self.status_text.setText("Still finishing the current job…")
        event.accept()
