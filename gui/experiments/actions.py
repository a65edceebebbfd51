"""The Experiments menu and tab: sample a step N times, sweep a setting, stochastic variation
and two models in lockstep. The window creates this controller in one line; it asks the
runner for jobs (``EngineRunner.job``), keeps what a finished job returned, and draws
it into the Experiments tab on its own redraw timer. It never writes into the worker, and the
current run is never touched: an experiment builds its own sessions on the job's thread."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from PySide6.QtCore import QObject, Slot

from engine.classroom.lessons import (
    ACTION_LOCKSTEP,
    ACTION_SAMPLE_STEP,
    ACTION_SWEEP,
    LessonStage,
)
from engine.drivers.workbench import RunRequest
from engine.models.catalog import DECODER_ONLY, list_bundled
from gui.common.actions import ActionSpec, Place
from gui.common.theme import Theme
from gui.core.session import Session
from gui.experiments import jobs
from gui.experiments.dialogs import LockstepDialog, RunsDialog, SweepDialog, parse_values
from gui.experiments.words import EXPERIMENT_PRESS, only_setting
from gui.models.api import parse_served, served_title
from gui.run.api import RunView


@dataclass
class ExperimentNeeds(Session):
    """What the experiments are given: the run's view (the step in view), the panels'
    request, and the recent models (lockstep's choice of model B)."""

    views: RunView
    request: Callable[[bool], RunRequest]
    recents: Callable[[], list[str]]


class ExperimentActions(QObject):
    def __init__(self, needs: ExperimentNeeds) -> None:
        super().__init__(needs.parent)
        self.dialog_parent, self.runner, self.views = needs.parent, needs.runner, needs.views
        self.request, self.say, self.recents = needs.request, needs.say, needs.recents
        views = needs.views
        self.plots = views.plots
        self.tabs = views.plots.experiments
        self.latest: dict[str, Any] = {}  # what finished jobs returned, drawn on the next tick
        self.sampled: jobs.SampleResult | None = None  # "draw more" goes on from it
        self._sample_key: tuple[Any, ...] = ()  # what it sampled: the step, settings, model
        self.lesson_model_b: str | None = None  # a lesson's lockstep stage: its model B
        self.lesson_sweep: tuple[str, tuple[float, ...]] | None = None  # a lesson stage's
        t = self.tabs
        t.histogram.draw_requested.connect(self.sample)
        t.histogram.more_requested.connect(self.draw_more)
        t.sweep.sweep_requested.connect(self.ask_sweep)
        t.variation.variation_requested.connect(self.ask_variation)
        t.lockstep.lockstep_requested.connect(self.ask_lockstep)
        self.plots.dist_box.sample_button.clicked.connect(lambda: self.sample(t.histogram.n()))

    def action_specs(self) -> list[ActionSpec]:
        """The Experiments menu."""
        h = self.tabs.histogram
        return [
            ActionSpec("sample", "Sample this step N times", lambda: self.sample(h.n()),
                       (Place("experiments", "step", 0),), "Ctrl+H",
                       "The next-token bars against N real draws"),
            ActionSpec("draw_more", "Draw more", lambda: self.draw_more(h.n()),
                       (Place("experiments", "step", 1),), "Ctrl+Shift+H",
                       "N more draws into the same histogram"),
            ActionSpec("sweep", "Sweep a setting…", self.ask_sweep,
                       (Place("experiments", "runs", 0),),
                       tip="One run per value, same prompt and seed"),
            ActionSpec("variation", "Stochastic variation…", self.ask_variation,
                       (Place("experiments", "runs", 1),), tip="N seeded runs grouped by output"),
            ActionSpec("lockstep", "Two models in lockstep…", self.ask_lockstep,
                       (Place("experiments", "runs", 2),), tip="Model B scores model A's text"),
        ]  # fmt: skip

    # -- what the experiments read --------------------------------------------------------------

    def where(self) -> jobs.Where:
        """The step in view: the selected one, else the run's last; the first without a run."""
        store = self.views.store
        run, steps = store.run, store.steps
        if run is None or not steps:
            r = self.request(False)
            return jobs.Where(r.prompt, r.chat_template)
        index = self.views.selected if self.views.selected is not None else len(steps) - 1
        index = max(0, min(index, len(steps) - 1))
        prefix = tuple(s.token_id for s in steps[:index])
        return jobs.Where(run.prompt, run.chat_template, prefix, f"at step {index + 1}")

    def _start(self, name: str, page: Any, work: Callable[[Any, Any], Any]) -> bool:
        if self.runner.busy:
            self.say(f"Busy ({self.runner.job_name}): press Stop first.")
            return False
        started = self.runner.job(name, work, partial(self._finished, name))
        if started:
            self.plots.tabs.setCurrentWidget(self.tabs)
            self.tabs.setCurrentWidget(page)
            self.say(f"Running the {name}…")
        return started

    def _finished(self, name: str, result: Any) -> None:
        if name == "step sample":
            self.sampled = result
        self.latest[name] = result

    # -- the actions ------------------------------------------------------------------------

    @Slot(int)
    def sample(self, n: int) -> bool:
        where, settings = self.where(), self.request(False).settings
        self._sample_key = self._key(where, settings)
        return self._start("step sample", self.tabs.histogram,
                           lambda _job, b: jobs.sample_first(b, where, settings, n))  # fmt: skip

    @Slot(int)
    def draw_more(self, n: int) -> bool:
        """N more draws of the same step; a fresh histogram when the step in view, the
        settings or the model changed since (more draws of another step would mislead)."""
        previous = self.sampled
        if previous is None or self._key(self.where(), self.request(False).settings) != (
            self._sample_key
        ):
            return self.sample(n)
        return self._start("step sample", self.tabs.histogram,
                           lambda _job, _b: jobs.sample_more(previous, n))  # fmt: skip

    def _key(self, where: jobs.Where, settings: Any) -> tuple[Any, ...]:
        return (where, settings, id(self.runner.workbench.bundle))

    def sweep(self, setting: str, values: list[float], only: bool = False) -> bool:
        """One run per value of ``setting``; with ``only`` every other stage is off for the
        sweep (the sampler panel's settings are not touched)."""
        where, base = self.where_prompt(), self.request(False).settings
        if only:
            base = only_setting(base, setting)
        self.plots.compare_view.clear_results()
        self.views.store.results.clear()
        work = partial(jobs.sweep_job, where=where, base=base, setting=setting, values=values)
        return self._start("sweep", self.tabs.sweep, lambda _job, b: work(b))

    def variation(self, runs: int) -> bool:
        where, base = self.where_prompt(), self.request(False).settings
        return self._start("variation", self.tabs.variation,
                           lambda _job, b: jobs.variation_job(b, where, base, runs))  # fmt: skip

    def lockstep(self, source_b: str, top_n: int = 10) -> bool:
        where, settings = self.where_prompt(), self.request(False).settings
        return self._start(
            "lockstep", self.tabs.lockstep,
            lambda job, b: jobs.lockstep_job(b, where, settings, source_b, top_n, job.say),
        )  # fmt: skip

    def where_prompt(self) -> jobs.Where:
        """A sweep, the variation and lockstep start from the prompt (a new run each)."""
        r = self.request(False)
        return jobs.Where(r.prompt, r.chat_template)

    def prepare_stage(self, stage: LessonStage) -> None:
        """A lesson stage opened: an experiment stage sets the histogram's N or the sweep's
        values, picks its page and says in plain words what pressing its button shows."""
        self.lesson_sweep = stage.sweep if stage.action == ACTION_SWEEP else None
        lockstep = stage.action == ACTION_LOCKSTEP
        self.lesson_model_b = str(stage.options.get("model_b")) if lockstep else None
        if lockstep:
            page = self.tabs.lockstep
        elif stage.action == ACTION_SAMPLE_STEP:
            self.tabs.histogram.set_n(stage.samples)
            page = self.tabs.histogram
        elif stage.action == ACTION_SWEEP:
            page = self.tabs.sweep
        else:
            return
        self.tabs.setCurrentWidget(page)  # shown when the job starts: the stage's focus stays
        self.say(f"Lesson: {stage.title}. {EXPERIMENT_PRESS[stage.action]}")

    @Slot()
    def ask_sweep(self) -> None:
        dialog = SweepDialog(self.dialog_parent, self.lesson_sweep, self.request(False).settings)
        if dialog.exec() != SweepDialog.DialogCode.Accepted:
            return
        setting, text = dialog.chosen()
        try:
            values = parse_values(text)
        except ValueError as exc:
            self.say(f"Sweep: {exc}")
            return
        self.sweep(setting, values, dialog.only_this())

    @Slot()
    def ask_variation(self) -> None:
        dialog = RunsDialog(self.dialog_parent)
        if dialog.exec() == RunsDialog.DialogCode.Accepted:
            self.variation(dialog.runs.value())

    @Slot()
    def ask_lockstep(self) -> None:
        bundled = [(m.name, m.title) for m in list_bundled() if m.kind == DECODER_ONLY]
        recents = self.recents()
        served = [(s, served_title(s)) for s in recents if parse_served(s)]  # Open served model…
        dialog = LockstepDialog(self.dialog_parent, bundled, served)
        if self.lesson_model_b is not None:  # a lesson's lockstep stage: its model B chosen
            dialog.model.setCurrentIndex(max(0, dialog.model.findData(self.lesson_model_b)))
        if dialog.exec() != LockstepDialog.DialogCode.Accepted:
            return
        source, top_n = dialog.chosen()
        if source:
            self.lockstep(source, top_n)

    # -- drawing (timer) ----------------------------------------------------------------------

    def tick(self, _busy: bool = False) -> None:
        """A frame of the display clock: draw what finished jobs returned."""
        if not self.latest:
            return
        latest, self.latest = self.latest, {}
        t = self.tabs
        for name, result in latest.items():
            if name == "step sample":
                t.histogram.show_sample(result.sample, result.label)
                self.say(f"Sampled {result.label}: {result.sample.n:,} draws.")
            elif name == "sweep":
                t.sweep.show_rows(result.rows, result.seed, result.also_on)
                self.say(f"Swept {len(result.rows)} values; the rows are in the Compare tab.")
            elif name == "variation":
                t.variation.show_variation(result)
                self.say(f"{result.runs} runs: {result.distinct} different continuations.")
            elif name == "lockstep":
                self._show_lockstep(result)

    def _show_lockstep(self, result: jobs.LockstepResult) -> None:
        if result.refusal:
            self.tabs.lockstep.refuse(result.refusal)
            self.say("Lockstep refused: the two models use different tokenizers.")
            return
        self.tabs.lockstep.show_steps(
            result.steps, result.summary, result.a, result.b, result.bounds, result.extra
        )
        self.say(f"Lockstep: {len(result.steps)} steps compared.")

    def set_theme(self, theme: Theme) -> None:  # the display clock
        t = self.tabs
        for view in (t.histogram, t.sweep, t.lockstep.kl, t.lockstep.jaccard):
            view.set_theme(theme)

    def set_text_size(self, points: int, presenting: bool) -> None:  # the display clock
        size = points if presenting else points - 1
        t = self.tabs
        t.histogram.set_font_size(size, presenting)
        for plot in (t.sweep, t.lockstep.kl, t.lockstep.jaccard):
            plot.set_font_size(size)
        for view in (t.sweep, t.variation, t.lockstep):
            view.set_compact(presenting)
