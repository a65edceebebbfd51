"""The only place the engine is driven from Qt.

Every action (load a model, generate, step, branch, undo, compare, ...) is one ``Job`` on its
own ``QThread`` with the classic connections, running one ``engine.drivers.workbench`` action.
An action that is a generator is driven between its yields, as superqt's generator worker
does: each record goes to the run store (``Progress`` to the status bar); between records the
job checks for Stop, keeps to the pacing limit, and sends in settings the user changed, for
every method alike. Tokenising and session building happen inside the action, so on this
thread. A job never touches a widget.

The worker thread makes no Qt call but emitting signals (PySide emits with the GIL released).
A Qt call there that takes one of Qt's connection locks (a pool shared by address) while it
holds the GIL deadlocks against the GUI thread, which destroys objects with such a lock held and
then waits for the GIL (PySide looks up a Python ``disconnectNotify``): both threads idle for good,
and pytest-timeout's thread, which needs the GIL too, never fires. So a job is neither destroyed
(``deleteLater``) nor moved (``moveToThread``) in its thread: the GUI thread destroys it once
its thread has finished (``EngineRunner._job_done``).
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable, Generator
from typing import Any

import shiboken6
from PySide6.QtCore import QObject, QThread, Signal, Slot

from engine.drivers.workbench import STOP, RunRequest, Workbench
from engine.models.loading import ModelBundle
from engine.records import Progress, RunStarted, Step
from engine.sampling.settings import SamplerSettings
from gui.core.messages import friendly_error
from gui.core.runtime import import_engine
from gui.core.store import RunStore


class Controls:
    """What the window sends into a running job: Stop, new settings, the pacing limit."""

    def __init__(self) -> None:
        self.cancelled = threading.Event()
        self._lock = threading.Lock()
        self._settings: SamplerSettings | None = None
        self.pacing = 0.0  # max tokens per second; 0 = off

    def send(self, settings: SamplerSettings) -> None:
        with self._lock:
            self._settings = settings

    def take(self) -> SamplerSettings | None:
        with self._lock:
            settings, self._settings = self._settings, None
        return settings

    def pace(self, spent: float) -> None:
        """Wait out the rest of 1 / pacing after a token that took ``spent`` seconds."""
        rate = self.pacing
        if rate <= 0:
            return
        end = time.perf_counter() + 1.0 / rate - spent
        while not self.cancelled.is_set() and (wait := end - time.perf_counter()) > 0:
            time.sleep(min(wait, 0.02))


def drive(action: Generator[Any, Any, Any], sink: Callable[[Any], None], controls: Controls) -> Any:
    """Drive an action to its end: records to ``sink``; between records Stop, pacing (a token
    paces once: steps shown again after a rewind do not) and new settings. Returns the
    action's return value."""
    newest = -1
    stopping = False
    try:
        record = next(action)
        while True:
            sink(record)
            if stopping:
                record = next(action)
                continue
            if isinstance(record, RunStarted):
                newest = -1
            elif isinstance(record, Step) and record.index > newest:
                newest = record.index
                controls.pace(record.step_time)
            if controls.cancelled.is_set():
                stopping = True
                record = action.send(STOP)
            else:
                record = action.send(controls.take())
    except StopIteration as done:
        return done.value
    finally:
        action.close()


class Job(QObject):
    """Runs ``work()`` once in a worker thread; a generator it returns is driven."""

    progress = Signal(str)
    fraction = Signal(float)  # how far a long step has got, 0..1 (a Progress that knows)
    result_ready = Signal(object)
    failed = Signal(str)
    finished = Signal()

    def __init__(
        self, work: Callable[[Job], Any], name: str, sink: Callable[[Any], None], controls: Controls
    ) -> None:
        super().__init__()
        self.work = work
        self.name = name
        self.controls = controls
        self._sink = sink

    def say(self, message: str) -> None:
        self.progress.emit(message)

    def _route(self, record: Any) -> None:
        if isinstance(record, Progress):
            self.progress.emit(record.text)
            if record.fraction is not None:
                self.fraction.emit(record.fraction)
        else:
            self._sink(record)

    @Slot()
    def run(self) -> None:
        try:
            result = self.work(self)
            if isinstance(result, Generator):
                result = drive(result, self._route, self.controls)
        except Exception as exc:  # noqa: BLE001 - every failure becomes one message
            self.failed.emit(friendly_error(exc))
        else:
            self.result_ready.emit(result)
        finally:
            # Nothing but an emit here (see the module docstring): moving the job back to the
            # GUI thread (moveToThread) took a connection lock with the GIL held, and hung a
            # test run for good when the GUI thread was destroying an object under that lock.
            self.finished.emit()


class EngineRunner(QObject):
    """Runs one job at a time over a ``Workbench``; records go to ``store``. Lives in the GUI
    thread; the workbench is only touched by the job that is running."""

    busy_changed = Signal(bool)
    progress = Signal(str)
    fraction = Signal(float)
    model_loaded = Signal(object)  # ModelBundle
    draft_loaded = Signal(object)  # ModelBundle
    load_failed = Signal(str)
    failed = Signal(str)
    job_done = Signal(str)  # the job's name, after it succeeded

    instances: weakref.WeakSet[EngineRunner] = weakref.WeakSet()  # tests check none is left running

    def __init__(self, store: RunStore, parent: QObject | None = None) -> None:
        super().__init__(parent)
        EngineRunner.instances.add(self)
        self.store = store
        self.workbench = Workbench()
        self.controls = Controls()
        self._job: Job | None = None
        self._thread: QThread | None = None
        self._closed = False  # shut down with its window: no job starts after that

    # -- state --------------------------------------------------------------------------------

    @property
    def busy(self) -> bool:
        return self._job is not None

    @property
    def job_name(self) -> str | None:
        return self._job.name if self._job else None

    def thread_running(self) -> bool:
        return self._thread is not None and self._thread.isRunning()

    # -- values sent in while a job runs ------------------------------------------------------

    def send_settings(self, settings: SamplerSettings) -> None:
        """Takes effect at the next token of a running generation, whatever its method."""
        self.controls.send(settings)

    def set_pacing(self, tokens_per_second: float) -> None:
        self.controls.pacing = max(0.0, float(tokens_per_second))

    def stop(self) -> None:
        if self._job is not None:
            self.controls.cancelled.set()

    # -- actions ------------------------------------------------------------------------------

    def load(self, source: str, device: str = "auto", dtype: str = "auto") -> bool:
        def work(job: Job) -> ModelBundle:
            job.say("Loading the engine (torch, transformers)")
            import_engine()
            return self.workbench.load(source, device, dtype, progress=job.say)

        def adopt(bundle: ModelBundle) -> None:
            self.workbench.adopt(bundle)
            self.model_loaded.emit(bundle)

        return self._start(work, "load", adopt, self.load_failed)

    def open_served(
        self, url: str, model: str | None = None, key_source: Any = None, **options: Any
    ) -> bool:
        """A model served elsewhere (``Workbench.open_remote``; ``key_source``: an
        ``engine.serve.remote.KeySource``); it becomes the current model as a loaded one does, and
        failures arrive on ``load_failed`` with the RemoteError's message."""

        def work(job: Job) -> ModelBundle:
            job.say(f"Connecting to {url}")
            import_engine()
            return self.workbench.open_remote(url, model, key_source, **options)

        def adopt(bundle: ModelBundle) -> None:
            self.workbench.adopt(bundle)
            self.model_loaded.emit(bundle)

        return self._start(work, "load", adopt, self.load_failed)

    def load_draft(self, source: str) -> bool:
        """A draft model for speculative decoding; it must share the target's tokenizer."""

        def work(job: Job) -> ModelBundle:
            import_engine()
            return self.workbench.load(source, draft=True, progress=job.say)

        def adopt(bundle: ModelBundle) -> None:
            self.workbench.adopt(bundle, draft=True)
            self.draft_loaded.emit(bundle)

        return self._start(work, "load draft", adopt, self.load_failed)

    def generate(self, request: RunRequest) -> bool:
        """A new run; the prompt is tokenised in the worker, so a huge paste never freezes
        the window."""
        return self._run("generate", lambda: self.workbench.start(request))

    def step(self, request: RunRequest) -> bool:
        """One more token, or a one-token run when there is none yet."""
        return self._run("step", lambda: self.workbench.step(request))

    def resume(self, request: RunRequest, steps: list[Step], limit: int | None = None) -> bool:
        """Go on with a restored run (the autosave's): rebuilds the session, then continues."""
        saved = list(steps)
        return self._run("resume", lambda: self.workbench.resume(request, saved, limit))

    def continue_(self, settings: SamplerSettings, limit: int | None = None) -> bool:
        return self._run("continue", lambda: self.workbench.proceed(settings, limit))

    def branch(
        self, step_index: int, token_id: int, settings: SamplerSettings, limit: int | None
    ) -> bool:
        """Take ``token_id`` at ``step_index`` and continue from there."""
        action = lambda: self.workbench.branch(step_index, token_id, settings, limit)  # noqa: E731
        return self._run("branch", action)

    def resume_branch(self, request: RunRequest, steps: list[Step], step_index: int,
                      token_id: int, limit: int | None) -> bool:  # fmt: skip
        """Take ``token_id`` at ``step_index`` of steps the engine does not hold (a restored
        run, a node of the tree): its session over them first, then the branch."""
        saved = list(steps)
        return self._run("branch", lambda: self.workbench.resume_branch(
            request, saved, step_index, token_id, limit))  # fmt: skip

    def job(
        self, name: str, work: Callable[[Job, ModelBundle], Any], on_result: Callable[[Any], None]
    ) -> bool:
        """A job another module describes (the tree's expansion, scoring a text, an
        experiment): ``work(job, bundle)`` runs on the worker thread with the loaded model
        (never the store; a generator is driven like a run: Stop, progress, records to the
        store); ``on_result`` gets its return value on the GUI thread; failures go to
        ``failed``. The current run is untouched."""
        bundle = self.workbench.bundle
        if bundle is None and not self.busy:
            self.failed.emit("No model is loaded yet.")
            return False
        return self._start(lambda job: work(job, bundle), name, on_result, self.failed)

    def undo(self) -> bool:
        return self._run("undo", self.workbench.undo)

    def redo(self) -> bool:
        return self._run("redo", self.workbench.redo)

    def compare(self, request: RunRequest) -> bool:
        return self._run("compare", lambda: self.workbench.compare(request))

    def forget_run(self) -> None:
        """Drop the current session (the output was cleared): the next Step starts a new run.
        Only while no job runs, so nothing else touches the workbench."""
        if not self.busy:
            self.workbench.session = None

    def shutdown(self, timeout_ms: int = 60000) -> bool:
        """Stop whatever runs and wait for its thread to end (window closing); no job starts
        after this (a part's handler of the last job's end may still ask for one)."""
        self._closed = True
        self.stop()
        thread = self._thread
        if thread is not None and thread.isRunning():
            thread.quit()
            if not thread.wait(timeout_ms):
                return False
        # destroy the job now, on this thread: the queued _job_done may never be delivered if
        # this runner goes first, and the job would then die wherever Python collects it
        self._job_done()
        return True

    # -- plumbing ---------------------------------------------------------------------------

    def _run(self, name: str, action: Callable[[], Generator[Any, Any, Any]]) -> bool:
        if self.workbench.bundle is None and not self.busy:
            self.failed.emit("No model is loaded yet.")
            return False
        return self._start(lambda _job: action(), name, lambda _r: None, self.failed)

    def _start(
        self, work: Callable[[Job], Any], name: str, on_result: Callable[[Any], None], on_fail: Any
    ) -> bool:
        if self._closed:
            return False
        if self._job is not None:
            self.failed.emit(f"Busy ({self._job.name}): press Stop first.")
            return False
        self.controls.cancelled.clear()
        self.controls.take()  # settings sent to an earlier run do not leak into this one
        job = Job(work, name, self.store.push, self.controls)
        thread = QThread()
        job.moveToThread(thread)
        # The classic connections, but for job.finished -> job.deleteLater: that would destroy
        # the job in its own thread; _job_done destroys it on this one (the module docstring).
        thread.started.connect(job.run)
        job.finished.connect(thread.quit)
        thread.finished.connect(thread.deleteLater)
        # Results reach the GUI thread through this object's slots (queued connections).
        job.progress.connect(self.progress)
        job.fraction.connect(self.fraction)
        job.result_ready.connect(self._handle_result)
        job.failed.connect(self._handle_failure)
        thread.finished.connect(self._job_done)
        self._on_result, self._on_fail = on_result, on_fail
        self._job, self._thread = job, thread
        self.busy_changed.emit(True)
        thread.start()
        return True

    @Slot(object)
    def _handle_result(self, result: Any) -> None:
        # Runs on the GUI thread once the job's work has returned: nothing else touches the
        # workbench now, so adopting a loaded model here is safe.
        cancelled = self.controls.cancelled.is_set()
        if self._job is not None and self._job.name.startswith("load") and cancelled:
            self.progress.emit("Loading cancelled: the previous model stays loaded.")
            return
        self._on_result(result)
        if self._job is not None:
            self.job_done.emit(self._job.name)

    @Slot(str)
    def _handle_failure(self, message: str) -> None:
        self._on_fail.emit(message)

    @Slot()
    def _job_done(self) -> None:
        # The job's thread has finished (its event loop is over, it runs no Python): destroy the
        # job here, at once, rather than when its last Python reference goes, which could be a
        # garbage collection on a later job's thread.
        if self._job is None and self._thread is None:
            return  # done already (shutdown came first)
        job, self._job, self._thread = self._job, None, None
        if job is not None and shiboken6.isValid(job):
            shiboken6.delete(job)
        self.busy_changed.emit(False)
