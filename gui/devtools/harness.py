"""The self-test's and the benchmarks' harness: a window in a folder of its own, waiting on the
event loop as the app does, and a heartbeat that measures how long the loop was kept busy.
Not used by the app itself."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QEventLoop, QSettings, QTimer

from engine.records import RunSummary
from gui.shell.window import MainWindow


def isolated_window(folder: Path, size: tuple[int, int] = (1600, 900)) -> MainWindow:
    """A shown window whose settings and autosave live in ``folder`` (self-test, benchmark),
    so it neither reads nor changes the user's."""
    folder = Path(folder)
    window = MainWindow(
        QSettings(str(folder / "settings.ini"), QSettings.Format.IniFormat),
        autoload=False,
        autosave_path=folder / "autosave.json",
    )
    window.resize(*size)
    window.show()
    return window


def pump_until(
    cond: Callable[[], bool],
    timeout: float,
    what: str,
    on_tick: Callable[[], None] | None = None,
) -> None:
    """Run the event loop until ``cond()`` holds; TimeoutError after ``timeout`` seconds.

    It waits in a real ``QEventLoop``, as the app does, checking every 10 ms: a loop of
    ``processEvents`` and sleeps would keep the GUI thread busy and take the GIL from the
    worker, and a benchmark would measure that instead of the window."""
    if cond():
        return
    loop = QEventLoop()
    end = time.perf_counter() + timeout
    outcome: list[BaseException | None] = []

    def check() -> None:
        try:
            if on_tick is not None:
                on_tick()
            if cond():
                outcome.append(None)
            elif time.perf_counter() > end:
                outcome.append(TimeoutError(f"timed out waiting for {what}"))
        except Exception as exc:  # noqa: BLE001 - raised below, outside the event loop
            outcome.append(exc)
        if outcome:
            loop.quit()

    timer = QTimer()
    timer.setInterval(10)
    timer.timeout.connect(check)
    timer.start()
    loop.exec()
    timer.stop()
    if outcome and outcome[0] is not None:
        raise outcome[0]


def wait_for_run(
    window: MainWindow,
    start: Callable[[], object],
    timeout: float,
    what: str,
    on_tick: Callable[[], None] | None = None,
) -> RunSummary | None:
    """Start a run with ``start()`` and run the event loop until its records are drawn and
    the worker is idle (or an error was shown); returns its summary, None after an error."""
    finished: list[RunSummary] = []

    def done(summary: RunSummary) -> None:
        finished.append(summary)

    window.run_finished.connect(done)
    try:
        window.last_error = None
        start()
        pump_until(
            lambda: bool(finished and not window.runner.busy) or window.last_error is not None,
            timeout, what, on_tick,
        )  # fmt: skip
    finally:
        window.run_finished.disconnect(done)
    return finished[0] if finished else None


class Heartbeat:
    """A 10 ms timer on the GUI thread; the gaps between its beats show how long the event
    loop was kept busy."""

    def __init__(self, interval_ms: int = 10) -> None:
        self.gaps: list[float] = []
        self._last = time.perf_counter()
        self._timer = QTimer()
        self._timer.setInterval(interval_ms)
        self._timer.timeout.connect(self._beat)

    def _beat(self) -> None:
        now = time.perf_counter()
        self.gaps.append(now - self._last)
        self._last = now

    def start(self) -> None:
        self.gaps.clear()
        self._last = time.perf_counter()
        self._timer.start()

    def stop(self) -> list[float]:
        self._timer.stop()
        return self.gaps
