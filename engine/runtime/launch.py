"""What the process does first, before torch loads (issue 57): ``prepare()``, called by main.py's
first lines and, in the packaged build, by its runtime hook (resources/packaging/
rthook_launch.py), which PyInstaller runs before main.py. Imports only the standard library
and ``engine.runtime.load``.

It notes the machine's load at the process's start (``started()``): the adaptive thread count
(``engine.runtime.threads``) reads its first load figure from there, over the seconds torch and
the model take to load, so a process started on a busy machine drops its threads before its
prompt's pass instead of after its first steps have spun. Measured on a 2-core Xeon with one
busy background process, a fresh process's 64 greedy SmolLM2 float32 tokens: 14.9 tok/s with
this (the first 8 tokens in 0.71-0.84 s), 12.5 without (1.43-1.62 s), 15.0 on one thread.

What it leaves: OpenMP's environment. libgomp reads ``OMP_WAIT_POLICY`` and
``GOMP_SPINCOUNT`` once, when torch loads it. Measured side by side on the same machine (2
threads, the adaptive count off; quiet, then one busy process): passive waits cost a quiet
machine 25% (18.8 tok/s against 25.0) and spinning 10,000 times 4%; 30,000 and 100,000 cost
nothing measurable but spared only the steps that spin on a busy machine, which the adaptive
count already cuts to one or two a change of load (a fresh busy process: 15.3 tok/s with
30,000, 14.9 without). How long a spin lasts depends on the CPU's pause instruction, so a
count that costs nothing here may cost a CPU with a shorter pause; the default is kept.
"""

from __future__ import annotations

import time

_STARTED: tuple[float, float, float] | None = None


def prepare() -> None:
    """Note the machine's load now, once per process (``started()``)."""
    global _STARTED
    if _STARTED is None:
        from engine.runtime.load import cpu_seconds

        got = cpu_seconds()
        if got is not None:
            _STARTED = (time.monotonic(), got[0], got[1])


def started() -> tuple[float, float, float] | None:
    """(``time.monotonic()``, the machine's busy CPU seconds, this process's) when ``prepare``
    ran; None where it did not, or the load cannot be read."""
    return _STARTED
