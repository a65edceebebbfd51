"""The run store and the one job loop, on their own (no model), and the behaviours the single
job loop fixed: live settings in a speculative run, no model work on the GUI thread."""

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import load, run
from PySide6.QtCore import SignalInstance
from shiboken6 import Shiboken

from engine.drivers.workbench import STOP, live
from engine.records import (
    SPEC_NGRAM,
    Candidate,
    ChoiceHistory,
    Rewind,
    RunStarted,
    RunSummary,
    Step,
)
from gui.core.store import RunStore
from gui.core.worker import Controls, EngineRunner, drive


def step(i: int, token: int = 7, n: int = 8, step_time: float = 0.01) -> Step:
    cands = tuple(Candidate(token + j, f"t{j}", 0.5 / (j + 1), 0.5 / (j + 1)) for j in range(n))
    return Step(i, token, f"<{i}>", "t", 0.5, 0.5, 1, cands, n, 2.0, 1.0, step_time, 10.0)


def test_store_applies_steps_rewinds_and_a_new_run():
    store = RunStore(keep_full=3)
    store.push(RunStarted("sampling", "p", 2))
    for i in range(5):
        store.push(step(i))
    change = store.drain()
    assert change.reset and change.start == 0 and len(change.added) == 5
    assert [len(s.candidates) for s in store.steps] == [5, 5, 8, 8, 8]  # older ones lightened
    store.push(Rewind(3))
    store.push(step(3, token=9))
    store.push(Rewind(2))  # two rewinds in one drain: the views redraw from the lower one
    store.push(step(2, token=11))
    change = store.drain()
    assert change.truncated and change.start == 2 and not change.reset
    assert [s.token_id for s in change.added] == [11]
    assert [s.token_id for s in store.steps] == [7, 7, 11]
    assert len(store.series["h"]) == 3 and store.text == "<0><1><2>"
    store.push(RunStarted("beam", "q", 1))
    change = store.drain()
    assert change.reset and store.steps == [] and store.method == "beam"


def test_store_autosave_round_trip_keeps_every_candidate(tmp_path):
    import json

    store = RunStore(keep_full=2)
    store.push(RunStarted("sampling", "prompt text", 3, {"temperature": 0.5}))
    store.inbox.extend(step(i, n=20) for i in range(4))
    store.drain()
    text = store.autosave_text({"editor_prompt": "x", "settings": {"temperature": 0.5}})
    other = RunStore()
    change = other.restore(json.loads(text))
    assert change.reset and len(change.added) == 4 and other.restored
    assert other.run.prompt == "prompt text" and other.method == "sampling"
    # the autosave keeps what the store keeps: every candidate of the newest steps
    assert [len(s.candidates) for s in other.steps] == [5, 5, 20, 20]
    with pytest.raises(ValueError):
        RunStore().restore({"format": "something else"})


def test_store_knows_when_a_run_can_continue():
    store = RunStore()
    assert not store.can_continue()
    store.inbox.extend([RunStarted("sampling", "p", 1), step(0), RunSummary(1, 0.1, 10, "eos")])
    store.drain()
    assert not store.can_continue()  # the model ended its answer
    store.inbox.extend([RunSummary(1, 0.1, 10, "max_new_tokens"), ChoiceHistory(True, False)])
    change = store.drain()
    assert store.can_continue() and change.choices.can_undo


class FakeSession:
    def __init__(self):
        self.settings = None
        self.closed = False

    def summary(self):
        return RunSummary(3, 0.1, 30.0, "stopped")


def records(session, n):
    try:
        for i in range(n):
            yield step(i)
    finally:
        session.closed = True


def test_drive_sends_settings_in_and_stop_still_yields_the_summary():
    session = FakeSession()
    controls = Controls()
    got = []

    def sink(record):
        got.append(record)
        if len(got) == 2:
            controls.send("new settings")
        if len(got) == 4:
            controls.cancelled.set()

    drive(live(session, records(session, 100)), sink, controls)
    assert session.settings == "new settings" and session.closed
    assert [type(r).__name__ for r in got] == ["Step"] * 4 + ["RunSummary"]


def test_drive_paces_each_new_token_once(monkeypatch):
    paced = []
    controls = Controls()
    monkeypatch.setattr(controls, "pace", paced.append)

    def action():
        yield RunStarted("beam", "p", 1)
        yield step(0, step_time=0.1)
        yield Rewind(0)
        yield step(0, step_time=0.2)  # shown again after a rewind: not paced again
        yield step(1, step_time=0.3)

    drive(action(), lambda _r: None, controls)
    assert paced == [0.1, 0.3]


def test_stop_is_an_object_sessions_never_receive_as_settings():
    session = FakeSession()
    gen = live(session, records(session, 10))
    next(gen)
    assert isinstance(gen.send(STOP), RunSummary) and session.settings is None


def qt_call(function: object) -> str | None:
    """``Class.method`` when ``function`` is a bound Qt method (a signal's emit included)."""
    owner = getattr(function, "__self__", None)
    if isinstance(owner, (Shiboken.Object, type(Shiboken.Object), SignalInstance)):
        return f"{type(owner).__name__}.{getattr(function, '__name__', '?')}"
    return None


def test_a_job_thread_calls_nothing_in_qt_but_emits(qtbot):
    """PySide emits with the GIL released; any other Qt call from the job's thread holds the GIL
    while it may take a Qt lock the GUI thread holds while it waits for the GIL: a deadlock
    (the next test). Every Qt call the job's thread makes, from its work to its end."""
    runner = EngineRunner(RunStore())
    runner.workbench.bundle = object()  # job() wants a loaded model; this one never reads it
    calls: list[str] = []

    def record(_frame, event, function):
        if event == "c_call" and (name := qt_call(function)):
            calls.append(name)

    def work(job, _bundle):
        sys.setprofile(record)  # this thread only, until the job's end
        job.say("working")
        return "done"

    results, failures = [], []
    runner.failed.connect(failures.append)
    assert runner.job("probe", work, results.append)
    qtbot.waitUntil(lambda: not runner.busy, timeout=10000)
    assert results == ["done"], failures
    assert calls and all(name == "SignalInstance.emit" for name in calls), calls


def test_no_job_starts_after_the_runner_was_shut_down(qtbot):
    """The window's close shuts its runner down; a part's handler of the last job's end (the
    Inside tab's next read) could then start a job whose thread outlived the window."""
    runner = EngineRunner(RunStore())
    runner.workbench.bundle = object()
    ended: list[bool] = []
    runner.busy_changed.connect(lambda busy: busy or ended.append(
        runner.job("after", lambda _j, _b: 1, lambda _r: None)))  # fmt: skip
    assert runner.job("first", lambda _j, _b: 1, lambda _r: None)
    assert runner.shutdown()
    qtbot.wait(50)
    assert ended == [False] and not runner.busy and not runner.thread_running()


def test_a_job_ending_while_the_gui_thread_destroys_objects_never_deadlocks():
    """A full test run once hung for good, CPU idle, pytest-timeout silent: the job's last act,
    moveToThread, took one of Qt's connection locks with the GIL held, while the GUI thread,
    destroying an object under that lock, waited for the GIL. The probe makes that interleaving
    likely (tests/gui/job_end_probe.py: the old job end hung 9 of its 11 runs, a race still;
    the test above is the exact guard), in a child process, so a hang fails the test."""
    probe = Path(__file__).with_name("job_end_probe.py")
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen"}
    try:
        done = subprocess.run(
            [sys.executable, str(probe)], env=env, capture_output=True, text=True, timeout=120
        )
    except subprocess.TimeoutExpired:
        pytest.fail("a job's end deadlocked against the GUI thread (a Qt lock and the GIL)")
    assert done.returncode == 0 and "no deadlock" in done.stdout, done.stdout + done.stderr


# -- with the window -----------------------------------------------------------------------


def set_settings(window, **changes):
    window.sampler.set_settings(window.sampler.settings().with_(**changes))


def test_live_settings_apply_during_a_speculative_run(qtbot, window, tiny_dir):
    load(qtbot, window, tiny_dir)
    window.method.set_current(SPEC_NGRAM)
    set_settings(window, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=80)
    window.sampler.pacing.setValue(40)
    window.prompt.setPlainText("ab ab ab ab ab ab")
    with qtbot.waitSignal(window.run_finished, timeout=30000):
        window.generate()
        qtbot.waitUntil(lambda: (window.drain(), len(window.steps))[1] >= 5, timeout=10000)
        window.sampler.rows["temperature"].field.setValue(0.0)
        changed_at = len(window.steps)
    window.drain()
    steps = window.steps
    assert len(steps) == 80
    assert steps[0].survivors > 100  # temperature 1, no filter: every token could be picked
    # greedy from the next round on (a round in flight finishes with the old settings)
    later = steps[changed_at + 6 :]
    assert later and all(s.survivors == 1 and s.prob == 1.0 for s in later)


@pytest.mark.parametrize("method", ["sampling", "beam", "spec_ngram"])
def test_tokenising_and_session_building_happen_on_the_worker(qtbot, window, tiny_dir, method):
    from engine.decode.base import SessionBase
    from engine.decode.beam import BeamSession
    from engine.models.loading import ModelBundle

    load(qtbot, window, tiny_dir)
    gui_thread = threading.get_ident()
    threads = []
    original_encode, original_init = ModelBundle.encode_prompt, SessionBase.__init__

    def encode(self, *a, **k):
        threads.append(("encode", threading.get_ident()))
        return original_encode(self, *a, **k)

    def init(self, *a, **k):
        threads.append(("session", threading.get_ident()))
        return original_init(self, *a, **k)

    window.method.set_current(method)
    set_settings(window, max_new_tokens=4)
    window.prompt.setPlainText("where does the work run")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ModelBundle, "encode_prompt", encode)
        mp.setattr(SessionBase, "__init__", init)
        run(qtbot, window, window.generate)
    assert {name for name, _ in threads} == {"encode", "session"}
    assert all(ident != gui_thread for _, ident in threads), threads
    assert len(window.steps) == 4 or (method == "beam" and window.store.beam_result)
    assert BeamSession is not None


@pytest.mark.slow
def test_starting_each_method_on_smollm2_never_stalls_the_window(qtbot, window):
    """The first speculative session on SmolLM2 used to be built on the GUI thread (~0.5 s).
    Now every method starts on the worker (tokenising, building the session, the prompt's
    forward pass): the event loop never waits 150 ms from Generate to the first token. What
    remains is the worker holding the GIL for a forward pass (the TorchScript fast path keeps
    it for a whole token): 15-85 ms measured on a quiet 2-core EPYC, the same before and after
    the classroom changes (b4c819a, 76060ea and main measured side by side)."""
    from gui.devtools.harness import Heartbeat

    with qtbot.waitSignal(window.runner.model_loaded, timeout=300000):
        window.load_model("smollm2-135m")
    qtbot.waitUntil(lambda: not window.runner.busy, timeout=10000)
    with qtbot.waitSignal(window.runner.draft_loaded, timeout=300000):
        window.load_draft("smollm2-135m")
    qtbot.waitUntil(lambda: not window.runner.busy, timeout=10000)
    set_settings(window, temperature=0.0, max_new_tokens=3)
    window.prompt.setPlainText("Repeat exactly: the cat sat on the mat, the cat sat on the mat.")
    stalls = {}
    first_step: list[float] = []
    push = window.store.push

    def noting_push(record):  # called on the worker thread
        if isinstance(record, Step) and not first_step:
            first_step.append(time.perf_counter())
        push(record)

    window.store.push = noting_push
    for method in ("sampling", "beam", "spec_ngram", "spec_draft"):
        window.method.set_current(method)
        first_step.clear()
        heartbeat = Heartbeat(interval_ms=5)
        heartbeat.start()
        began = time.perf_counter()
        run(qtbot, window, window.generate)
        gaps = heartbeat.stop()
        assert window.steps and first_step, (method, window.last_error)
        ends = np.cumsum(gaps) + began  # when each gap ended
        until_first = [g for g, end in zip(gaps, ends, strict=True) if end <= first_step[0] + 0.01]
        stalls[method] = max(until_first, default=0.0) * 1000
    print("longest event-loop stall from Generate to the first token (ms):", stalls)
    assert max(stalls.values()) < 150, stalls
