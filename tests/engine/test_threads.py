"""The adaptive thread count (engine.runtime.threads), driven by a fake clock and a fake load:
no test here times anything. The bundled model's test checks that the thread count changes no
token and no probability."""

from __future__ import annotations

import dataclasses

import pytest

from engine.runtime import threads
from engine.runtime.threads import (
    COLLAPSE,
    MAX_QUIET_S,
    QUIET_S,
    SLOW,
    ThreadGovernor,
    fitting_threads,
)

USUAL = 0.030  # a step's usual time in these tests, seconds


class Machine:
    """A fake machine: a clock moved by hand, torch's thread count, and the CPU seconds other
    programs and this process have used (None: the load cannot be read)."""

    def __init__(
        self, threads: int = 2, cores: int = 2, readable: bool = True, started: bool = False
    ) -> None:
        self.now = 100.0
        self.threads = threads
        self.others = 0.0  # cores other programs use now
        self.busy = 0.0  # cumulative CPU seconds of the machine ...
        self.ours = 0.0  # ... and of this process
        self.readable = readable
        self.sets: list[int] = []
        self.gov = ThreadGovernor(
            lambda: self.threads, self._set, clock=lambda: self.now, load=self._load,
            cores=cores, since=(self.now, 0.0, 0.0) if started else None,
        )  # fmt: skip

    def _set(self, n: int) -> None:
        self.sets.append(n)
        self.threads = n

    def _load(self) -> tuple[float, float] | None:
        return (self.busy, self.ours) if self.readable else None

    def step(self, seconds: float, key: str = "model") -> None:
        """One decode step that takes ``seconds``, our threads busy and the others as set."""
        with self.gov.step(key):
            self.now += seconds
            self.ours += seconds * self.threads
            self.busy += seconds * (self.threads + self.others)

    def idle(self, seconds: float) -> None:
        """Time passes between steps (the others still busy)."""
        self.now += seconds
        self.busy += seconds * self.others

    def steps(self, n: int, seconds: float) -> None:
        for _ in range(n):
            self.step(seconds)


def test_quiet_steps_never_touch_the_count():
    m = Machine()
    m.steps(200, USUAL)
    m.steps(50, USUAL * 1.5)  # a little slower (a longer context): not slow
    assert m.sets == []
    state = m.gov.state()
    assert (state.threads, state.ceiling, state.reduced, state.message) == (2, 2, False, "")


def test_one_collapsed_step_drops_a_thread_at_once():
    m = Machine()
    m.steps(10, USUAL)
    m.others = 1.0
    m.step(USUAL * (COLLAPSE + 1))
    assert m.sets == [1]
    state = m.gov.state()
    assert state.reduced and state.threads == 1 and state.ceiling == 2
    assert state.reductions == 1
    assert state.message == "Running on 1 thread of 2: the machine is busy"


def test_slow_steps_drop_only_in_a_row():
    m = Machine()
    m.steps(10, USUAL)
    slow = USUAL * (SLOW + 0.5)
    for _ in range(5):  # slow, fine, slow, fine ...: a noisy machine, not a busy one
        m.step(slow)
        m.step(USUAL)
    assert m.sets == []
    m.step(slow)
    m.step(slow)
    assert m.sets == [1]


def test_the_first_step_of_a_model_sets_its_usual_time_and_models_keep_their_own():
    m = Machine()
    m.step(USUAL * 10)  # the first: nothing to compare with
    m.step(USUAL * 10)
    assert m.sets == []
    with m.gov.step("small"):
        m.now += USUAL
    with m.gov.step("small"):
        m.now += USUAL
    m.step(USUAL * 10)  # the big model's steps are not judged by the small one's
    assert m.sets == []


def test_stays_reduced_while_busy_and_comes_back_when_quiet():
    m = Machine()
    m.steps(10, USUAL)
    m.others = 1.0
    m.step(USUAL * 20)
    assert m.threads == 1
    m.steps(300, USUAL * 1.4)  # 12 s of a busy machine at one thread
    assert m.sets == [1]
    assert m.gov.state().others == pytest.approx(1.0, abs=0.05)
    m.others = 0.0
    m.steps(int(QUIET_S / (USUAL * 1.4)) + 2 * int(0.5 / USUAL) + 2, USUAL * 1.4)
    assert m.sets == [1, 2]
    assert not m.gov.state().reduced and m.gov.state().message == ""


def test_a_return_that_fails_waits_twice_as_long_next_time():
    m = Machine()
    m.steps(10, USUAL)
    m.others = 0.3  # a light program: two threads still fit ...
    assert fitting_threads(0.3, 2, 2) == 2
    m.step(USUAL * 20)  # ... but the steps collapse all the same (a throttled VM, say)
    assert m.sets == [1]

    def rise_after() -> float:
        start = m.now
        while m.threads == 1:
            m.step(USUAL)
        return m.now - start

    waited = [rise_after()]
    for _ in range(6):
        m.step(USUAL * 20)  # it fails again at once
        waited.append(rise_after())
    # 1 s, then doubling, up to MAX_QUIET_S (each within two load readings' windows)
    want = [min(MAX_QUIET_S, QUIET_S * 2**i) for i in range(len(waited))]
    assert waited == pytest.approx(want, abs=1.1)


def test_a_machine_busy_from_the_first_step_drops_on_its_load_readings():
    m = Machine()
    m.others = 1.0  # busy from the start: the usual time is a busy one's, no step is slow
    m.step(USUAL)
    m.idle(0.6)
    m.step(USUAL)  # the first reading of the load: crowded once
    assert m.sets == []
    m.idle(0.6)
    m.step(USUAL)  # twice in a row
    assert m.sets == [1] and m.gov.state().reduced


def test_collapsed_steps_from_the_first_drop_after_two():
    """A run that starts on a busy machine: its steps are slow from the first, so none looks
    slow; the load is read from the first step's start, and the second step drops."""
    m = Machine()
    m.others = 1.0
    m.step(0.6)
    assert m.sets == []
    m.step(0.6)
    assert m.sets == [1]


def test_a_process_started_on_a_busy_machine_drops_before_its_prompt():
    """The load read from the process's start (engine.runtime.launch) to its first prompt's
    pass: seconds of a busy machine count at once, and the pass runs on fewer threads."""
    m = Machine(started=True)
    m.others = 1.0
    m.idle(3.0)  # importing torch, loading the model
    m.gov.prime()
    assert m.sets == [1] and m.gov.state().reduced


def test_a_quiet_start_keeps_its_threads():
    m = Machine(started=True)
    m.others = 0.1
    m.idle(3.0)
    m.gov.prime()
    m.steps(20, USUAL)
    assert m.sets == []


def test_a_short_busy_start_waits_for_a_second_reading():
    """Less than STALE_S from the start: one reading, not an average; a second decides."""
    m = Machine(started=True)
    m.others = 1.0
    m.idle(0.6)
    m.gov.prime()
    assert m.sets == []
    m.step(USUAL)
    m.idle(0.6)
    m.step(USUAL)
    assert m.sets == [1]


def test_a_step_after_a_busy_pause_runs_on_fewer_threads():
    """A run continued after a pause in which another program took a core: the step that
    begins it is already on fewer threads (it would spin otherwise)."""
    m = Machine()
    m.steps(20, USUAL)
    m.others = 1.0
    m.idle(5.0)
    with m.gov.step("model"):
        assert m.threads == 1
    assert m.sets == [1]


def test_two_busy_programs_keep_one_thread():
    m = Machine()
    m.steps(10, USUAL)
    m.others = 1.33  # two busy programs sharing 2 cores with our one thread
    m.step(USUAL * 30)
    m.steps(500, USUAL * 2)
    assert m.sets == [1]


def test_many_cores_drop_to_what_the_others_leave():
    m = Machine(threads=8, cores=8)
    m.steps(30, USUAL)  # a load reading once every 0.5 s
    m.others = 2.5
    m.idle(0.6)
    m.step(USUAL)  # the load read over a window half quiet, half busy
    m.idle(0.6)
    m.steps(3, USUAL * (SLOW + 1))  # slow: the second drops, the busy load read
    assert m.sets == [min(7, fitting_threads(2.5, 8, 8))] == [5]


def test_without_a_load_reading_it_returns_on_trial():
    m = Machine(readable=False)
    m.steps(10, USUAL)
    m.step(USUAL * 20)
    assert m.sets == [1]
    assert m.gov.state().others is None
    while m.threads == 1:
        m.step(USUAL * 1.4)
    assert m.sets == [1, 2]  # tried after QUIET_S ...
    m.step(USUAL * 20)  # ... and still busy: back to one
    assert m.sets == [1, 2, 1]


def test_a_count_set_by_someone_else_is_the_new_ceiling():
    m = Machine(threads=1)
    m.steps(10, USUAL)
    assert m.gov.state().ceiling == 1 and not m.gov.state().reduced
    m.step(USUAL * 20)  # one thread cannot drop
    assert m.sets == []
    m.threads = 2  # the window's all-cores job
    m.steps(3, USUAL / 2)
    assert m.gov.state().ceiling == 2
    m.step(USUAL * 20)
    assert m.sets == [1]
    m.threads = 2  # the app sets it again: not a reduction any more
    m.step(USUAL)
    assert not m.gov.state().reduced and m.gov.state().ceiling == 2


def test_switched_off_it_only_runs_the_step(monkeypatch):
    m = Machine()
    m.gov.enabled = False
    m.steps(5, USUAL)
    m.steps(5, USUAL * 50)
    assert m.sets == [] and m.gov.state().threads == 0
    monkeypatch.setenv(threads.SWITCH, "0")
    assert not threads.switched_on()
    monkeypatch.setenv(threads.SWITCH, "1")
    assert threads.switched_on()


def test_the_state_is_frozen_and_needs_no_torch():
    state = threads.ThreadState(1, 2, True, 1, 0.9, threads.reduced_message(1, 2))
    with pytest.raises(dataclasses.FrozenInstanceError):
        state.threads = 2  # type: ignore[misc]
    assert threads.reduced_message(3, 4) == "Running on 3 threads of 4: the machine is busy"


def test_cpu_seconds_reads_this_machine():
    got = threads.cpu_seconds()
    assert got is None or (got[0] >= 0 and got[1] >= 0)


def test_steppers_govern_only_one_token_cpu_steps():
    import contextlib

    assert isinstance(threads.governed_step("m", "cuda", 1), contextlib.nullcontext)
    assert isinstance(threads.governed_step("m", "cpu", 7), contextlib.nullcontext)
    assert not isinstance(threads.governed_step("m", "cpu", 1), contextlib.nullcontext)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int4"])
def test_the_thread_count_changes_no_token_and_no_probability(dtype, monkeypatch):
    """The bundled SmolLM2, greedy with its top-20: steps at 1 thread, at 2, and flipping
    between them every step (as the governor may) give the same records, bit for bit."""
    import torch

    from engine import GenerationSession, SamplerSettings
    from engine.models.catalog import open_model

    bundle = open_model("smollm2-135m", device="cpu", dtype=dtype, progress=lambda _m: None)
    ids = bundle.encode_prompt("Write a short poem about the sea.")
    settings = SamplerSettings(temperature=0, max_new_tokens=24, min_new_tokens=24)
    before = torch.get_num_threads()
    flips = {"n": 0}

    def run(pick) -> list[tuple]:
        session = GenerationSession(
            bundle.model, ids, settings, eos_token_ids=bundle.eos_token_ids, top_n=20, fast=True
        )
        out = []
        for step in session.stream():
            torch.set_num_threads(pick())
            top = tuple((c.token_id, c.raw_prob, c.prob) for c in step.candidates)
            out.append((step.token_id, step.raw_prob, step.prob, step.entropy_raw, top))
        return out

    def flip() -> int:
        flips["n"] += 1
        return 1 + flips["n"] % 2

    monkeypatch.setenv(threads.SWITCH, "0")  # this test sets the count itself
    monkeypatch.setattr(threads, "_GOVERNOR", None)
    try:
        torch.set_num_threads(2)
        two = run(lambda: 2)
        torch.set_num_threads(1)
        one = run(lambda: 1)
        flipping = run(flip)
    finally:
        torch.set_num_threads(before)
    assert one == two
    assert flipping == two
