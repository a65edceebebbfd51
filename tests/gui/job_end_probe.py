"""Run as a script (test_store_and_jobs runs it in a child process, which it kills if it hangs):
a job ends while the GUI thread destroys objects that share the job's connection lock, the
interleaving that once hung a whole test run for good. Prints "no deadlock" when every round
ended. Usage: job_end_probe.py [ROUNDS] [OBJECTS].

Qt guards connections with a pool of 131 mutexes picked by an object's address. ~QObject holds
the lock of the object being destroyed while PySide looks up a Python ``disconnectNotify`` on
each of its senders, which needs the GIL. A worker thread that takes the same lock while it
holds the GIL (``Job.run`` called ``moveToThread`` at its end) waits for the GUI thread, which
waits for the GIL: both idle for good. Here the GUI thread destroys OBJECTS objects in the
job's lock, each with Python senders, while the job, its work done, keeps the GIL a while
before each call it makes (as a thread that lost the CPU would). With ``moveToThread`` 9 runs
of 11 hung (still a race: the GUI thread must hold the lock at that very moment); with nothing
but emits at the job's end, none did.
"""

from __future__ import annotations

import ctypes
import sys
import threading
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import shiboken6  # noqa: E402
from PySide6.QtCore import QEventLoop, QObject, QTimer, Signal  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

from gui.core.runtime import set_switch_interval  # noqa: E402
from gui.core.store import RunStore  # noqa: E402
from gui.core.worker import EngineRunner, Job  # noqa: E402

LOCKS = 131  # Qt's pool of connection mutexes (qobject.cpp), picked by address
HOLD_US = 50_000  # how long the job keeps the GIL before each call: the GUI thread waits
SENDERS = 8  # Python senders per object: a long stretch under the lock for the GUI thread
with_gil = ctypes.PyDLL(None)  # a PyDLL call keeps the GIL


class Sender(QObject):
    ping = Signal()


def lock_of(obj: QObject) -> int:
    """Which of the pool's mutexes guards ``obj``: Qt's ``uint(quintptr(o)) % 131``."""
    return (shiboken6.getCppPointer(obj)[0] & 0xFFFFFFFF) % LOCKS


def doomed(lock: int, count: int) -> tuple[QObject, list[QObject]]:
    """A parent of ``count`` children in connection lock ``lock``, each connected from its own
    Python sender, and what was made on the way (kept, so the addresses move on). Parent and
    children let their Python wrappers go: destroying them needs the GIL only under a child's
    lock, for its sender's ``disconnectNotify``."""
    parent, keep, made = QObject(), [], 0
    while made < count:
        child = QObject()
        if lock_of(child) == lock:
            for _ in range(SENDERS):
                sender = Sender()
                sender.ping.connect(child.deleteLater)
                keep.append(sender)
            child.setParent(parent)  # the parent owns it now
            shiboken6.invalidate(child)
            made += 1
        else:
            keep.append(child)
    keep.append(parent)
    return parent, keep


def hold_before_qt_calls(frame: Any, event: str, _arg: Any) -> None:
    """A profile hook for the worker thread once its work is done: before every call
    ``Job.run`` makes from then on, keep the GIL a while, as a preempted thread would. The GUI
    thread meanwhile gets to wait for the GIL under the lock."""
    if event == "c_call" and frame.f_code is Job.run.__code__:
        with_gil.usleep(HOLD_US)


def one_round(runner: EngineRunner, count: int) -> list[Any]:
    began, go = threading.Event(), threading.Event()
    jobs: list[Any] = []

    def work(job: Any, _bundle: Any) -> str:  # the worker thread
        jobs.append(job)
        began.set()
        go.wait(30)
        job.say("now")  # -> parent.deleteLater, and the GUI thread starts destroying
        sys.setprofile(hold_before_qt_calls)  # this thread only
        return "done"

    results: list[Any] = []
    runner.job("probe", work, results.append)
    began.wait(30)
    parent, keep = doomed(lock_of(jobs[0]), count)
    jobs[0].progress.connect(parent.deleteLater)
    shiboken6.invalidate(parent)
    loop = QEventLoop()
    runner.busy_changed.connect(lambda busy: busy or loop.quit())
    QTimer.singleShot(30000, loop.quit)
    go.set()
    loop.exec()
    del keep
    return results


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 1500
    set_switch_interval()  # the app's (make_app's): the GIL changes hands every millisecond
    app = QApplication.instance() or QApplication([])
    runner = EngineRunner(RunStore())
    runner.workbench.bundle = object()  # job() wants a loaded model; these jobs never read it
    for i in range(rounds):
        results = one_round(runner, count)
        assert results == ["done"] and not runner.busy, (i, results)
    runner.shutdown()
    app.processEvents()
    print("no deadlock", flush=True)


if __name__ == "__main__":
    main()
