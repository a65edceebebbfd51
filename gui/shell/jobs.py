"""What the window says about the worker's jobs: the busy bar (filling when a long step knows
how far it got), the status line as a job goes and ends, and what waits for the worker to be
idle. ``JobStatus`` is connected to the runner before any part, so its end-of-job flush comes
first (``gui.shell.window``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, Slot

from engine.runtime.threads import release_pool, thread_state
from engine.validate.served import unknown_ids_notice
from engine.words import count

if TYPE_CHECKING:
    from engine.models.loading import ModelBundle
    from engine.records import RunSummary
    from gui.core.store import RunStore
    from gui.core.worker import EngineRunner
    from gui.run.api import RunView
    from gui.shell.areas import StatusArea

RUN_JOBS = ("generate", "step", "continue", "branch", "resume")
STOP_REASONS = {
    "eos": "the model ended its answer",
    "max_new_tokens": "reached the token limit (Continue for more)",
    "context": "the model's context is full",
    "stopped": "stopped",
    "grammar": "stopped by the grammar",
}


@dataclass
class JobStatusNeeds:
    runner: EngineRunner
    store: RunStore
    views: RunView
    status: StatusArea  # the busy bar and the status line
    compare_view: Any  # gui.run.compare_view.CompareView: the comparison's own progress line
    refresh: Callable[[], None]  # what the worker sent, drawn now
    update_actions: Callable[[], None]
    bundle: Callable[[], ModelBundle | None]
    finished: list[Callable[[str], None]] = field(default_factory=list)  # after every job
    run_finished: list[Callable[[RunSummary], None]] = field(default_factory=list)


class JobStatus(QObject):
    def __init__(self, needs: JobStatusNeeds, parent: QObject) -> None:
        super().__init__(parent)
        self.n = needs
        self._after_idle: list[Callable[[], None]] = []
        r = needs.runner
        r.busy_changed.connect(self.on_busy)
        r.progress.connect(self.on_progress)
        r.fraction.connect(self.on_fraction)
        r.job_done.connect(self.on_job_done)

    def after_idle(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` once the current job has ended (at once when none runs)."""
        if self.n.runner.busy:
            self._after_idle.append(fn)
        else:
            fn()

    def tick(self, _busy: bool) -> None:  # the display clock
        """Say, in one line, when the engine runs on fewer threads because the machine is busy
        (engine.runtime.threads: a step far slower than usual drops threads; quiet brings them
        back)."""
        state = thread_state()
        label = self.n.status.threads
        if label.text() != state.message:
            label.setText(state.message)
            label.setToolTip(
                f"Other programs use about {state.others:.1f} cores; the engine steps on "
                f"{count(state.threads, 'thread')} until the machine is quieter."
                if state.reduced and state.others is not None else ""
            )  # fmt: skip
            label.setVisible(state.reduced)

    @Slot(str)
    def on_progress(self, text: str) -> None:
        self.n.status.text.setText(text)
        if self.n.runner.job_name == "compare":
            self.n.compare_view.set_progress(text)

    @Slot(float)
    def on_fraction(self, fraction: float) -> None:
        """A long step that knows how far it got (reading a long prompt): a filling bar."""
        bar = self.n.status.busy
        bar.setRange(0, 1000)
        bar.setValue(round(1000 * min(1.0, max(0.0, fraction))))

    @Slot(bool)
    def on_busy(self, busy: bool) -> None:
        if busy:  # a job starts: the GUI thread keeps no OpenMP pool to throttle its threads
            release_pool()
        bar = self.n.status.busy
        bar.setRange(0, 0)  # busy, for as long as nothing says how far it got
        bar.setVisible(busy)
        if not busy:
            self.n.refresh()  # always flush, so the last token shows
            self.n.views.redraw(busy=False)  # and every curve has its last point
            queued, self._after_idle = self._after_idle, []
            for fn in queued:
                fn()
        self.n.update_actions()

    @Slot(str)
    def on_job_done(self, name: str) -> None:
        n, say = self.n, self.n.status.text.setText
        n.refresh()
        for follow in n.finished:  # a lesson's guess round waits for its step here
            follow(name)
        summary = n.store.summary
        if name == "resume":
            n.store.restored = False  # the engine holds this run now
        if name in RUN_JOBS and summary is not None:
            why = summary.ending or STOP_REASONS.get(summary.stop_reason, summary.stop_reason)
            notice = unknown_ids_notice(n.bundle())  # served ids the tokenizer lacks
            say(f"Done: {count(summary.tokens, 'token')}; {why}.{notice}")
            for follow_run in n.run_finished:
                follow_run(summary)
        elif name in ("undo", "redo"):
            say(f"{name.capitalize()}: {count(len(n.store.steps), 'token')}.")
        elif name == "compare":
            say(f"Compared {len(n.store.results)} methods.")
            n.compare_view.set_progress(f"Done: {len(n.store.results)} methods compared.")
