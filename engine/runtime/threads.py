"""A thread count that follows the machine (issue 57): the one decision of how many of torch's
intra-op threads a decode step runs on, made from the steps' own times and the machine's load.

Why: at batch 1 a step of a small model is ~150 short parallel regions (SmolLM2-135M float32:
121 oneDNN matrix-vector products, 30 SDPA calls, 3 of the lab's vocabulary passes), each ending
in a barrier where the threads wait for each other. When another program takes a core, the OS
parks one of the threads for a scheduler slice while the other waits for it at every barrier;
libgomp's waiting thread spins first (300,000 pauses: about 1 ms here, up to 4), holding the
very core the parked thread needs. Profiled with ``perf record`` (2-core Intel Xeon, KVM;
SmolLM2 float32 on 2 threads, the adaptive count off, one busy process and the other programs
of a shared machine): 83-92% of the process's samples in libgomp's spin loop (``pause``,
compare, branch), 5-11% in oneDNN's matrix-vector kernels; 0.5-0.7 tok/s where one thread makes
4-16. Governed, the same run had no sample in libgomp (77% in the kernels) and made 7.7 tok/s.
With one thread there is no barrier to wait at.

How: ``ThreadGovernor.step(key)`` times one decode step at its thread count ``n``. Each key (a
model) keeps its usual time at each count, the lower envelope of its steps (down at once, up by
at most ``CREEP`` a step, as the context grows). A step ``COLLAPSE`` times its usual time, or
``STRIKES`` steps in a row ``SLOW`` times it, drop to fewer threads: as many as the cores other
programs left free (the machine's CPU time less this process's, read every ``WINDOW_S``), at
most ``n - 1``; so do ``CROWDED`` load readings in a row that leave fewer free cores than
threads (a machine busy from the first step, whose usual time is a busy one's). A run's
prompt pass (``prime``) and a step after a pause read the load over the time since the last
reading, from the process's start for the first (``engine.runtime.launch``); a reading over
``STALE_S`` or more counts as ``CROWDED`` readings, so a run begun on a busy machine drops
before its prompt's pass. The count comes back when the machine's load has left room for more
threads for ``quiet_s`` (1 s, doubled after each return that failed within ``STAY_S``, up to
16 s); where the load cannot be read, it comes back after ``quiet_s`` on trial, and a slow step
drops it again. What it cannot tell: other programs that would yield their core (a low-priority
job) read as busy as any, so the count stays reduced beside them.
Threads never change a bit of a step's output (tests/engine/test_threads.py checks the bundled
model at 1, 2 and alternating counts): only its speed.

Why not a passive wait: ``engine.runtime.launch``'s head has the figures (a quiet machine
loses 25% with ``OMP_WAIT_POLICY=passive``; a shorter ``GOMP_SPINCOUNT`` spares only the steps
this governor already cuts). So the threads keep libgomp's spin, which is fastest while the
machine is quiet, and this governor takes the second thread away while it is not. What it
cannot spare is the step during which the load begins (one slow step, then the count drops).

libgomp's other trap (``release_pool``): every thread that ran torch's parallel work keeps a
pool of threads, and while the process holds more of them than cores, every pool's waits spin
100 times instead of 300,000 and sleep: a second thread's 2-thread steps then run at one
thread's speed. The window's jobs each run on a thread of their own, so the GUI thread must
keep no pool.

What reads it: the steppers (``engine.step``) wrap each one-token CPU step in ``governed``; the
window's status bar and ``main.py bench`` read ``thread_state()`` (a frozen ``ThreadState``,
safe from any thread). ``DECODING_LAB_ADAPTIVE_THREADS=0`` turns it off.
"""

from __future__ import annotations

import ctypes
import math
import os
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

from engine.runtime.load import cpu_seconds, usable_cores

SWITCH = "DECODING_LAB_ADAPTIVE_THREADS"
SLOW = 2.0  # a step this many times its usual time is slow ...
STRIKES = 2  # ... and this many slow steps in a row drop a thread
COLLAPSE = 4.0  # one step this slow drops at once
CROWDED = 2  # load readings in a row that leave fewer free cores than threads drop one too
CREEP = 0.002  # a key's usual time may rise this much a step (its context grows)
WINDOW_S = 0.5  # the machine's load is read at most this often
STALE_S = 2.0  # a reading this long (a pause, the process's start) is an average already
QUIET_S = 1.0  # quiet this long before more threads; doubled after a failed return, up to
MAX_QUIET_S = 16.0
STAY_S = 30.0  # a return that holds this long is a success (the wait goes back to QUIET_S)
MARGIN = 0.4  # n threads fit while the cores other programs leave free, plus this, reach n


@dataclass(frozen=True)
class ThreadState:
    """Where the thread count stands: ``threads`` now of the ``ceiling`` the app asked for;
    ``reduced`` while fewer because the machine is busy (``message`` says so in one line, ""
    otherwise); ``reductions`` counts the drops so far; ``others`` is the cores other programs
    used in the last window (None: not read here)."""

    threads: int
    ceiling: int
    reduced: bool = False
    reductions: int = 0
    others: float | None = None
    message: str = ""


def reduced_message(threads: int, ceiling: int) -> str:
    """The status bar's line while the count is reduced."""
    word = "thread" if threads == 1 else "threads"
    return f"Running on {threads} {word} of {ceiling}: the machine is busy"


# ---- the machine's load --------------------------------------------------------------------


def fitting_threads(others: float, cores: int, ceiling: int) -> int:
    """How many threads fit the cores other programs leave free (``others``: the cores they
    use), between 1 and ``ceiling``."""
    return max(1, min(ceiling, math.floor(cores - others + MARGIN)))


# ---- the governor --------------------------------------------------------------------------


class ThreadGovernor:
    """The adaptive thread count (the module's head says how it decides). Everything it reads
    is given: the thread count's getter and setter, a clock and the load (``cpu_seconds``'s
    shape), so the tests drive it with fakes; ``since``, where given, opens the first load
    reading (``(clock, busy, ours)``: the process's start, ``engine.runtime.launch``). One
    stepping thread at a time calls ``step`` and ``prime``; ``state`` may be read from any
    thread."""

    def __init__(
        self,
        get_threads: Callable[[], int],
        set_threads: Callable[[int], None],
        clock: Callable[[], float] = time.monotonic,
        load: Callable[[], tuple[float, float] | None] = cpu_seconds,
        cores: int | None = None,
        enabled: bool = True,
        since: tuple[float, float, float] | None = None,
    ) -> None:
        self._get, self._set_threads, self._clock, self._load = (
            get_threads, set_threads, clock, load,
        )  # fmt: skip
        self.cores = cores or usable_cores()
        self.enabled = enabled
        self._lock = threading.Lock()
        self._usual: weakref.WeakKeyDictionary[Any, dict[int, float]] = weakref.WeakKeyDictionary()
        self._plain_usual: dict[Any, dict[int, float]] = {}  # keys that take no weak reference
        self._set: int | None = None  # the count this governor last set (or adopted)
        self.ceiling = 0
        self._strikes = 0
        self._crowded = 0  # load readings in a row that left fewer cores than threads
        self._quiet_s = QUIET_S
        self._changed_at = -math.inf  # when the count last dropped or rose
        self._raised_at = -math.inf
        self._quiet_since: float | None = None
        self._window = since  # the open load reading's start: (clock, busy, ours)
        self._others: float | None = None
        self._read_since = -math.inf  # the start of the window ``_others`` covers
        self._last_span = 0.0  # and how long that window was
        self._reductions = 0
        self._state = ThreadState(0, 0)

    # -- what callers use ------------------------------------------------------------------

    @contextmanager
    def step(self, key: Any) -> Iterator[None]:
        """Time one decode step of ``key`` (a model: its steps take comparable times) at the
        current count, then decide the next steps' count."""
        if not self.enabled:
            yield
            return
        self._begin(STALE_S)
        n = self._adopt()
        start = self._clock()
        yield
        self.observe(key, n, self._clock() - start)

    def prime(self) -> None:
        """A run begins here (its prompt's pass, before its first step): read the load since
        the last reading (the process's start, or the pause since the last run) where that
        covers at least ``WINDOW_S``, and drop threads before the pass if it left too few free
        cores; then a reading's window starts here."""
        if self.enabled:
            self._begin(WINDOW_S)

    def state(self) -> ThreadState:
        """The current ``ThreadState`` (a snapshot; any thread)."""
        return self._state

    def observe(self, key: Any, n: int, seconds: float) -> None:
        """One step of ``key`` took ``seconds`` at ``n`` threads: learn and decide."""
        with self._lock:
            slow = self._learn(key, n, seconds)
            if n != self._set:  # the count changed under the step: nothing to judge
                return
            now = self._clock()
            self._count_crowded(now, n)
            if n > 1 and (slow == "collapse" or self._crowded >= CROWDED):
                self._drop(n, now)
            elif n > 1 and slow == "slow":
                self._strikes += 1
                if self._strikes >= STRIKES:
                    self._drop(n, now)
            else:
                self._strikes = 0
                if n < self.ceiling:
                    self._maybe_raise(n, now)
                elif now - self._raised_at >= STAY_S:
                    self._quiet_s = QUIET_S
            self._publish()

    # -- the parts -------------------------------------------------------------------------

    def _adopt(self) -> int:
        """The count now; one set by someone else (the app's setting, the window's all-cores
        jobs) becomes the new ceiling and the governor starts afresh from it."""
        n = self._get()
        if n != self._set:
            with self._lock:
                self._set = self.ceiling = n
                self._strikes = self._crowded = 0
                self._quiet_since = None
                self._publish()
        return n

    def _begin(self, span: float) -> None:
        """Before a run's pass or a step: open a load reading's window where none is open; where
        the open one covers ``span`` or more (a run's start, a step after a pause), read the
        load over it and drop threads now if it left too few free cores, so the run's first
        steps (no usual time to look slow against, or one from a quieter minute) do not spin
        on a busy machine."""
        n = self._adopt()
        now = self._clock()
        with self._lock:
            if self._window is None:
                self._read_load(now)  # opens the window
            elif now - self._window[0] >= span:
                self._count_crowded(now, n)
                if n > 1 and self._crowded >= CROWDED:
                    self._drop(n, now)
                    self._publish()

    def _count_crowded(self, now: float, n: int) -> None:
        """Read the load where a reading is due and count it: crowded when the cores other
        programs left free fit fewer than ``n`` threads. A reading over ``STALE_S`` or more (a
        pause, the process's start) counts as ``CROWDED`` readings: it is an average already."""
        if self._read_load(now) and self._others is not None:
            if fitting_threads(self._others, self.cores, self.ceiling) >= n:
                self._crowded = 0
            else:
                long = self._last_span >= STALE_S
                self._crowded += CROWDED if long else 1

    def _usual_times(self, key: Any) -> dict[int, float]:
        try:
            return self._usual.setdefault(key, {})
        except TypeError:  # no weak reference to it: a plain key
            return self._plain_usual.setdefault(key, {})

    def _learn(self, key: Any, n: int, seconds: float) -> str:
        """Fold the step into ``key``'s usual time at ``n`` threads; "collapse", "slow" or ""
        as the step compares with the usual time before it (the first step sets it: "")."""
        usual = self._usual_times(key)
        before = usual.get(n)
        usual[n] = seconds if before is None else min(seconds, before * (1.0 + CREEP))
        if before is None:
            return ""
        if seconds > COLLAPSE * before:
            return "collapse"
        return "slow" if seconds > SLOW * before else ""

    def _read_load(self, now: float) -> bool:
        """The cores other programs used since the last reading, at most every WINDOW_S;
        whether a new figure was read."""
        if self._window is not None and now - self._window[0] < WINDOW_S:
            return False
        got = self._load()
        if got is None:
            self._others = None
            return False
        fresh = self._window is not None
        if fresh:
            t0, busy0, ours0 = self._window
            self._others = max(0.0, (got[0] - busy0) - (got[1] - ours0)) / (now - t0)
            self._read_since, self._last_span = t0, now - t0
        self._window = (now, got[0], got[1])
        return fresh

    def _drop(self, n: int, now: float) -> None:
        target = n - 1
        if self._others is not None:
            target = min(target, fitting_threads(self._others, self.cores, self.ceiling))
        if now - self._raised_at < STAY_S:  # a return that did not hold: wait longer next time
            self._quiet_s = min(MAX_QUIET_S, 2 * self._quiet_s)
        self._apply(max(1, target), now)
        self._reductions += 1

    def _maybe_raise(self, n: int, now: float) -> None:
        if self._others is None:  # the load is unknown here: try one more thread
            if now - self._changed_at >= self._quiet_s:
                self._apply(n + 1, now)
                self._raised_at = now
            return
        room = fitting_threads(self._others, self.cores, self.ceiling)
        if room <= n:
            self._quiet_since = None
            return
        if self._quiet_since is None:  # quiet since the reading's window began
            self._quiet_since = max(self._read_since, self._changed_at)
        if now - self._quiet_since >= self._quiet_s:
            self._apply(room, now)
            self._raised_at = now

    def _apply(self, n: int, now: float) -> None:
        self._set_threads(n)
        self._set = n
        self._strikes = self._crowded = 0
        self._changed_at = now
        self._quiet_since = None

    def _publish(self) -> None:
        n, ceiling = self._set or 0, self.ceiling
        reduced = 0 < n < ceiling
        self._state = ThreadState(
            n, ceiling, reduced, self._reductions, self._others,
            reduced_message(n, ceiling) if reduced else "",
        )  # fmt: skip


# ---- the process's governor ----------------------------------------------------------------

_GOVERNOR: ThreadGovernor | None = None
_MADE = threading.Lock()


def switched_on() -> bool:
    """Whether ``DECODING_LAB_ADAPTIVE_THREADS`` leaves the governor on (it is by default)."""
    return os.environ.get(SWITCH, "1").strip().lower() not in ("0", "false", "no", "off")


def governor() -> ThreadGovernor:
    """The process's governor over torch's intra-op threads (made on first use)."""
    global _GOVERNOR
    if _GOVERNOR is None:
        with _MADE:
            if _GOVERNOR is None:
                import torch

                from engine.runtime.launch import started

                _GOVERNOR = ThreadGovernor(
                    torch.get_num_threads, torch.set_num_threads, enabled=switched_on(),
                    since=started(),
                )  # fmt: skip
    return _GOVERNOR


def governed(key: Any) -> Any:
    """The context a one-token CPU decode step of ``key`` (its model) runs in."""
    return governor().step(key)


def governed_step(key: Any, device: Any, new_positions: int) -> Any:
    """``governed(key)`` for a one-token step on the CPU (the steps that repeat and compare);
    no context for a prompt's pass (it opens the run's first load reading) or another device's
    step."""
    if getattr(device, "type", device) != "cpu":
        return nullcontext()
    if new_positions != 1:
        governor().prime()  # a prompt's pass: the run's first load reading starts here
        return nullcontext()
    return governed(key)


def release_pool() -> bool:
    """Free the OpenMP thread pool of the calling thread, if it has one (libgomp's
    ``omp_pause_resource_all``): a thread that ran torch's parallel work keeps its pool's
    threads, and while the process holds more of libgomp's threads than the machine has cores,
    every thread's waits in every pool spin 100 times instead of 300,000 and then sleep, which
    slows a 2-thread step to about one thread's speed (120 SmolLM2-sized matrix-vector products
    in a second thread: 8.1 ms, 14.7 ms once the main thread had run one parallel product,
    8.2 ms after this). Call it on a thread that will not run the model (the window's GUI
    thread, a benchmark's main thread before other threads decode); whether a pool was freed
    is not known, only whether the call was made. Does not import torch."""
    if "torch" not in sys.modules:
        return False
    try:
        process = ctypes.CDLL(None)
        pause = process.omp_pause_resource_all
    except (AttributeError, OSError):  # no OpenMP runtime in reach here
        return False
    if hasattr(process, "__kmpc_fork_call"):  # LLVM's or Intel's runtime: it pauses them all
        return False
    pause.argtypes, pause.restype = [ctypes.c_int], ctypes.c_int
    return pause(1) == 0  # omp_pause_soft


def thread_state() -> ThreadState:
    """The process's ``ThreadState`` for the status bar and the bench (torch is not imported
    for it: before any step it is ``ThreadState(0, 0)``)."""
    return _GOVERNOR.state() if _GOVERNOR is not None else ThreadState(0, 0)
