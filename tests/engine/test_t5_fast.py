"""The T5 decoder step agrees with transformers: token-exact greedy output against
``transformers.generate`` in float32, logits within float rounding of ``model.forward``
through prefill, decode, branching, rewinding and multi-token steps, bfloat16 within its
rounding, and the bundled tiny T5. Tiny random models built here from t5 v1.0 (relu, scaled
tied head) and t5 v1.1 / flan-t5 (gated-gelu, unscaled head) configs, and mt5. The position
bias is bucketed with a short max distance so that the runs go past it."""

import logging

import pytest
import torch
from transformers import (
    MT5Config,
    MT5ForConditionalGeneration,
    T5Config,
    T5ForConditionalGeneration,
)

from engine import GenerationSession, SamplerSettings
from engine.step.fast_t5 import T5FastStepper, supports_t5
from engine.step.stepper import ModelStepper, make_stepper
from tiny_models import spy_on_init, tiny_bart

ENC = [5, 17, 33, 90, 41, 7, 12, 250, 3, 64]
N = 30

KINDS = {
    "t5-relu-tied": dict(feed_forward_proj="relu", tie_word_embeddings=True),
    "flan-gated-gelu-untied": dict(feed_forward_proj="gated-gelu", tie_word_embeddings=False),
    "gated-silu-tied": dict(feed_forward_proj="gated-silu", tie_word_embeddings=True),
}


def tiny(kind: str, seed: int = 0, init: float = 8.0) -> torch.nn.Module:
    """A tiny random T5; ``init`` widens the weights so greedy output varies."""
    torch.manual_seed(seed)
    common = dict(
        vocab_size=384, d_model=32, d_kv=8, d_ff=64, num_layers=3,
        num_heads=4, relative_attention_num_buckets=8, relative_attention_max_distance=12,
        decoder_start_token_id=0, eos_token_id=1, pad_token_id=0, initializer_factor=init,
    )  # fmt: skip
    if kind == "mt5":
        model = MT5ForConditionalGeneration(MT5Config(**common, feed_forward_proj="gated-gelu"))
    else:
        model = T5ForConditionalGeneration(T5Config(**common, **KINDS[kind]))
    model.generation_config.eos_token_id = None  # run the full length
    return model.eval()


ALL = [*KINDS, "mt5"]


def _generate(model: torch.nn.Module, n: int, decoder: list[int] | None = None) -> list[int]:
    """transformers' greedy decoder ids after the given decoder prefix (default: the start)."""
    enc = torch.tensor([ENC])
    kwargs = {} if decoder is None else {"decoder_input_ids": torch.tensor([decoder])}
    out = model.generate(
        input_ids=enc, attention_mask=torch.ones_like(enc), max_new_tokens=n, do_sample=False,
        **kwargs,
    )  # fmt: skip
    got = out[0, 1 if decoder is None else len(decoder) :].tolist()
    assert len(got) == n  # no early stop: the comparison covers every token
    return got


def _session(model: torch.nn.Module, n: int, fast: bool = True) -> GenerationSession:
    s = SamplerSettings(temperature=0, max_new_tokens=n)
    return GenerationSession(model, ENC, s, eos_token_ids=[], fast=fast)


def test_the_configs_differ_where_the_step_branches():
    assert tiny("t5-relu-tied").config.scale_decoder_outputs
    flan = tiny("flan-gated-gelu-untied").config
    assert flan.is_gated_act and not flan.scale_decoder_outputs
    assert flan.dense_act_fn == "gelu_new"


@pytest.mark.parametrize("kind", ALL)
def test_fp32_greedy_equals_transformers_generate(kind):
    model = tiny(kind)
    want = _generate(model, N)
    session = _session(model, N)
    assert session.fast and isinstance(session.stepper, T5FastStepper)
    assert [s.token_id for s in session.stream()] == want
    assert len(set(want)) > 3  # the run varies, so a wrong step would show


@pytest.mark.parametrize("kind", ALL)
def test_logits_equal_the_model_forward_through_prefill_decode_branch_and_multi_token(kind):
    model = tiny(kind, init=1.0)  # logits of a few units: 1e-4 is float rounding
    fast, ref = T5FastStepper(model, ENC), ModelStepper(model, ENC, use_cache=False)
    long = [0] + [(7 * i) % 380 + 2 for i in range(40)]  # 41 positions: past the max distance
    seqs = [[0], [0, 3], [0, 3, 9, 11], [0, 4], [0, 3, 9, 8, 8], long, long + [1],
            long[:20] + [2, 3, 4, 5], long[:6]]  # fmt: skip
    for seq in seqs:  # each one extends, branches from or rewinds the previous
        keep = min(4, len(seq))  # several rows at once, as speculative verification asks
        torch.testing.assert_close(
            fast.logits(seq, keep=keep), ref.logits(seq, keep=keep), atol=1e-4, rtol=1e-4
        )
    assert fast.cache.ids == seqs[-1]
    assert fast.forward_passes == len(seqs)


@pytest.mark.parametrize("kind", ["t5-relu-tied", "flan-gated-gelu-untied"])
def test_branching_on_the_fast_path_matches_generate_from_the_branch(kind):
    model = tiny(kind)
    session = _session(model, 12)
    list(session.stream())
    passes = session.stepper.forward_passes
    session.branch(5, 42)  # cache cropped to start + 5 tokens, then one token fed
    list(session.stream(14))
    branched = session.generated_ids
    assert branched[5] == 42 and len(branched) == 19  # 5 kept, the forced one, 13 more
    start = session.ids[0]
    assert branched[6:] == _generate(model, len(branched) - 6, [start, *branched[:6]])
    assert session.stepper.forward_passes - passes == 14  # nothing recomputed


@pytest.mark.parametrize("kind", ["t5-relu-tied", "flan-gated-gelu-untied"])
def test_seed_api_with_cache_takes_the_t5_path_and_equals_generate(kind, monkeypatch):
    from engine.drivers import compat

    model = tiny(kind)
    built = spy_on_init(monkeypatch, T5FastStepper)
    got = compat.autoregressive_generate_encoder_decoder(
        ENC, model, max_gen_len=N, eos_tokens_id=[], use_cache=True
    )
    assert built == [T5FastStepper]
    assert got == [model.config.decoder_start_token_id, *_generate(model, N)]
    built.clear()
    plain = compat.autoregressive_generate_encoder_decoder(
        ENC, model, max_gen_len=N, eos_tokens_id=[], use_cache=False
    )
    assert not built and plain == got


@pytest.mark.parametrize("kind", ["t5-relu-tied", "flan-gated-gelu-untied"])
def test_bf16_logits_agree_within_bf16_rounding(kind):
    """bfloat16: the step and transformers round differently (fused matrices, SDPA with the
    bias as a float mask), so logits are compared within a tolerance relative to their spread,
    and the greedy choice where transformers' top two are apart."""
    model = tiny(kind).to(torch.bfloat16)
    fast, ref = T5FastStepper(model, ENC), ModelStepper(model, ENC, use_cache=False)
    want = _generate(model, 16)
    seq = [0]
    agree = 0
    for token in want:
        ours, theirs = (
            fast.logits(seq, keep=min(2, len(seq))),
            ref.logits(seq, keep=min(2, len(seq))),
        )
        spread = float(theirs.std())
        assert float((ours - theirs).abs().max()) <= 0.08 * spread + 0.05
        top2 = theirs[-1].topk(2).values
        if float(top2[0] - top2[1]) > 0.1 * spread:
            assert int(ours[-1].argmax()) == int(theirs[-1].argmax())
        agree += int(ours[-1].argmax()) == token
        seq.append(token)
    assert agree >= len(want) - 2  # ties decided by rounding may differ; say so, bounded


def test_an_empty_encoder_input_is_refused_as_model_forward_does():
    from engine.errors import EmptyPromptError

    with pytest.raises(EmptyPromptError):
        T5FastStepper(tiny("t5-relu-tied"), [])


@pytest.mark.slow
def test_bundled_tiny_t5_equals_generate():
    from engine.models.catalog import open_model

    bundle = open_model("tiny-t5", device="cpu")
    model = bundle.model
    assert supports_t5(model) is None
    enc = bundle.tokenizer("date: 2024-03-05").input_ids
    x = torch.tensor([enc])
    out = model.generate(
        input_ids=x, attention_mask=torch.ones_like(x), max_new_tokens=20, do_sample=False,
        eos_token_id=None, min_new_tokens=20,
    )  # fmt: skip
    want = out[0, 1:].tolist()
    session = GenerationSession(
        model, enc, SamplerSettings(temperature=0, max_new_tokens=20), eos_token_ids=[], fast=True
    )
    assert isinstance(session.stepper, T5FastStepper)
    assert [s.token_id for s in session.stream()] == want


def test_an_unsupported_encoder_decoder_uses_model_forward_with_one_log_line(caplog):
    model = tiny_bart()
    assert "bart" in supports_t5(model)
    with caplog.at_level(logging.INFO, logger="engine.step.fast_t5"):
        stepper = make_stepper(model, [5, 6, 7], fast=True)
    assert isinstance(stepper, ModelStepper)
    lines = [r.getMessage() for r in caplog.records if r.name == "engine.step.fast_t5"]
    assert len(lines) == 1 and lines[0].startswith("fast path off:") and "model.forward" in lines[0]


def test_float16_and_mixed_dtypes_are_refused():
    assert "float16" in supports_t5(tiny("t5-relu-tied").half())
    model = tiny("flan-gated-gelu-untied").to(torch.bfloat16)
    model.decoder.block[0].layer[2].DenseReluDense.wo.float()  # as _keep_in_fp32_modules does
    assert "mixed" in supports_t5(model)
    assert isinstance(make_stepper(model, ENC, fast=True), ModelStepper)


def test_the_slow_and_uncached_paths_stay_model_forward():
    model = tiny("t5-relu-tied")
    assert isinstance(make_stepper(model, ENC, fast=False), ModelStepper)
    assert isinstance(make_stepper(model, ENC, use_cache=False, fast=True), ModelStepper)


@pytest.mark.parametrize("draft_seed", [0, 1])  # 0: drafts all accepted; 1: many rejected
def test_speculative_decoding_runs_both_models_on_the_t5_step_and_equals_generate(draft_seed):
    from engine.decode.speculative import ModelDrafter, SpeculativeSession

    target, draft = tiny("t5-relu-tied"), tiny("t5-relu-tied", seed=draft_seed)
    drafter = ModelDrafter(draft, ENC, fast=True)
    spec = SpeculativeSession(
        target, ENC, drafter, SamplerSettings(temperature=0), eos_token_ids=[], gamma=3, fast=True
    )
    assert isinstance(spec.stepper, T5FastStepper) and isinstance(drafter.stepper, T5FastStepper)
    assert spec.run(N) == _generate(target, N)  # the target verifies several tokens per pass
    if draft_seed == 0:
        assert spec.stepper.forward_passes <= N // 2
