"""The only place the engine is driven from Qt.

Each action (load a model, generate, step, branch, ...) runs as one ``Job`` on its own
``QThread`` with the four classic connections. A job never touches a widget: generation jobs
append plain ``Step`` records (and ``Truncate`` markers) to a buffer that the window drains on a
timer. Between tokens a job reads the abort flag and any settings the user changed.
"""

from __future__ import annotations

import gc
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QCoreApplication, QObject, QThread, Signal, Slot

from engine.catalog import open_model
from engine.errors import (
    DrafterMismatchError,
    EmptyPromptError,
    ModelLoadError,
    NonFiniteLogitsError,
)
from engine.models import ModelBundle
from engine.records import BeamEvent, BeamResult, MethodResult, RunSummary, Step
from engine.settings import SamplerSettings

# torch and transformers (~2 s to import here) load in the first job, after the window shows;
# the engine modules that need them are imported where they are used.
if TYPE_CHECKING:
    from engine.generate import GenerationSession
    from engine.speculative import ModelDrafter, NGramDrafter

# Full top-N candidates are kept for this many recent steps; older steps keep their top 5
# (enough for the hover text). This bounds memory on very long runs.
KEEP_CANDIDATES = 2000


@dataclass(frozen=True)
class Truncate:
    """Buffer marker: drop the displayed steps from ``keep`` on (a new run, a branch, undo)."""

    keep: int


@dataclass(frozen=True)
class StatsUpdate:
    """Buffer item: the speculative run's statistics so far (a plain dict)."""

    stats: dict[str, Any]


BufferItem = Step | Truncate | StatsUpdate | BeamEvent


def configure_torch() -> None:
    """Leave one core to the GUI thread: batch-1 decoding is bound by memory bandwidth, so
    torch loses little (measured 23.2 -> 22.7 tok/s on 2 cores) and the window stops competing
    with the model for the CPU. Runs in the first job, where torch is imported."""
    import os

    import torch

    threads = max(1, (os.cpu_count() or 2) - 1)
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


_engine_imported = False


def import_engine() -> None:
    """Import torch and transformers (most of the model's start-up) and exempt their objects
    from Python's cyclic garbage collector. Without that, a full collection walks those
    millions of objects while holding the GIL: pauses of 17-240 ms measured during generation,
    in whichever thread triggered them, and the window froze for as long. Runs once, before
    any model exists: a model is freed only by the collector (it holds reference cycles), so a
    frozen one would never be freed after switching models."""
    global _engine_imported
    configure_torch()
    if _engine_imported:
        return
    import transformers.modeling_utils  # noqa: F401 - the heavy part of transformers

    gc.freeze()  # no collection first: it would cost ~0.2 s of start-up for little garbage
    _engine_imported = True


def friendly_error(exc: BaseException) -> str:
    """One message a user can act on."""
    import torch

    if isinstance(exc, torch.OutOfMemoryError) or "out of memory" in str(exc).lower():
        return (
            "The device ran out of memory. Try fewer new tokens, a smaller model, or the CPU. "
            f"({exc.__class__.__name__})"
        )
    if isinstance(
        exc,
        (ModelLoadError, EmptyPromptError, DrafterMismatchError, NonFiniteLogitsError, ValueError),
    ):
        return str(exc)
    return f"{exc.__class__.__name__}: {exc}"


class Job(QObject):
    """Runs ``fn(job)`` once in a worker thread."""

    progress = Signal(str)
    result_ready = Signal(object)
    failed = Signal(str)
    finished = Signal()

    def __init__(self, fn: Callable[[Job], Any], name: str) -> None:
        super().__init__()
        self.fn = fn
        self.name = name
        self.cancelled = threading.Event()

    @Slot()
    def run(self) -> None:
        try:
            result = self.fn(self)
        except Exception as exc:  # noqa: BLE001 - every failure becomes one message
            self.failed.emit(friendly_error(exc))
        else:
            self.result_ready.emit(result)
        finally:
            # Hand the object back to the GUI thread before finished -> deleteLater, so it is
            # destroyed there. Destroying a Python-backed QObject in the worker thread takes a
            # Qt connection lock and then the GIL, while the GUI thread may hold the GIL and wait
            # for that lock (a deadlock seen in the stop/close/switch stress test).
            app = QCoreApplication.instance()
            if app is not None:
                self.moveToThread(app.thread())
            self.finished.emit()


class EngineRunner(QObject):
    """Owns the loaded model, the generation session and the step buffer; runs one job at a
    time. Lives in the GUI thread; the session is only used by the job that is running."""

    busy_changed = Signal(bool)
    progress = Signal(str)
    model_loaded = Signal(object)  # ModelBundle
    load_failed = Signal(str)
    run_finished = Signal(object)  # RunSummary
    beam_finished = Signal(object)  # BeamResult
    draft_loaded = Signal(object)  # ModelBundle
    compare_finished = Signal(object)  # list[MethodResult]
    failed = Signal(str)

    instances: weakref.WeakSet[EngineRunner] = weakref.WeakSet()  # tests check none is left running

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        EngineRunner.instances.add(self)
        self.bundle: ModelBundle | None = None
        self.session: GenerationSession | None = None
        self.buffer: deque[BufferItem] = deque()
        self.draft: ModelBundle | None = None
        self.prompt_text = ""
        self.top_n = 50
        self.keep_candidates = KEEP_CANDIDATES
        self.fast = True  # the lean Llama-family decode path where the model supports it
        self._job: Job | None = None
        self._thread: QThread | None = None
        self._lock = threading.Lock()
        self._pending: SamplerSettings | None = None
        self._settings = SamplerSettings()
        self._pacing = 0.0  # max tokens per second; 0 = off
        self._undo: list[tuple[int, list[int]]] = []
        self._on_result: Callable[[Any], None] = lambda _r: None
        self._on_fail: Any = self.failed

    # -- state --------------------------------------------------------------------------------

    @property
    def busy(self) -> bool:
        return self._job is not None

    @property
    def job_name(self) -> str | None:
        return self._job.name if self._job else None

    def thread_running(self) -> bool:
        return self._thread is not None and self._thread.isRunning()

    def can_undo(self) -> bool:
        return bool(self._undo)

    # -- thread-safe controls (called from the GUI while a job runs) -----------------------------

    def update_settings(self, settings: SamplerSettings) -> None:
        """Takes effect at the next token of a running generation (or the next run)."""
        with self._lock:
            self._settings = settings
            self._pending = settings

    def set_pacing(self, tokens_per_second: float) -> None:
        self._pacing = max(0.0, float(tokens_per_second))

    def stop(self) -> None:
        if self._job is not None:
            self._job.cancelled.set()

    # -- actions ----------------------------------------------------------------------------------

    def load(self, source: str, device: str = "auto", dtype: str = "auto") -> bool:
        def work(job: Job) -> ModelBundle:
            job.progress.emit("Loading the engine (torch, transformers)")
            import_engine()
            return open_model(source, device=device, dtype=dtype, progress=job.progress.emit)

        def done(bundle: ModelBundle) -> None:
            if self._job is not None and self._job.cancelled.is_set():
                self.progress.emit("Loading cancelled: the previous model stays loaded.")
                return
            self.bundle = bundle
            self.session = None
            self.draft = None  # a draft model must match the new target's tokenizer
            self._undo.clear()
            self.model_loaded.emit(bundle)

        return self._start(Job(work, "load"), done, self.load_failed)

    def generate(
        self, prompt: str, use_chat_template: bool | None = None, limit: int | None = None
    ) -> bool:
        """A fresh run on ``prompt`` with the current settings (``limit`` tokens at most).
        The prompt is tokenised in the worker: a huge paste never freezes the window."""
        if self.bundle is None:
            self.failed.emit("No model is loaded yet.")
            return False
        if not prompt.strip():
            self.failed.emit(str(EmptyPromptError("The prompt is empty: type something first.")))
            return False
        bundle = self.bundle
        with self._lock:
            settings, self._pending = self._settings, None
        self.session = None
        self.prompt_text = prompt
        self._undo.clear()
        self.buffer.append(Truncate(0))

        def start() -> tuple[GenerationSession, Iterator[Step]]:
            from engine.generate import GenerationSession

            ids = bundle.encode_prompt(prompt, use_chat_template)
            session = GenerationSession(
                bundle.model, ids, settings, tokenizer=bundle.tokenizer,
                eos_token_ids=bundle.eos_token_ids, top_n=self.top_n,
                max_context=bundle.context_length, keep_candidates=self.keep_candidates,
                fast=self.fast,
            )  # fmt: skip
            self.session = session
            return session, session.stream(limit)

        return self._start_steps(start, "generate")

    def continue_(self, max_new_tokens: int | None = None) -> bool:
        session = self._need_session()
        if session is None:
            return False
        if session.finished:
            self.failed.emit(
                "The run ended with an end-of-sequence token: branch or Generate again."
            )
            return False
        return self._start_steps(lambda: (session, session.stream(max_new_tokens)), "continue")

    def step_once(self) -> bool:
        session = self._need_session()
        if session is None:
            return False
        if session.finished:
            self.failed.emit("The run has ended; click a token to branch, or Generate again.")
            return False
        return self._start_steps(lambda: (session, session.stream(1)), "step")

    def branch(self, step_index: int, token_id: int, continue_tokens: int | None = None) -> bool:
        """Take ``token_id`` at ``step_index`` and continue from there."""
        session = self._need_session()
        if session is None:
            return False
        old = session.generated_ids[step_index:]
        try:
            session.branch(step_index, token_id)
        except ValueError as exc:
            self.failed.emit(str(exc))
            return False
        self._undo.append((step_index, old))
        self.buffer.append(Truncate(step_index))
        return self._start_steps(lambda: (session, session.stream(continue_tokens)), "branch")

    def undo(self) -> bool:
        session = self._need_session()
        if session is None or not self._undo:
            return False
        step_index, old = self._undo.pop()
        self.buffer.append(Truncate(step_index))
        return self._start_steps(lambda: (session, session.replay(step_index, old)), "undo")

    def load_draft(self, source: str) -> bool:
        """Load a draft model for speculative decoding; it must share the target's tokenizer."""
        target = self.bundle

        def work(job: Job) -> ModelBundle:
            from engine.speculative import check_same_tokenizer

            draft = open_model(source, progress=job.progress.emit)
            if target is not None:
                check_same_tokenizer(target.tokenizer, draft.tokenizer)
            return draft

        def done(draft: ModelBundle) -> None:
            self.draft = draft
            self.draft_loaded.emit(draft)

        return self._start(Job(work, "load draft"), done, self.load_failed)

    def generate_beam(
        self, prompt: str, use_chat_template: bool | None, num_beams: int, max_new_tokens: int,
        no_repeat_ngram_size: int = 0,
    ) -> bool:  # fmt: skip
        """Beam search: each step's candidates go to the buffer as ``BeamEvent`` records."""
        prepared = self._prepare(prompt, use_chat_template)
        if prepared is None:
            return False
        bundle, ids = prepared
        from engine.beam import BeamSearch

        search = BeamSearch(
            bundle.model, ids, num_beams=num_beams, max_new_tokens=max_new_tokens,
            no_repeat_ngram_size=no_repeat_ngram_size, eos_token_ids=bundle.eos_token_ids,
            tokenizer=bundle.tokenizer,
        )  # fmt: skip

        def work(job: Job) -> BeamResult | None:
            events = search.events()
            try:
                for event in events:
                    self.buffer.append(event)
                    if job.cancelled.is_set():
                        return None
            finally:
                events.close()
            return search.result

        def done(result: BeamResult | None) -> None:
            if result is not None:
                self.beam_finished.emit(result)

        self.session = None
        self._undo.clear()
        return self._start(Job(work, "beam search"), done, self.failed)

    def generate_speculative(
        self, prompt: str, use_chat_template: bool | None, use_draft_model: bool, gamma: int
    ) -> bool:
        """Speculative decoding; steps carry source "draft" (accepted) or "target"."""
        prepared = self._prepare(prompt, use_chat_template)
        if prepared is None:
            return False
        bundle, ids = prepared
        from engine.speculative import ModelDrafter, NGramDrafter, SpeculativeSession

        with self._lock:
            settings = self._settings
        if use_draft_model:
            if self.draft is None:
                self.failed.emit("Load a draft model first (Method panel, Draft model: Load…).")
                return False
            enc = ids if self.draft.is_encoder_decoder else None
            drafter: ModelDrafter | NGramDrafter = ModelDrafter(self.draft.model, enc)
        else:
            drafter = NGramDrafter()
        try:
            spec = SpeculativeSession(
                bundle.model, ids, drafter, settings, tokenizer=bundle.tokenizer,
                eos_token_ids=bundle.eos_token_ids, gamma=gamma, top_n=self.top_n,
                seed=settings.seed, max_context=bundle.context_length, fast=self.fast,
            )  # fmt: skip
        except ValueError as exc:
            self.failed.emit(friendly_error(exc))
            return False

        def work(job: Job) -> RunSummary:
            steps = spec.stream(settings.max_new_tokens)
            try:
                for step in steps:
                    self.buffer.append(step)
                    self.buffer.append(StatsUpdate(spec.stats.to_dict()))
                    if job.cancelled.is_set():
                        break
                    self._pace(job, step.step_time)
            finally:
                steps.close()
            st = spec.stats
            reason = spec.stop_reason or "stopped"
            ids = tuple(spec.generated_ids)
            return RunSummary(st.generated, st.seconds, st.tokens_per_s, reason, spec.text, ids)

        self.session = None
        self._undo.clear()
        self.buffer.append(Truncate(0))
        return self._start(Job(work, "speculative"), self.run_finished.emit, self.failed)

    def compare(
        self, prompt: str, use_chat_template: bool | None, max_new_tokens: int, num_beams: int,
        gamma: int,
    ) -> bool:  # fmt: skip
        prepared = self._prepare(prompt, use_chat_template)
        if prepared is None:
            return False
        bundle, ids = prepared
        draft = self.draft
        with self._lock:
            settings = self._settings

        def work(job: Job) -> list[MethodResult]:
            from engine.compare import compare_methods

            return compare_methods(
                bundle, ids, settings, max_new_tokens=max_new_tokens, num_beams=num_beams,
                gamma=gamma, drafter=draft, progress=job.progress.emit,
            )  # fmt: skip

        return self._start(Job(work, "compare"), self.compare_finished.emit, self.failed)

    def _prepare(
        self, prompt: str, use_chat_template: bool | None
    ) -> tuple[ModelBundle, list[int]] | None:
        if self.bundle is None:
            self.failed.emit("No model is loaded yet.")
            return None
        try:
            return self.bundle, self.bundle.encode_prompt(prompt, use_chat_template)
        except ValueError as exc:
            self.failed.emit(friendly_error(exc))
            return None

    def shutdown(self, timeout_ms: int = 60000) -> bool:
        """Stop whatever runs and wait for its thread to end (window closing)."""
        self.stop()
        thread = self._thread
        if thread is not None and thread.isRunning():
            thread.quit()
            return thread.wait(timeout_ms)
        return True

    # -- plumbing ---------------------------------------------------------------------------------

    def _need_session(self) -> GenerationSession | None:
        if self.session is None:
            self.failed.emit("Generate first: there is no run to continue.")
        return self.session

    def _start_steps(
        self, start: Callable[[], tuple[GenerationSession, Iterator[Step]]], name: str
    ) -> bool:
        """Run a stream of steps in a job; settings changed meanwhile apply at the next token."""

        def work(job: Job) -> RunSummary:
            session, steps = start()
            try:
                for step in steps:
                    self.buffer.append(step)
                    if job.cancelled.is_set():
                        break
                    with self._lock:
                        pending, self._pending = self._pending, None
                    if pending is not None:
                        session.settings = pending
                    self._pace(job, step.step_time)
            finally:
                steps.close()  # type: ignore[attr-defined]
            return session.summary()

        def apply_pending() -> None:
            with self._lock:
                pending, self._pending = self._pending, None
            if pending is not None and self.session is not None:
                self.session.settings = pending

        if name != "generate":
            apply_pending()  # settings changed while idle apply to this continuation
        return self._start(Job(work, name), self.run_finished.emit, self.failed)

    def _pace(self, job: Job, spent: float) -> None:
        rate = self._pacing
        if rate <= 0:
            return
        wait = 1.0 / rate - spent
        end = time.perf_counter() + wait
        while wait > 0 and not job.cancelled.is_set():
            time.sleep(min(wait, 0.02))
            wait = end - time.perf_counter()

    def _start(self, job: Job, on_result: Callable[[Any], None], on_fail: Any) -> bool:
        if self._job is not None:
            self.failed.emit(f"Busy ({self._job.name}): press Stop first.")
            return False
        thread = QThread()
        job.moveToThread(thread)
        # The four classic connections.
        thread.started.connect(job.run)
        job.finished.connect(thread.quit)
        job.finished.connect(job.deleteLater)
        thread.finished.connect(thread.deleteLater)
        # Results reach the GUI thread through this object's slots (queued connections).
        job.progress.connect(self.progress)
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
        self._on_result(result)

    @Slot(str)
    def _handle_failure(self, message: str) -> None:
        self._on_fail.emit(message)

    @Slot()
    def _job_done(self) -> None:
        self._job = None
        self._thread = None
        self.busy_changed.emit(False)


def steps_of(items: Sequence[BufferItem]) -> list[Step]:
    return [s for s in items if isinstance(s, Step)]
