"""Every family on the fast path agrees with transformers: token-exact greedy output against
``transformers.generate`` in float32, logits within bfloat16 rounding in bfloat16, through
branching (the cache cropped, not recomputed) and multi-token steps (speculative
verification). Tiny random models built from each family's config (tests/family_models.py)."""

import logging

import pytest
import torch
from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

from engine import GenerationSession, SamplerSettings
from engine.decode.speculative import NGramDrafter, SpeculativeSession
from engine.step.fastpath import FastPathUnsupported, FastStepper, fast_stepper_or_none, supports
from engine.step.stepper import ModelStepper, make_stepper
from family_models import FAMILIES, tiny
from tiny_models import spy_on_init, tiny_t5

PROMPT = [5, 17, 33, 90, 41, 7]
N = 30  # new tokens: past the windows (8) of the sliding-window families


def _generate(model: torch.nn.Module, prompt: list[int], n: int) -> list[int]:
    x = torch.tensor([prompt])
    # an explicit mask: a generated id may equal the pad id, which generate would otherwise mask
    out = model.generate(
        x, attention_mask=torch.ones_like(x), max_new_tokens=n, do_sample=False, eos_token_id=None
    )
    return out[0, len(prompt) :].tolist()


def _session(model: torch.nn.Module, n: int, fast: bool = True) -> GenerationSession:
    s = SamplerSettings(temperature=0, max_new_tokens=n)
    return GenerationSession(model, PROMPT, s, eos_token_ids=[], fast=fast)


@pytest.mark.parametrize("family", FAMILIES)
def test_fp32_greedy_equals_transformers_generate(family):
    model = tiny(family)
    want = _generate(model, PROMPT, N)
    session = _session(model, N)
    assert session.fast and isinstance(session.stepper, FastStepper)
    assert [s.token_id for s in session.stream()] == want


@pytest.mark.parametrize("family", FAMILIES)
def test_logits_equal_the_model_forward_through_prefill_decode_branch_and_multi_token(family):
    model = tiny(family)
    fast, ref = FastStepper(model), ModelStepper(model, use_cache=False)
    long = PROMPT * 4  # 24 positions: longer than the sliding windows
    seqs = [PROMPT, PROMPT + [3], PROMPT + [3, 9, 11], PROMPT + [4], PROMPT[:3] + [8, 8], long,
            long + [1], long[:20] + [2, 3, 4, 5]]  # fmt: skip
    for seq in seqs:  # each one extends, branches from or rewinds the previous
        keep = min(4, len(seq))  # several rows at once, as speculative verification asks
        torch.testing.assert_close(
            fast.logits(seq, keep=keep), ref.logits(seq, keep=keep), atol=1e-4, rtol=1e-4
        )
    assert fast.cache.ids == seqs[-1]


@pytest.mark.parametrize("family", FAMILIES)
def test_branching_on_the_fast_path_matches_generate_from_the_branch(family):
    model = tiny(family)
    session = _session(model, 12)
    list(session.stream())
    passes = session.stepper.forward_passes
    session.branch(5, 42)  # cache cropped to prompt + 5 tokens, then one token fed
    list(session.stream(14))
    branched = session.generated_ids
    assert branched[5] == 42
    assert branched[6:] == _generate(model, PROMPT + branched[:6], len(branched) - 6)
    assert session.stepper.forward_passes - passes == 14  # nothing recomputed


@pytest.mark.parametrize("family", ["mistral", "qwen2-sliding", "gemma2", "gemma3"])
def test_model_forward_branches_back_past_a_full_sliding_window(family):
    """transformers' sliding-window cache layers keep only the last window and refuse to
    crop back once it is full; on model.forward a branch there starts the cache again (one
    full pass) and still equals generate from the branch."""
    model = tiny(family)
    session = _session(model, 20, fast=False)
    assert isinstance(session.stepper, ModelStepper)
    list(session.stream())  # 26 positions: past the windows of 8
    passes = session.stepper.forward_passes
    session.branch(3, 42)
    list(session.stream(10))
    branched = session.generated_ids
    assert branched[3] == 42
    assert branched[4:] == _generate(model, PROMPT + branched[:4], len(branched) - 4)
    assert session.stepper.forward_passes - passes == 10  # the branch's pass fed every id
    # cropping before the window is full keeps the cache (no full pass)
    short = _session(model, 1, fast=False)
    list(short.stream())  # the cache holds the prompt: 6 positions, window 8
    assert short.stepper.cache.reusable(PROMPT[:5] + [99]) == 5


@pytest.mark.parametrize("family", FAMILIES)
def test_speculative_verification_on_the_fast_path_equals_plain_greedy(family):
    model = tiny(family)
    prompt = PROMPT * 3
    spec = SpeculativeSession(
        model, prompt, NGramDrafter(), SamplerSettings(temperature=0), eos_token_ids=[], fast=True
    )
    assert isinstance(spec.stepper, FastStepper)
    assert spec.run(N) == _generate(model, prompt, N)


@pytest.mark.parametrize("family", FAMILIES)
def test_bf16_logits_agree_within_bf16_rounding(family):
    """bfloat16: the fast path and transformers round differently (fused matrices, oneDNN's
    blocked kernels, float32 rotary tables), so logits are compared within a tolerance
    relative to their spread, and the greedy choice where transformers' top two are apart."""
    model = tiny(family).to(torch.bfloat16)
    fast, ref = FastStepper(model), ModelStepper(model, use_cache=False)
    seq = list(PROMPT)
    want = _generate(model, PROMPT, 16)
    agree = 0
    for token in want:
        ours, theirs = fast.logits(seq, keep=2), ref.logits(seq, keep=2)
        spread = float(theirs.std())
        assert float((ours - theirs).abs().max()) <= 0.08 * spread + 0.05
        top2 = theirs[-1].topk(2).values
        if float(top2[0] - top2[1]) > 0.1 * spread:
            assert int(ours[-1].argmax()) == int(theirs[-1].argmax())
        agree += int(ours[-1].argmax()) == token
        seq.append(token)
    assert agree >= len(want) - 2  # ties decided by rounding may differ; say so, bounded


def test_sliding_window_changes_the_result_so_the_mask_is_tested():
    model = tiny("mistral")
    with_window = FastStepper(model).logits(PROMPT * 4)
    model.config.sliding_window = None
    without = FastStepper(model).logits(PROMPT * 4)
    assert not torch.allclose(with_window, without, atol=1e-3)


@pytest.mark.parametrize("family", FAMILIES)
def test_seed_api_with_cache_takes_the_fast_path_and_equals_generate(family, monkeypatch):
    from engine.drivers import compat

    model = tiny(family)
    built = spy_on_init(monkeypatch, FastStepper)
    got = compat.autoregressive_generate(
        PROMPT, model, max_gen_len=N, eos_tokens_id=[], use_cache=True
    )
    assert built and got == _generate(model, PROMPT, N)


def _tiny_neox() -> torch.nn.Module:
    torch.manual_seed(0)
    cfg = GPTNeoXConfig(
        vocab_size=384, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, max_position_embeddings=256,
    )  # fmt: skip
    return GPTNeoXForCausalLM(cfg).eval()


@pytest.mark.parametrize("factory", [_tiny_neox, tiny_t5])
def test_an_unknown_family_uses_model_forward_with_one_log_line(factory, caplog):
    model = factory()
    assert supports(model) is not None
    with pytest.raises(FastPathUnsupported):
        FastStepper(model)
    with caplog.at_level(logging.INFO, logger="engine.step.fastpath"):
        assert fast_stepper_or_none(model) is None
    lines = [r.getMessage() for r in caplog.records if r.name == "engine.step.fastpath"]
    assert len(lines) == 1 and "model.forward" in lines[0]
    if not model.config.is_encoder_decoder:
        assert isinstance(make_stepper(model, fast=True), ModelStepper)


def test_runtime_rope_scaling_is_refused():
    model = tiny("llama")
    model.config.rope_parameters = {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 1e4}
    assert "rope" in supports(model)
