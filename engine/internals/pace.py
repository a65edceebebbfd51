"""How many of torch's threads a job the user waits on runs on (a clicked step, integrated
gradients): as many as the cores other programs leave free, read from the machine's load as the
window's clock goes by. On a busy machine two threads collapse (``engine.runtime.threads``' head
says why: each parallel region's barrier waits for a thread the OS has parked); measured on
this 2-core machine while other programs kept it busy (load average 5.4), one step of the
Inside view from the reader's cache (SmolLM2, token 512 of a 512-token run) took 0.8-62 s on
two threads and 0.5-4 s on one. The decode governor learns this from repeated one-token steps;
a click is one job, so its count is chosen before it starts, from the last reading."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from engine.runtime.threads import cpu_seconds, fitting_threads, usable_cores

WINDOW_S = 0.4  # readings closer together than this are merged into the next
STALE_S = 5.0  # a reading older than this says nothing about now


class LoadWatch:
    """The cores other programs used lately, from ``read()`` calls (the window's clock calls it
    a few times a second; any thread may then ask ``threads``). ``load`` and ``clock`` are given
    so the tests drive it with fakes."""

    def __init__(
        self,
        load: Callable[[], tuple[float, float] | None] = cpu_seconds,
        clock: Callable[[], float] = time.monotonic,
        cores: int | None = None,
    ) -> None:
        self._load, self._clock = load, clock
        self.cores = cores or usable_cores()
        self._mark: tuple[float, float, float] | None = None  # (clock, busy, ours)
        self.others: float | None = None  # cores other programs used in the last window
        self.read_at = -float("inf")

    def read(self) -> None:
        now = self._clock()
        if self._mark is not None and now - self._mark[0] < WINDOW_S:
            return
        got = self._load()
        if got is None:
            self._mark = None
            return
        if self._mark is not None:
            t0, busy0, ours0 = self._mark
            self.others = max(0.0, (got[0] - busy0) - (got[1] - ours0)) / (now - t0)
            self.read_at = now
        self._mark = (now, got[0], got[1])

    def threads(self, ceiling: int) -> int:
        """The count for a job now: ``ceiling`` where nothing recent says the machine is busy."""
        if self.others is None or self._clock() - self.read_at > STALE_S:
            return ceiling
        return fitting_threads(self.others, self.cores, ceiling)

    @contextmanager
    def fitting(self) -> Iterator[None]:
        """torch's intra-op threads fitted to the machine while the block runs (never more
        than it had); as before afterwards. (torch is imported here: the window makes its
        watch before the engine is loaded.)"""
        import torch

        before = torch.get_num_threads()
        torch.set_num_threads(self.threads(before))
        try:
            yield
        finally:
            torch.set_num_threads(before)
