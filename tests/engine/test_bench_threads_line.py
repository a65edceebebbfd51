"""`main.py bench` ends with one line saying whether the adaptive thread count reduced the
threads during the run (issue 57)."""

from __future__ import annotations

from engine.cli import bench
from engine.runtime import threads


def test_the_line_says_whether_threads_were_reduced(monkeypatch):
    monkeypatch.setenv(threads.SWITCH, "1")
    state = {"now": threads.ThreadState(0, 0)}
    monkeypatch.setattr(threads, "thread_state", lambda: state["now"])
    assert "no one-token CPU step" in bench.threads_line()
    state["now"] = threads.ThreadState(2, 2)
    assert bench.threads_line() == "threads: never reduced during this run (2 of 2)"
    state["now"] = threads.ThreadState(1, 2, True, 3, 1.0, threads.reduced_message(1, 2))
    line = bench.threads_line()
    assert line.startswith("threads: reduced 3 time(s)") and "1 of 2 at its end" in line
    monkeypatch.setenv(threads.SWITCH, "0")
    assert "off" in bench.threads_line()


def test_bench_prints_it_after_the_run(monkeypatch, capsys):
    monkeypatch.setattr(bench, "_run", lambda _args: 0)
    monkeypatch.setattr(bench, "threads_line", lambda: "threads: the line")
    assert bench.run(None) == 0  # type: ignore[arg-type]
    assert capsys.readouterr().out.splitlines()[-1] == "threads: the line"
