"""The window's jobs and torch's threads (issue 57): a job starts with no OpenMP pool left on the
GUI thread (engine.runtime.threads.release_pool: while the process holds more of libgomp's
threads than cores, every pool's waits turn from spinning to sleeping and a 2-thread step runs
at one thread's speed), and the window decodes on one core fewer than the machine's."""

from __future__ import annotations


def test_a_job_starting_releases_the_gui_threads_pool(window, monkeypatch):
    from gui.shell import jobs

    released: list[bool] = []
    monkeypatch.setattr(jobs, "release_pool", lambda: released.append(True) or True)
    window.runner.busy_changed.emit(True)
    assert released == [True]
    window.runner.busy_changed.emit(False)
    assert released == [True]  # not when it ends


def test_the_window_leaves_the_gui_thread_a_core(monkeypatch):
    from engine.runtime import load
    from gui.core import runtime

    monkeypatch.setattr(load, "usable_cores", lambda: 4)
    assert runtime.window_threads() == 3
    monkeypatch.setattr(load, "usable_cores", lambda: 1)
    assert runtime.window_threads() == 1
