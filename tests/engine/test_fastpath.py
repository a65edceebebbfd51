"""The lean Llama decode path agrees with the model's own forward."""

import pytest
import torch

from engine import GenerationSession, SamplerSettings
from engine.decode.speculative import NGramDrafter, SpeculativeSession
from engine.step.fastpath import FastPathUnsupported, LlamaFastStepper, fast_stepper_or_none
from engine.step.stepper import ModelStepper
from tiny_models import tiny_bart, tiny_llama, tiny_t5

PROMPT = [5, 17, 33, 90, 41, 7]


def test_logits_match_the_model_forward_through_prefill_decode_and_crop():
    model = tiny_llama()
    fast, ref = LlamaFastStepper(model), ModelStepper(model, use_cache=False)
    seqs = [PROMPT, PROMPT + [3], PROMPT + [3, 9, 11], PROMPT + [4], PROMPT[:3] + [8, 8]]
    for seq in seqs:  # each one extends, branches from or rewinds the previous
        keep = min(3, len(seq))
        torch.testing.assert_close(
            fast.logits(seq, keep=keep), ref.logits(seq, keep=keep), atol=1e-4, rtol=1e-4
        )
    assert len(fast.cache) == len(seqs[-1])


def test_greedy_session_equals_transformers_generate():
    model = tiny_llama()
    ref = model.generate(
        torch.tensor([PROMPT]), max_new_tokens=40, do_sample=False, eos_token_id=None
    )
    session = GenerationSession(
        model,
        PROMPT,
        SamplerSettings(temperature=0, max_new_tokens=40),
        eos_token_ids=[],
        fast=True,
    )
    assert session.fast
    assert [s.token_id for s in session.stream()] == ref[0, len(PROMPT) :].tolist()


def test_branch_on_the_fast_path_matches_the_reference_path():
    model = tiny_llama()
    s = SamplerSettings(temperature=0, max_new_tokens=12)
    runs = []
    for fast in (True, False):
        session = GenerationSession(model, PROMPT, s, eos_token_ids=[], fast=fast)
        list(session.stream())
        session.branch(5, 42)
        list(session.stream(6))
        runs.append(session.generated_ids)
    assert runs[0] == runs[1]


def test_speculative_on_the_fast_path_equals_plain_greedy():
    model = tiny_llama()
    prompt = PROMPT * 3
    ref = model.generate(
        torch.tensor([prompt]), max_new_tokens=30, do_sample=False, eos_token_id=None
    )
    spec = SpeculativeSession(
        model, prompt, NGramDrafter(), SamplerSettings(temperature=0), eos_token_ids=[], fast=True
    )
    assert spec.run(30) == ref[0, len(prompt) :].tolist()


def test_other_architectures_fall_back():
    model = tiny_t5()  # families with a fast path: tests/engine/test_families.py
    assert fast_stepper_or_none(model) is None
    with pytest.raises(FastPathUnsupported):
        LlamaFastStepper(model)
    # an encoder-decoder with no fast step of its own (T5 has one: tests/engine/test_t5_fast.py)
    session = GenerationSession(
        tiny_bart(), PROMPT, SamplerSettings(temperature=0, max_new_tokens=3), eos_token_ids=[],
        fast=True,
    )  # fmt: skip
    assert not session.fast and len(list(session.stream())) == 3


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cpu_kernel_agrees_with_the_model_forward_in_each_dtype(dtype):
    model = tiny_llama().to(dtype)
    fast, ref = LlamaFastStepper(model), ModelStepper(model, use_cache=False)
    from engine.step.fastpath import onednn_supports

    # the oneDNN kernel wherever this CPU runs it in this dtype (bf16 needs AVX-512), else matmul
    assert fast.onednn == onednn_supports(dtype)
    tol = 1e-4 if dtype == torch.float32 else 0.1
    for seq in (PROMPT, PROMPT + [3], PROMPT + [3, 9]):
        torch.testing.assert_close(fast.logits(seq), ref.logits(seq), atol=tol, rtol=tol)
    if dtype == torch.bfloat16 and fast.onednn:  # packed weights are reused, not copied again
        again = LlamaFastStepper(model)
        assert all(a is b for a, b in zip(again.layers[0], fast.layers[0], strict=True))


def test_cpu_kernel_falls_back_to_matmul_when_onednn_is_missing(monkeypatch):
    model = tiny_llama()
    monkeypatch.setattr(torch.backends.mkldnn, "is_available", lambda: False)
    fast, ref = LlamaFastStepper(model), ModelStepper(model, use_cache=False)
    assert not fast.onednn
    torch.testing.assert_close(fast.logits(PROMPT), ref.logits(PROMPT), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("fused", ["1", "0"])
def test_matmul_only_forward_for_a_torch_without_onednn_agrees(fused, monkeypatch):
    """The step as a torch without oneDNN runs it: the prompt on the scripted step, the next
    token on the lab's whole-token step where it is built (fused "1") or the scripted one."""
    from engine.step import fastpath

    monkeypatch.setattr(fastpath, "onednn_supports", lambda _dtype: False)
    monkeypatch.setenv("DECODING_LAB_FUSED", fused)
    model = tiny_llama()
    fast = LlamaFastStepper(model)
    assert not fast.onednn and not (fused == "0" and fast.fused)
    ref = ModelStepper(model, use_cache=False)
    for seq in (PROMPT, PROMPT + [3], PROMPT + [3, 8]):
        torch.testing.assert_close(fast.logits(seq), ref.logits(seq), atol=1e-4, rtol=1e-4)
