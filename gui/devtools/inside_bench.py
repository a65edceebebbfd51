"""The Inside tab at the pace of a click (issue 54), for ``main.py bench --internals``: in the
window (offscreen), a run of 512 tokens, then the time from a click on a token to its step
drawn in the tab (the job, the records and the drawing), for token 1 and token 512, with each
step read from a full pass over the path up to it (before: ``InsideActions.fast`` off) and
from the reader's cache (after), alternated. The first view of token 512 with nothing read yet
is timed too: before, it reads the 512 positions; after, it takes the run's keys and values from
its decode session, and its rollout follows (the attention rows of the positions before it).
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.models.loading import ModelBundle

if TYPE_CHECKING:
    from gui.shell.window import MainWindow

PROMPT = "Once upon a time, a dragon"


def run_inside_bench(
    bundle: ModelBundle, say: Callable[[str], None], n: int = 512, rounds: int = 2
) -> dict[str, Any]:
    from gui.core.runtime import import_engine
    from gui.devtools.harness import isolated_window, wait_for_run
    from gui.shell.app import make_app

    make_app()
    import_engine()
    window = isolated_window(Path(tempfile.mkdtemp()), size=(1280, 720))
    window.runner.workbench.adopt(bundle)
    window.models.adopt(bundle)
    window.prompt.setPlainText(PROMPT)
    settings = window.sampler.settings().with_(
        temperature=0.8, top_k=0, top_p=1.0, seed=11, max_new_tokens=n, min_new_tokens=n
    )
    window.sampler.set_settings(settings)
    started = time.perf_counter()
    wait_for_run(window, window.generate, 900, f"a {n}-token run")
    say(f"I6. the window, a {len(window.store.steps)}-token run (generated in "
        f"{time.perf_counter() - started:.0f} s); load average {os.getloadavg()[0]:.1f} on "
        f"{os.cpu_count()} cores")  # fmt: skip
    # the attention page, whose rollout view follows the first view after a run (on the lens
    # page nothing follows)
    window.inside.view.pages.setCurrentWidget(window.inside.view.attention)
    best: dict[str, dict[str, float]] = {"before": {}, "after": {}}
    for _ in range(rounds):  # before, after, before, after: the machine's load falls on both
        for name, fast in (("before", False), ("after", True)):
            for what, seconds in _clicks(window, fast, n).items():
                best[name][what] = min(best[name].get(what, float("inf")), seconds)
    for what in best["after"]:
        b, a = best["before"][what] * 1e3, best["after"][what] * 1e3
        target = "drawn after the view" if "rollout" in what else "target <= 300 ms"
        say(f"    {what:44} before {b:7.0f} ms   after {a:7.0f} ms   ({b / a:.1f}x; "
            f"{target})")  # fmt: skip
    window.close()
    return {k: {w: s * 1e3 for w, s in v.items()} for k, v in best.items()}


def _clicks(window: MainWindow, fast: bool, n: int) -> dict[str, float]:
    """From nothing read: the first view (the run's last token), then clicks on token 1 and
    token ``n`` (its view taken out of the tab's memory of recent steps, so it is read again:
    from the cache after, from a full pass before)."""
    from gui.devtools.harness import pump_until

    inside = window.inside
    window.tabs.setCurrentIndex(0)  # the Inside tab hidden: it reads nothing (its first view
    pump_until(lambda: not window.runner.busy, 120, "idle")  # is timed from showing it)
    inside.fast = fast
    inside.results.clear()
    inside.readers.clear()
    inside.failed.clear()
    inside.shown = None
    window.views.select(None)
    first = _drawn(window, None, n)
    out = {f"first view of token {n}, nothing read yet": first}
    out["  its rollout (follows the view after a run)"] = first + _rollout_wait(window)
    out["click on token 1"] = _drawn(window, 0, n)
    inside.results.clear()
    out[f"click on token {n}"] = _drawn(window, n - 1, n)
    out[f"click on token {n // 2}"] = _drawn(window, n // 2 - 1, n)
    return out


def _drawn(window: MainWindow, index: int | None, n: int) -> float:
    """Seconds from a click on token ``index + 1`` (None: the tab asking for the last token)
    to its step drawn in the tab."""
    from PySide6.QtWidgets import QApplication

    from gui.devtools.harness import pump_until

    want = n if index is None else index + 1
    start = time.perf_counter()
    if index is None:  # the tab shown after a run: a teacher's first look inside
        window.tabs.setCurrentWidget(window.inside.view)
    else:
        window.pane.select(index)
        window.pane.token_clicked.emit(index)  # what a click sends
    inside = window.inside
    # drawn when shown: its rollout may follow as a job of its own (gui.inside.rollout)
    pump_until(lambda: inside.shown is not None and len(inside.shown[-1]) == want
               and window.runner.job_name != "inside", 120, f"token {want} drawn")  # fmt: skip
    window.inside.view.repaint()  # drawn, not only laid out
    QApplication.processEvents()
    return time.perf_counter() - start


def _rollout_wait(window: MainWindow) -> float:
    """Seconds until the step in view has its rollout (at once where it came with the step)."""
    from gui.devtools.harness import pump_until

    inside, start = window.inside, time.perf_counter()

    def rolled() -> bool:
        shown = inside.results.get(inside.shown)
        att = getattr(shown, "attention", None)
        return shown is not None and (att is None or not att.rollout_pending)

    pump_until(rolled, 120, "the rollout drawn")
    return time.perf_counter() - start
