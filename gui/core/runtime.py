"""Process-wide tuning for the window, in one place. Each setting says what it fixed.

* ``tame_pyside_import_hook``: at import of ``gui`` (before torch is imported).
* ``set_switch_interval``: when the QApplication is made.
* ``all_cores``: around the Inside tab's jobs (a prefill-sized pass the user waits on).
* ``window_threads`` / ``configure_threads``: the window's torch threads (one core fewer).
* ``import_engine``: in the first worker job (torch and transformers load after the window
  shows); it also gives torch its threads and exempts the libraries from the collector.
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

OWN_PACKAGES = ("gui", "engine", "main", "__main__")


def tame_pyside_import_hook() -> None:
    """PySide6 replaces ``__import__`` and, after every import in the process, reads the new
    module's source (``inspect.getsource``) to see whether it mentions PySide6, for its opt-in
    ``from __feature__ import ...`` syntax. Importing torch and transformers after Qt then reads
    thousands of files: 0.7-1.9 s of the model's start-up on the development machine. Nothing
    outside this app opts in, so other modules are answered without reading them. Where PySide
    no longer has this hook, nothing changes."""
    import PySide6.QtCore  # noqa: F401 - installs the hook this function tames

    feature = sys.modules.get("shibokensupport.feature")
    scan = getattr(feature, "_mod_uses_pyside", None)
    if scan is None or getattr(scan, "decoding_lab", False):
        return

    def uses_pyside(module: Any) -> bool:
        return getattr(module, "__name__", "").partition(".")[0] in OWN_PACKAGES and scan(module)

    uses_pyside.decoding_lab = True  # type: ignore[attr-defined]
    feature._mod_uses_pyside = uses_pyside  # type: ignore[union-attr]


def set_switch_interval() -> None:
    """The worker needs the GIL between its small tensor ops; a shorter switch interval stops
    long GUI paints from starving it (Python's default is 5 ms)."""
    sys.setswitchinterval(0.001)


def window_threads() -> int:
    """The torch threads the window's jobs decode on: one core fewer than this process may
    use, so the GUI thread keeps a core to paint on (at least one thread). Measured side by
    side on a 2-core Xeon (``main.py bench --contention``, section 13), the window on every
    core gained nothing: with 2 threads each step waits at its barriers whenever the GUI thread
    (0.17 core at the display clock's 30 Hz, and the GIL) takes a core from one of them, so its
    steps' median was 51-55 ms against the CLI's 42-47, with a tail to 133-277 ms, and the
    window made 13.7-16.2 tok/s on 2 threads against 14.9-16.2 on one; the event loop's longest
    block was 47-144 ms against 25-49; with one busy background process 12.3 tok/s against
    14.2. On one thread there is no barrier for the GUI thread to stall, and on a busy machine
    one thread is what the adaptive thread count (``engine.runtime.threads``) would drop to."""
    from engine.runtime import load

    return max(1, load.usable_cores() - 1)


def configure_threads() -> None:
    """Give torch the window's thread count (``window_threads``): batch-1 decoding is bound by
    memory bandwidth, and the window stops competing with the model for the CPU."""
    import torch

    threads = window_threads()
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


@contextmanager
def all_cores() -> Iterator[None]:
    """Every core for a short job the user waits on with an idle window (reading inside a step:
    a prefill-sized forward pass, which scales with cores where decoding does not), or as many
    as other programs left free at the last load reading (``engine.runtime.threads``: more
    threads than free cores collapse), and none added while that count is reduced; the
    window's thread count again afterwards."""
    import torch

    from engine.runtime.threads import fitting_threads, thread_state, usable_cores

    before, cores, state = torch.get_num_threads(), usable_cores(), thread_state()
    room = cores if state.others is None else fitting_threads(state.others, cores, cores)
    wanted = before if state.reduced else max(before, room)
    torch.set_num_threads(wanted)
    try:
        yield
    finally:
        torch.set_num_threads(before)


_engine_imported = False


def import_engine() -> None:
    """Import torch and transformers (most of the model's start-up) and exempt their objects
    from Python's cyclic garbage collector. Without that, a full collection walks those
    millions of objects while holding the GIL: pauses of 17-240 ms measured during generation,
    in whichever thread triggered them, and the window froze for as long. Runs once, before
    any model exists: a model is freed only by the collector (it holds reference cycles), so a
    frozen one would never be freed after switching models."""
    global _engine_imported
    configure_threads()
    if _engine_imported:
        return
    import transformers.modeling_utils  # noqa: F401 - the heavy part of transformers

    gc.freeze()  # no collection first: it would cost ~0.2 s of start-up for little garbage
    _engine_imported = True
