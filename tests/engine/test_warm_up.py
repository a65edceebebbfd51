"""The GPU decode step is compiled and captured before the first token, off the GUI thread,
with a line for the status bar (``engine.drivers.workbench.prepared``); on CPU nothing happens."""

import pytest
import torch
from transformers import ByT5Tokenizer

from engine import GenerationSession, SamplerSettings
from engine.drivers.workbench import STOP, live, prepared
from engine.models.loading import make_bundle
from engine.records import ROW_PLAIN, ROW_PLAIN_FAST, ROW_SPEC_NGRAM, Progress, RunSummary, Step
from engine.step.static_step import StaticStepper
from tiny_models import tiny_llama

PROMPT = [5, 17, 33, 90, 41, 7]
GREEDY = SamplerSettings(temperature=0, max_new_tokens=4, min_new_tokens=4)


class Warming:
    """A stepper that needs warming up once (as a StaticStepper on CUDA does); the rest is the
    real stepper's."""

    def __init__(self, inner, works: bool) -> None:
        self.inner, self.works, self.calls = inner, works, []
        self.fallback, self.capacity = None, 256

    def needs_warm_up(self, length: int = 0) -> bool:
        return not self.calls

    def warm_up(self, length: int = 0) -> bool:
        self.calls.append(length)
        if not self.works:
            self.fallback = "capture failed: out of graph memory"
        return self.works

    def __getattr__(self, name):
        return getattr(self.inner, name)


class Growing(Warming):
    """A stepper whose graph is captured for a cache of ``capacity`` tokens, as a
    StaticStepper's is after its first warm-up: it needs warming up again once the tokens
    outgrow the cache, which then doubles."""

    def __init__(self, inner, capacity: int) -> None:
        super().__init__(inner, True)
        self.capacity, self.captures = capacity, 1

    def needs_warm_up(self, length: int = 0) -> bool:
        return length > self.capacity

    def warm_up(self, length: int = 0) -> bool:
        self.calls.append(length)
        while self.capacity < length + 1:
            self.capacity *= 2
        self.captures += 1
        return True


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
        assert lines[1:] == ["GPU decode step captured for 256 tokens; generating…"]
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


def test_a_run_that_outgrows_the_cache_is_prepared_again_between_tokens():
    model = tiny_llama()
    settings = GREEDY.with_(max_new_tokens=12, min_new_tokens=12)
    want = [s.token_id for s in GenerationSession(model, PROMPT, settings, fast=True).stream()]
    session = GenerationSession(model, PROMPT, settings, eos_token_ids=[], fast=True)
    session.stepper = Growing(session.stepper, capacity=8)
    records = list(live(session, prepared(session, session.stream())))
    # 6 prompt tokens: the 3rd new token makes 9 > 8, the 11th 17 > 16
    assert session.stepper.calls == [9, 17]
    lines = [(i, r.text) for i, r in enumerate(records) if isinstance(r, Progress)]
    assert [text for _, text in lines] == [
        "The run passed 8 tokens: compiling and capturing the GPU decode step for a larger "
        "cache...",
        "GPU decode step captured for 16 tokens; generating…",
        "The run passed 16 tokens: compiling and capturing the GPU decode step for a larger "
        "cache...",
        "GPU decode step captured for 32 tokens; generating…",
    ]
    steps_before = [sum(isinstance(r, Step) for r in records[:i]) for i, _ in lines]
    assert steps_before == [3, 3, 11, 11]  # right after the token that outgrew the cache
    assert [r.token_id for r in records if isinstance(r, Step)] == want
    assert isinstance(records[-1], RunSummary) and records[-1].tokens == 12


class Fed(Growing):
    """A ``Growing`` stepper that notes each feed that reached past the captured cache (what a
    StaticStepper on CUDA would then compile and capture inside that token)."""

    def __init__(self, inner, capacity: int) -> None:
        super().__init__(inner, capacity)
        self.past_capacity: list[tuple[int, int]] = []

    def logits(self, ids, keep=1):
        if len(ids) > self.capacity:
            self.past_capacity.append((len(ids), self.capacity))
        return self.inner.logits(ids, keep)


def test_a_pipelined_run_is_prepared_one_token_ahead():
    """The pipelined session launches token t+1 before token t is read, so its cache must hold
    one token more than today's session's: warmed between tokens, never grown inside one."""
    from engine.decode.pipeline import PipelinedSession

    model = tiny_llama()
    settings = GREEDY.with_(max_new_tokens=12, min_new_tokens=12)
    want = [s.token_id for s in _session(model).stream(12)]
    session = PipelinedSession(model, PROMPT, settings, eos_token_ids=[], fast=True, pipeline=True)
    session.stepper = Fed(session.stepper, capacity=8)
    records = list(live(session, prepared(session, session.stream())))
    assert session.stepper.past_capacity == []
    # warmed for 9 and 17 tokens, as today's session is, but one token earlier: after the
    # 2nd and the 10th new token (today's: the 3rd and the 11th)
    assert session.stepper.calls == [9, 17]
    lines = [i for i, r in enumerate(records) if isinstance(r, Progress)]
    assert [sum(isinstance(r, Step) for r in records[:i]) for i in lines] == [2, 2, 10, 10]
    assert [r.token_id for r in records if isinstance(r, Step)] == want
    assert session.launched_ahead > 0


def test_nothing_is_captured_after_the_token_that_ended_the_run():
    model = tiny_llama()
    settings = GREEDY.with_(max_new_tokens=12, min_new_tokens=0)
    want = [s.token_id for s in GenerationSession(model, PROMPT, settings, fast=True).stream()]
    j = next(i for i, t in enumerate(want) if t not in want[:i])  # a token new at step j
    session = GenerationSession(model, PROMPT, settings, eos_token_ids=[want[j]], fast=True)
    # the cache is full exactly when that token ends the run (as EOS)
    session.stepper = Growing(session.stepper, capacity=len(PROMPT) + j)
    records = list(live(session, prepared(session, session.stream())))
    assert [r.token_id for r in records if isinstance(r, Step)] == want[: j + 1]
    assert session.finished and session.stepper.calls == []
    assert not any(isinstance(r, Progress) for r in records)


def test_nothing_is_captured_after_the_last_token_of_the_runs_budget():
    model = tiny_llama()
    n = 6
    session = _session(model)  # GREEDY: 4 tokens by its settings; this stream asks for 6
    session.stepper = Growing(session.stepper, capacity=len(PROMPT) + n - 1)
    records = list(live(session, prepared(session, session.stream(n))))
    assert sum(isinstance(r, Step) for r in records) == n and not session.finished
    assert session.stepper.calls == [] and not any(isinstance(r, Progress) for r in records)
    # a Continue of that run captures before its first token, not after the last one
    more = list(live(session, prepared(session, session.stream(2))))
    assert session.stepper.calls == [len(PROMPT) + n]
    assert isinstance(more[0], Progress) and isinstance(more[2], Step)


def test_a_draft_model_is_prepared_for_the_tokens_it_drafts_ahead():
    from engine.decode.speculative import ModelDrafter, SpeculativeSession

    spec = SpeculativeSession(
        tiny_llama(0), PROMPT, ModelDrafter(tiny_llama(1)), GREEDY, eos_token_ids=[], gamma=3
    )
    spec.drafter.stepper = Growing(spec.drafter.stepper, capacity=8)
    records = list(live(spec, prepared(spec, spec.stream())))
    assert spec.drafter.stepper.calls[0] == len(PROMPT) + 3  # 9 > 8: before the first round
    assert isinstance(records[0], Progress)


def test_stop_while_preparing_between_tokens_still_ends_with_the_summary():
    session = _session(tiny_llama())
    session.stepper = Growing(session.stepper, capacity=6)
    action = live(session, prepared(session, session.stream()))
    first = [next(action), next(action)]  # the first token, then the line for the larger cache
    assert isinstance(first[0], Step) and isinstance(first[1], Progress)
    rest = [action.send(STOP)] + list(action)
    assert [type(r) for r in rest] == [RunSummary]
    assert rest[0].tokens == 1 and rest[0].stop_reason == "stopped"


def test_a_cache_at_the_models_context_asks_for_nothing_more():
    stepper = StaticStepper(tiny_llama(), max_len=32, capacity=32)
    stepper.graphs = True  # as on CUDA; nothing below runs the step
    assert stepper.needs_warm_up(4)  # no graph yet
    stepper.cache.ensure(20)
    assert stepper.capacity == 32  # the model's whole context
    stepper._graph = (stepper.capacity, None, None)
    assert not stepper.needs_warm_up(32) and not stepper.needs_warm_up(500)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_a_run_past_its_capacity_captures_again_between_tokens():
    model = tiny_llama().to("cuda")
    settings = GREEDY.with_(max_new_tokens=20, min_new_tokens=20)
    want = [
        s.token_id for s in GenerationSession(model, PROMPT, settings, eos_token_ids=[]).stream()
    ]  # model.forward
    session = GenerationSession(model, PROMPT, settings, eos_token_ids=[], fast=True)
    stepper = session.stepper = StaticStepper(model, capacity=16)
    records = list(live(session, prepared(session, session.stream())))
    lines = [r.text for r in records if isinstance(r, Progress)]
    assert lines[0].startswith("Preparing the GPU decode step")
    assert lines[1] == "GPU decode step captured for 16 tokens; generating…"
    assert lines[2].startswith("The run passed 16 tokens")
    assert stepper.captures == 2 and stepper.cache.capacity == 32
    assert [r.token_id for r in records if isinstance(r, Step)] == want


@pytest.fixture
def capture_log(monkeypatch):
    """Every session's stepper needs a capture (as a StaticStepper on CUDA does, capturing
    inside ``logits`` when nobody warmed it up); the log says when captures and clocks ran."""
    from engine.decode.session import GenerationSession as Session
    from engine.decode.speculative import SpeculativeSession

    events: list[str] = []

    class Logged(Warming):
        def warm_up(self, length: int = 0) -> bool:
            events.append(f"warm {length}")
            return super().warm_up(length)

        def logits(self, ids, keep=1):
            if self.needs_warm_up(len(ids)):
                self.warm_up(len(ids))
            return self.inner.logits(ids, keep)

    def wrapped(make):
        def make_stepper(self, *args):
            return Logged(make(self, *args), True)

        return make_stepper

    for cls in (Session, SpeculativeSession):
        monkeypatch.setattr(cls, "_make_stepper", wrapped(cls._make_stepper))

    def log_clocks(module):
        timed = module.timed

        def logged_timed(device, fn):
            events.append("clock starts")
            out = timed(device, fn)
            events.append("clock stops")
            return out

        monkeypatch.setattr(module, "timed", logged_timed)

    return events, log_clocks


def captures_inside_a_clock(events: list[str]) -> list[str]:
    inside, found = False, []
    for event in events:
        inside = event == "clock starts" or (inside and event != "clock stops")
        if inside and event.startswith("warm"):
            found.append(event)
    return found


def test_compare_captures_before_the_clock_starts(capture_log):
    """The comparison's timed runs measure decoding: each session's GPU step is captured
    (sized for the whole run) before its clock starts, never inside it."""
    import engine.drivers.compare as compare

    events, log_clocks = capture_log
    log_clocks(compare)
    bundle = make_bundle(tiny_llama(0), ByT5Tokenizer(), name="tiny")
    rows = [ROW_PLAIN, ROW_PLAIN_FAST, ROW_SPEC_NGRAM]
    results = compare.compare_methods(
        bundle, PROMPT, SamplerSettings(temperature=0), rows, max_new_tokens=10
    )
    assert all(r.identical_to_greedy for r in results) and len(results) == 3
    assert events.count("clock starts") == 3 and not captures_inside_a_clock(events)
    # each warm-up sized for the prompt and the whole run
    assert {e for e in events if e.startswith("warm")} == {f"warm {len(PROMPT) + 10}"}


def test_bench_captures_before_the_clock_starts(capture_log):
    import engine.drivers.bench_families as bench

    events, log_clocks = capture_log
    log_clocks(bench)
    best, tokens = bench.side_by_side(tiny_llama(0), PROMPT, 10)
    assert tokens["ours"] == tokens["hf"] and best["ours"] > 0
    assert events.count("clock starts") == 2 * 4  # warm-up round, then three alternated
    assert not captures_inside_a_clock(events)
    assert events.count(f"warm {len(PROMPT) + 10}") == 3  # each measured session's own


def test_presets_and_the_benchs_rates_capture_before_the_clock(capture_log):
    import engine.drivers.bench as bench
    import engine.drivers.compare as compare

    events, log_clocks = capture_log
    log_clocks(bench)
    log_clocks(compare)
    bundle = make_bundle(tiny_llama(0), ByT5Tokenizer(), name="tiny")
    presets = {"greedy": SamplerSettings(temperature=0), "warm": SamplerSettings(temperature=0.8)}
    results = compare.compare_presets(bundle, PROMPT, presets, max_new_tokens=6, fast=True)
    rate, _ = bench.ours_rate(bundle, PROMPT, 6, fast=True)
    assert len(results) == 2 and rate > 0
    assert events.count("clock starts") == 3 and not captures_inside_a_clock(events)
