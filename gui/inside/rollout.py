"""The rollout of a step drawn without it (issue 54). The first view of a token after a run
takes the run's keys and values from its decode session (``engine.internals.handoff``), so it
is drawn from one one-token pass; rollout needs the attention rows of every position before the
token too, which only a pass over them gives (0.7 s for 512 tokens of SmolLM2 on 2 cores). That
pass runs afterwards, as its own job while the runner is idle and the attention page shows the
rollout (elsewhere the runner stays free), in passes a click on another token stops before the
model's next block (what was read is kept). The attention page says rollout follows meanwhile.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from engine.internals.pace import LoadWatch
from gui.core.runtime import all_cores
from gui.inside.pages import ROLLOUT

ROLLOUT_JOB = "inside rollout"
FAILED = object()  # the job's answer where no rollout can be read for the step


class Rollouts:
    """Starts and stops the rollout job of the step in view, on ``runner`` (an EngineRunner)."""

    def __init__(
        self, runner: Any, readers: dict[str, Any], load: LoadWatch, view: Any,
        sync: Callable[[], None],
    ) -> None:  # fmt: skip
        self.runner, self.readers, self.load = runner, readers, load
        self.view = view  # the InsideView: read while its attention page shows the rollout
        self.key: Any = None  # the step whose rollout is being read
        self.failed: set[Any] = set()
        view.pages.currentChanged.connect(lambda _i: sync())
        view.attention.view.currentIndexChanged.connect(lambda _i: sync())

    def wanted(self) -> bool:
        """Whether the rollout is in view (else nothing is read: the runner stays free)."""
        page = self.view.attention
        return self.view.pages.currentWidget() is page and page.view.currentData() == ROLLOUT

    @staticmethod
    def pending(inside: Any) -> bool:
        att = getattr(inside, "attention", None)
        return att is not None and att.rollout_pending

    def yield_to(self, key: Any) -> bool:
        """Another step is wanted: the rollout job of this one stops before the model's next
        block (what it read is kept). Whether it was stopped."""
        if self.runner.job_name == ROLLOUT_JOB and self.key != key:
            self.runner.stop()
            return True
        return False

    def make_way(self, after_idle: Callable[[Callable[[], None]], None],
                 then: Callable[[], None]) -> bool:  # fmt: skip
        """Where the rollout job runs, stop it (what it read is kept) and call ``then`` once the
        runner is idle (``after_idle``): a button the user pressed goes first. Whether it did."""
        if self.runner.job_name != ROLLOUT_JOB:
            return False
        self.runner.stop()
        after_idle(then)
        return True

    def start(self, target: Any, inside: Any, deliver: Callable[[Any, Any], None]) -> bool:
        """Read the rollout of ``target``'s step (shown as ``inside``) when the runner is idle;
        ``deliver(target, whole)`` gets the step with it. Whether a job started."""
        reader = self.readers.get(target.kind)
        if (not self.pending(inside) or reader is None or self.runner.busy
                or target.key in self.failed or not self.wanted()):  # fmt: skip
            return False
        load = self.load

        def work(job: Any, bundle: Any) -> Any:
            from engine.errors import InternalsUnavailable

            stopped = job.controls.cancelled.is_set
            try:
                with all_cores(), load.fitting():
                    path = target.path(bundle)
                    if not reader.serves(bundle, path):
                        return FAILED  # another model since: the step is read again
                    reader.read_rows(path.query(target.step), stopped)
                    return reader.inspect(bundle, path, target.step)
            except InternalsUnavailable:  # stopped by a click (goes on later), or failed
                return None if stopped() else FAILED

        def done(whole: Any) -> None:
            if whole is FAILED or self.pending(whole):
                self.failed.add(target.key)
            elif whole is not None:
                deliver(target, whole)

        self.key = target.key
        return bool(self.runner.job(ROLLOUT_JOB, work, done))
