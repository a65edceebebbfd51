"""The GPU decode step is compiled and captured before the first token, off the GUI thread,
with a line for the status bar (``engine.workbench.prepared``); on CPU nothing happens."""

import pytest
import torch

from engine import GenerationSession, SamplerSettings
from engine.records import Progress, RunSummary, Step
from engine.static_step import StaticStepper
from engine.workbench import STOP, live, prepared
from tiny_models import tiny_llama

PROMPT = [5, 17, 33, 90, 41, 7]
GREEDY = SamplerSettings(temperature=0, max_new_tokens=4, min_new_tokens=4)


class Warming:
    """A stepper that needs warming up once (as a StaticStepper on CUDA does); the rest is the
    real stepper's."""

    def __init__(self, inner, works: bool) -> None:
        self.inner, self.works, self.calls = inner, works, []
        self.fallback = None

    def needs_warm_up(self, length: int = 0) -> bool:
        return not self.calls

    def warm_up(self, length: int = 0) -> bool:
        self.calls.append(length)
        if not self.works:
            self.fallback = "capture failed: out of graph memory"
        return self.works

    def __getattr__(self, name):
        return getattr(self.inner, name)


def _session(model):
    return GenerationSession(model, PROMPT, GREEDY, eos_token_ids=[], fast=True)


@pytest.mark.parametrize("works", [True, False])
def test_warm_up_runs_before_the_first_token_with_a_progress_line(works):
    model = tiny_llama()
    want = [s.token_id for s in _session(model).stream()]
    session = _session(model)
    session.stepper = Warming(session.stepper, works)
    records = list(live(session, prepared(session, session.stream())))
    lines = [r.text for r in records if isinstance(r, Progress)]
    assert lines[0].startswith("Preparing the GPU decode step")
    assert records.index(next(r for r in records if isinstance(r, Progress))) == 0
    if works:
        assert len(lines) == 1
    else:
        assert lines[1] == (
            "GPU decode step without CUDA graphs: capture failed: out of graph memory"
        )
    assert session.stepper.calls == [len(PROMPT)]  # captured for the prompt's length
    assert [r.token_id for r in records if isinstance(r, Step)] == want
    # a second stream over the same stepper: nothing left to prepare
    session.settings = GREEDY.with_(max_new_tokens=6)
    again = list(prepared(session, session.stream()))
    assert not any(isinstance(r, Progress) and "GPU" in r.text for r in again)


def test_stop_during_warm_up_ends_the_run_with_its_summary():
    session = _session(tiny_llama())
    session.stepper = Warming(session.stepper, True)
    action = live(session, prepared(session, session.stream()))
    assert isinstance(next(action), Progress)
    rest = [action.send(STOP)] + list(action)
    assert [type(r) for r in rest] == [RunSummary]
    assert rest[0].tokens == 0


def test_cpu_steppers_need_no_warm_up():
    model = tiny_llama()
    session = _session(model)
    records = list(prepared(session, session.stream()))
    assert not any(isinstance(r, Progress) and "GPU" in r.text for r in records)
    static = StaticStepper(model)  # on CPU: no graphs, nothing to prepare
    assert not static.needs_warm_up(len(PROMPT)) and not static.warm_up(len(PROMPT))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_warm_up_captures_once_at_the_capacity_the_prompt_needs():
    model = tiny_llama().to("cuda")
    prompt = [(7 * i) % 90 + 3 for i in range(40)]  # past the first capacity (16)
    session = GenerationSession(model, prompt, GREEDY, eos_token_ids=[], fast=True)
    assert isinstance(session.stepper, StaticStepper)
    stepper = session.stepper = StaticStepper(model, capacity=16)
    assert stepper.needs_warm_up(len(prompt))
    records = list(live(session, prepared(session, session.stream())))
    assert isinstance(records[0], Progress)
    assert len([r for r in records if isinstance(r, Step)]) == 4
    assert stepper.captures == 1 and stepper.cache.capacity == 64
    assert not stepper.needs_warm_up(len(session.ids))
