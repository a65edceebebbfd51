"""The machine's load as the adaptive thread count (``engine.runtime.threads``) reads it, and the
cores this process may use. Standard library only: ``engine.runtime.launch`` reads it before
torch loads."""

from __future__ import annotations

import os


def cpu_seconds() -> tuple[float, float] | None:
    """(CPU seconds the whole machine has been busy, summed over its CPUs, including time a
    hypervisor gave to others; CPU seconds of this process, every thread), both since some
    fixed start; None where the machine's figure cannot be read."""
    ours = os.times()
    mine = ours.user + ours.system
    try:
        with open("/proc/stat", "rb") as f:
            ticks = [int(v) for v in f.readline().split()[1:9]]
        # user nice system idle iowait irq softirq steal
        return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK"), mine
    except (OSError, ValueError, IndexError):
        pass
    try:
        import psutil
    except ImportError:
        return None
    t = psutil.cpu_times()
    idle = t.idle + getattr(t, "iowait", 0.0)
    return sum(t) - idle, mine


def usable_cores() -> int:
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1
