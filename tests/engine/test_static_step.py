"""The static step (fixed-capacity cache, position as a tensor, attention over the capacity
under a mask) equals the dynamic fast path and transformers token for token; its cache grows;
it falls back with a reason where graphs cannot be captured. CUDA-only tests skip without a
GPU."""

import copy
import logging

import pytest
import torch

from engine import GenerationSession, SamplerSettings
from engine.decode.speculative import NGramDrafter, SpeculativeSession
from engine.step.fastpath import FastStepper
from engine.step.static_step import StaticStepper, static_stepper_or_none
from engine.step.stepper import ModelStepper, make_stepper
from family_models import FAMILIES, tiny

PROMPT = [5, 17, 33, 90, 41, 7]
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _greedy(stepper, prompt, n):
    ids = list(prompt)
    for _ in range(n):
        ids.append(int(stepper.logits(ids).argmax(-1)[-1]))
    return ids[len(prompt) :]


@pytest.mark.parametrize("family", FAMILIES)
def test_static_step_equals_the_dynamic_path_token_for_token(family):
    model = tiny(family)
    static = StaticStepper(model, capacity=16)  # grows twice within 40 tokens
    assert _greedy(static, PROMPT, 34) == _greedy(FastStepper(model), PROMPT, 34)
    assert static.cache.capacity == 64


@pytest.mark.parametrize("family", ["llama", "gemma2", "gpt2"])
def test_masks_hide_cropped_positions_and_the_unfilled_capacity(family):
    """After a crop the old keys stay in the buffer: the mask must hide them, as must the
    never-written rest of the capacity."""
    model = tiny(family)
    static, ref = StaticStepper(model, capacity=64), ModelStepper(model, use_cache=False)
    long = PROMPT * 4
    for seq in (long, long[:10] + [3], long[:10] + [3, 4, 5], PROMPT[:2] + [9], long + [1, 2]):
        keep = min(3, len(seq))
        torch.testing.assert_close(
            static.logits(seq, keep=keep), ref.logits(seq, keep=keep), atol=1e-4, rtol=1e-4
        )
    assert static.cache.capacity == 64  # all of it inside one capacity: masks did the work


def test_capacity_growth_keeps_the_cached_keys():
    model = tiny("qwen3")
    static = StaticStepper(model, capacity=8)
    seq = PROMPT * 2
    first = static.logits(seq)
    assert static.cache.capacity == 16
    grown = static.logits(seq + [3] * 5)  # 17 positions: the buffer doubles, keys copied over
    assert static.cache.capacity == 32
    ref = ModelStepper(model, use_cache=False)
    torch.testing.assert_close(first, ref.logits(seq), atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(grown, ref.logits(seq + [3] * 5), atol=1e-4, rtol=1e-4)
    assert static.forward_passes == 2


def test_capacity_stops_at_the_context_length():
    model = tiny("llama")
    static = StaticStepper(model, capacity=16, max_len=20)
    static.logits(PROMPT * 3)
    assert static.cache.capacity == 20
    with pytest.raises(ValueError, match="context"):
        static.logits(PROMPT * 4)


def test_sessions_and_speculative_run_on_the_static_step():
    # llama: the reference (model.forward with transformers' DynamicCache) cannot crop a
    # sliding-window cache once the window is full, so branching there has no reference
    model = tiny("llama")
    s = SamplerSettings(temperature=0, max_new_tokens=20)
    session = GenerationSession(model, PROMPT, s, eos_token_ids=[], fast=True)
    # make_stepper picks the static step only on CUDA; put one in by hand
    session.stepper = StaticStepper(model, capacity=16)
    ours = [r.token_id for r in session.stream()]
    session.branch(4, 42)
    ours_branch = [r.token_id for r in session.stream(10)]
    ref = GenerationSession(model, PROMPT, s, eos_token_ids=[], fast=False)
    assert ours == [r.token_id for r in ref.stream()]
    ref.branch(4, 42)
    assert ours_branch == [r.token_id for r in ref.stream(10)]
    spec = SpeculativeSession(model, PROMPT * 3, NGramDrafter(), s, eos_token_ids=[], fast=True)
    spec.stepper = StaticStepper(model, capacity=16)
    want = GenerationSession(model, PROMPT * 3, s, eos_token_ids=[], fast=False)
    assert spec.run(20) == [r.token_id for r in want.stream()]


def test_without_cuda_graphs_fall_back_with_one_line(caplog):
    model = tiny("llama")
    with caplog.at_level(logging.INFO, logger="engine.step.static_step"):
        static = StaticStepper(model, graphs=True)
    assert not static.graphs and "CUDA" in static.fallback
    assert [r.name for r in caplog.records].count("engine.step.static_step") == 1
    assert not static.warm_up()
    assert _greedy(static, PROMPT, 5) == _greedy(FastStepper(model), PROMPT, 5)
    # and make_stepper keeps the dynamic fast step for a model on the CPU
    assert static_stepper_or_none(model) is None
    assert isinstance(make_stepper(model, fast=True), FastStepper)


@cuda
@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cuda_graph_replay_equals_the_eager_static_step(family, dtype):
    """fp32: the compiled, captured step equals the eager one. bf16: both round, differently
    (inductor fuses norms and keeps fp32 inside its kernels, eager rounds after every op), so
    each is measured against the same weights in fp32 and the captured step may not be
    further from it than twice the eager step's own bf16 error."""
    model = tiny(family).to("cuda")
    exact = StaticStepper(model, capacity=16, compile=False, graphs=False)
    low = copy.deepcopy(model).to(dtype)
    graphed = StaticStepper(low, capacity=16)
    eager = StaticStepper(low, capacity=16, compile=False, graphs=False)
    assert graphed.graphs and graphed.compile
    ids = list(PROMPT)
    worst: list[tuple[float, float]] = []
    for _ in range(24):  # crosses 16 and 32: captured again at each capacity
        a, b, ref = graphed.logits(ids), eager.logits(ids), exact.logits(ids)
        if dtype == torch.float32:
            torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
        else:
            worst.append(tuple(float((x.float() - ref).abs().max()) for x in (a, b)))
        ids.append(int(ref.argmax(-1)[-1]))
    if worst:
        graphed_err, eager_err = max(w[0] for w in worst), max(w[1] for w in worst)
        assert graphed_err <= 2 * eager_err + 0.02, (graphed_err, eager_err)
    assert graphed.captures == 2 and graphed.fallback is None


@cuda
def test_cuda_session_takes_the_graphed_step_and_equals_generate():
    model = tiny("llama").to("cuda")
    x = torch.tensor([PROMPT], device="cuda")
    want = model.generate(
        x, attention_mask=torch.ones_like(x), max_new_tokens=30, do_sample=False,
        eos_token_id=None,
    )[0, len(PROMPT) :].tolist()  # fmt: skip
    session = GenerationSession(
        model, PROMPT, SamplerSettings(temperature=0, max_new_tokens=30), eos_token_ids=[],
        fast=True,
    )  # fmt: skip
    assert isinstance(session.stepper, StaticStepper)
    assert session.stepper.warm_up()
    assert [r.token_id for r in session.stream()] == want


@pytest.mark.slow
def test_compiled_static_step_on_cpu_equals_the_dynamic_fast_step():
    """torch.compile (fullgraph, the cache updated in place) on CPU: what a GPU compiles
    before capture, checked here where CI has no GPU. Compiling takes ~30 s."""
    model = tiny("gemma3")
    compiled = StaticStepper(model, capacity=32, compile=True, graphs=False)
    ref = FastStepper(model)
    seq = list(PROMPT)
    for _ in range(8):
        got, want = compiled.logits(seq), ref.logits(seq)
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
        seq.append(int(want.argmax(-1)[-1]))
    assert compiled.compile and compiled.fallback is None
