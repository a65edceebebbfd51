"""The composition root: the one place the window is assembled. The shell's own parts first
(the display clock, the job status, the looks, the session every part is given, settings and
the presentation view), then the window's own handlers, then the feature parts in a written
order, each given its slice (``gui.core.session``: the session, its widgets, callbacks) and
never the window; then every menu and toolbar entry from the parts' declarations in one pass,
and every wiring between parts, here and nowhere else."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtCore import QSettings, Qt, QTimer
from PySide6.QtWidgets import QDockWidget, QLabel

from gui.classroom.actions import Classroom, ClassroomNeeds
from gui.classroom.live_actions import LiveActions, LiveNeeds
from gui.common.actions import ActionSpec
from gui.common.clock import DisplayClock
from gui.core.session import ModelSlot, Session
from gui.experiments.actions import ExperimentActions, ExperimentNeeds
from gui.inside.actions import InsideActions, InsideNeeds
from gui.models.actions import ModelActions, ModelNeeds
from gui.run.actions import RunActions, RunNeeds
from gui.run.view import RunView
from gui.score.actions import ScoreActions, ScoreNeeds
from gui.shell.appearance import Appearance, AppearanceNeeds
from gui.shell.help import Guides
from gui.shell.jobs import JobStatus, JobStatusNeeds
from gui.shell.menus import ShellSlots, build_bars, shell_specs
from gui.shell.persist import Persistence, PersistNeeds, default_autosave_path
from gui.shell.presentation import Presentation, PresentationNeeds
from gui.tree.actions import TreeActions, TreeNeeds

# The window being assembled (gui.shell.window.MainWindow): typed loosely here, as the
# window imports this module and a type-hint import back would close a circle.
MainWindow = Any


def compose(
    w: MainWindow, settings_store: QSettings | None, autosave_path: Path | None, autoload: bool
) -> None:
    build_shell(w, settings_store, autosave_path)
    wire_own(w)
    build_parts(w, w.session)
    # Every menu and toolbar entry, from the parts' declarations, in one pass.
    w.bars = build_bars(w, action_specs(w), [QLabel(" Model "), w.picker, w.picker.weights])
    w.acts = w.bars.table
    wire(w)
    initial = w.persistence.restore_state()
    if w.settings_store.value("window/panes") is None:  # first start: share it out
        QTimer.singleShot(0, w.appearance.share_width)
    w.clock.start()
    w.restored_from_autosave = w.persistence.read_autosave()
    w.update_actions()
    if autoload:
        QTimer.singleShot(0, lambda: w.load_model(initial))


def build_shell(
    w: MainWindow, settings_store: QSettings | None, autosave_path: Path | None
) -> None:
    w.views = RunView(w.store, w.output, w.plots, w.method, w.rate_label)
    # one display clock: the store's drain, then every registered view (gui.common.clock)
    w.clock = DisplayClock(w, w.refresh, lambda: w.runner.busy)
    # connected to the runner before any part: its flush at a job's end comes first
    w.jobs = JobStatus(JobStatusNeeds(
        runner=w.runner, store=w.store, views=w.views, status=w.status,
        compare_view=w.compare_view, refresh=w.refresh,
        update_actions=w.update_actions, bundle=lambda: w.bundle,
        run_finished=[w.run_finished.emit],
    ), w)  # the busy bar, the status line, what waits for the worker  # fmt: skip
    w.appearance = Appearance(AppearanceNeeds(
        left=w.left, prompt_box=w.prompt_box, pane=w.pane, plots=w.plots,
        splitter=w.splitter, views=w.views, clock=w.clock,
        size_controls=lambda width: w.resizeDocks(
            [w.controls_dock], [width], Qt.Orientation.Horizontal
        ),
        actions=lambda: w.acts, parent=w,
    ))  # the theme and the zoom  # fmt: skip
    # What every part is given: never the window (gui.core.session).
    w.session = Session(
        store=w.store, runner=w.runner, model=ModelSlot(), looks=w.appearance,
        parent=w, say=w.status_text.setText, show_error=lambda m: w.show_error(m),
        after_idle=w.jobs.after_idle,
    )  # fmt: skip
    w.persistence = Persistence(w.session.given(
        PersistNeeds, views=w.views, prompt_box=w.prompt_box, sampler=w.sampler,
        method=w.method, picker=w.picker, output=w.output, plots=w.plots,
        splitter=w.splitter, geometry=w.saveGeometry,
        restore_geometry=w.restoreGeometry,
    ), w.appearance, settings_store or QSettings("DecodingLab", "Decoding Lab"),
        Path(autosave_path or default_autosave_path()),
    )  # settings, the autosave, exports  # fmt: skip
    w.presentation = Presentation(PresentationNeeds(
        left=w.controls_dock, prompt_box=w.prompt_box, output=w.output, plots=w.plots,
        status=w.status, strip=w.strip, splitter=w.splitter, views=w.views,
        menu_bar=w.menuBar(), bars=lambda: w.bars,
        docks=lambda: (w.classroom.lesson_dock, w.classroom.guess_dock, w.live.dock),
        parent=w,
    ), w.appearance)  # the F5 view  # fmt: skip


def build_parts(w: MainWindow, session: Session) -> None:
    """The parts, in this order: each is given its slice (the session, its widgets, and
    callbacks); a callback that reaches a part built later is a lambda read when called."""
    given = session.given
    w.models = ModelActions(given(
        ModelNeeds, picker=w.picker, method=w.method, prompt_box=w.prompt_box,
        model_label=w.model_label, clear_output=w.clear_output,
        show_capability=w.show_capability,
    ))  # the loaded model, the picker, the draft model  # fmt: skip
    w.run = RunActions(given(
        RunNeeds, prompt_box=w.prompt_box, sampler=w.sampler, method=w.method,
        plots=w.plots, views=w.views,
        lesson_settings=lambda settings: w.classroom.settings(settings),
        update_actions=w.update_actions,
    ))  # Generate, Step, Continue, Stop, Compare, Clear  # fmt: skip
    w.experiments = ExperimentActions(given(
        ExperimentNeeds, views=w.views, request=w.run.request,
        recents=lambda: list(w.picker.recents),
    ))  # sample a step N times, sweeps, variation, lockstep  # fmt: skip
    w.score = ScoreActions(given(
        ScoreNeeds, output=w.output, plots=w.plots, prompt_box=w.prompt_box,
        choose_token=lambda i, token: w.tree.choose_token(i, token),
        clear_output=w.clear_output, step_once=w.run.step_once,
        inside_shown=lambda: w.tabs.currentWidget() is w.inside.view,
    ))  # File > Score a text…, the Score view, branch here  # fmt: skip
    w.inside = InsideActions(given(
        InsideNeeds, plots=w.plots, output=w.output, views=w.views,
        score=w.score,
    ))  # the Inside tab, the decision strip, input attribution  # fmt: skip
    w.tree = TreeActions(given(
        TreeNeeds, plots=w.plots, pane=w.pane, views=w.views,
        prompt_box=w.prompt_box, sampler=w.sampler,
        settings_store=w.settings_store, request=w.run.request,
        select_step=w.select_step, refresh=w.refresh,
        update_actions=w.update_actions,
    ))  # the run tree: going to nodes, expanding, forks, files  # fmt: skip
    w.classroom = Classroom(given(
        ClassroomNeeds, views=w.views, prompt_box=w.prompt_box, sampler=w.sampler,
        method=w.method, plots=w.plots, output=w.output,
        add_dock=lambda d: add_beside_controls(w, d),
        tabify=w.tabifyDockWidget, load_model=lambda s: w.models.load_model(s),
        load_draft=lambda s: w.models.load_draft(s), step_once=w.run.step_once,
        export=w.export, show_score=lambda text, p: w.score.show(text, p),
        open_tree=lambda tree: w.tree.open_tree(tree),
        prepare_experiment=w.experiments.prepare_stage,
        prepare_inside=w.inside.prepare_stage, inside_tab=w.inside.view,
        live_stage=lambda mode: w.live.lesson_stage(mode),
    ))  # lessons, the guess round, the shared web page  # fmt: skip
    w.live = LiveActions(given(
        LiveNeeds, plots=w.plots, views=w.views, request=w.run.request,
        step_once=w.run.step_once, add_dock=lambda d: add_beside_controls(w, d),
    ))  # the live round: students answer from their phones  # fmt: skip


def action_specs(w: MainWindow) -> list[ActionSpec]:
    dark = lambda: w.set_theme("dark" if w.theme.name == "light" else "light")  # noqa: E731
    slots = ShellSlots(
        toggle_theme=dark, zoom=w.set_zoom, zoom_now=lambda: w.font_pt,
        toggle_presentation=lambda: w.set_presentation(not w.presenting),
        export=w.export, quit=w.close, shortcuts=w.appearance.show_shortcuts,
        about=w.appearance.show_about,
        guide=Guides(w, w.appearance.text_points).open,  # Help > the guides, offline
    )  # fmt: skip
    parts = (w.models, w.run, w.classroom, w.live, w.experiments, w.score, w.tree)
    return [*shell_specs(slots), *(spec for part in parts for spec in part.action_specs())]


def wire_own(w: MainWindow) -> None:
    """The window's own handlers of the runner and of the areas' widgets. Connected before
    any part is built, so they run first: the flush at a job's end comes before a part
    redraws its own (the Score view puts its token back after the run's last redraw), and
    a clicked token is the selected step before the Inside tab asks for it."""
    r = w.runner
    r.failed.connect(w.show_error)
    w.method.method_changed.connect(w._on_method_changed)
    w.sampler.settings_changed.connect(r.send_settings)
    w.sampler.pacing_changed.connect(r.set_pacing)
    w.sampler.pacing_changed.connect(w._set_pacing_shown)
    w.pane.token_clicked.connect(w.select_step)
    # a bar click takes that token in the run, or branches a scored text there
    w.dist.bar_clicked.connect(w._bar_clicked)
    w.output.color_mode.currentIndexChanged.connect(w._set_color_mode)
    w.prompt.textChanged.connect(w.persistence.changed)  # autosaved soon
    w.sampler.settings_changed.connect(w.persistence.changed)


def wire(w: MainWindow) -> None:
    """Every wiring between parts, in one place (after they are all built)."""
    w.compare_view.run_requested.connect(w.run.run_comparison)
    # the views the display clock redraws, and tells of a new theme or text size
    p = w.plots
    w.clock.register(w.jobs, p.dist_box.plot, p.speed, p.entropy, p.beam_tree, w.classroom,
                        w.experiments, w.inside, w.score, w.tree, w.live)  # fmt: skip
    w.run_finished.connect(w.inside.after_run)  # the Inside tab follows a run's end
    w.jobs.n.finished.append(w.classroom.job_done)  # a guess round's step
    w.jobs.n.finished.append(w.live.job_done)  # a live round's reveal


def add_beside_controls(w: MainWindow, dock: QDockWidget) -> None:
    """A lesson's or a guess round's dock: a tab beside the controls, not a column more (a
    column more pushed the window to 1431 px on a 1280 px projector)."""
    w.addDockWidget(Qt.DockWidgetArea.LeftDockWidgetArea, dock)
    w.tabifyDockWidget(w.controls_dock, dock)
