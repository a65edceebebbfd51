"""Two models in lockstep: per-step KL and top-N Jaccard equal a direct computation from both
models' model.forward over the final sequence; different tokenizers are refused."""

import copy

import pytest
import torch
from transformers import ByT5Tokenizer

from engine import GenerationSession, SamplerSettings
from engine.errors import TokenizerMismatchError
from engine.experiments.lockstep import Lockstep
from tiny_models import tiny_llama

PROMPT = [5, 17, 42, 9, 3]


def direct(model_a, model_b, ids, start, n):
    """KL(A||B) and top-n Jaccard at every generated position, from one forward each."""
    x = torch.tensor([ids])
    with torch.no_grad():
        la = model_a(x).logits[0].double().log_softmax(-1)  # [seq, vocab]
        lb = model_b(x).logits[0].double().log_softmax(-1)
    kl, jac = [], []
    for pos in range(start - 1, len(ids) - 1):  # the logits at pos predict ids[pos + 1]
        kl.append(float((la[pos].exp() * (la[pos] - lb[pos])).sum()))
        a = set(la[pos].topk(n).indices.tolist())
        b = set(lb[pos].topk(n).indices.tolist())
        jac.append(len(a & b) / len(a | b))
    return kl, jac


@pytest.mark.parametrize("temperature", [1.0, 0.0])
@pytest.mark.parametrize("fast", [False, True])
def test_kl_and_jaccard_equal_a_direct_computation(fast, temperature):
    """At temperature 0 on the fast path a greedy step takes its logits and record in one call
    (FastStepper.greedy_logits): the recorder sees those logits too."""
    a, b = tiny_llama(seed=1), tiny_llama(seed=2)
    settings = SamplerSettings(temperature=temperature, top_k=20, max_new_tokens=10, seed=3)
    if temperature == 0.0:
        settings = SamplerSettings(temperature=0.0, max_new_tokens=10)
    session = GenerationSession(a, PROMPT, settings, eos_token_ids=[], fast=fast)
    lock = Lockstep(session, b, top_n=8)
    steps = list(lock.stream())
    assert len(steps) == 10
    ids = list(session.ids)
    kl, jac = direct(a, b, ids, len(PROMPT), 8)
    for record, k, j in zip(steps, kl, jac, strict=True):
        assert record.kl == pytest.approx(k, rel=1e-3, abs=1e-5)
        assert record.jaccard == pytest.approx(j)
        assert record.a_top[0].token_id == max(record.a_top, key=lambda r: r.prob).token_id
    summary = lock.summary()
    assert summary.tokens == 10
    assert summary.mean_kl == pytest.approx(sum(kl) / 10, rel=1e-3)
    assert summary.max_kl == pytest.approx(max(kl), rel=1e-3)
    assert summary.mean_kl > 0.01  # two different random models really disagree


def test_fp32_vs_bf16_of_one_model():
    a = tiny_llama(seed=4)
    b = copy.deepcopy(a).to(torch.bfloat16)
    settings = SamplerSettings(temperature=0.0, max_new_tokens=8)
    session = GenerationSession(a, PROMPT, settings, eos_token_ids=[])
    lock = Lockstep(session, b, top_n=5)
    steps = list(lock.stream())
    kl, jac = direct(a, b.float(), list(session.ids), len(PROMPT), 5)
    # B ran in bf16; the direct check runs its bf16 weights in fp32, so compare loosely.
    for record, k in zip(steps, kl, strict=True):
        assert record.kl == pytest.approx(k, abs=5e-3)
    assert 0 < lock.summary().mean_kl < 0.05
    assert lock.summary().greedy_agreement >= 0.5


def test_different_tokenizers_are_refused():
    a = tiny_llama(seed=1)
    session = GenerationSession(a, PROMPT, SamplerSettings(), tokenizer=ByT5Tokenizer())
    with pytest.raises(TokenizerMismatchError, match="different tokenizers"):
        Lockstep(session, tiny_llama(seed=2), tokenizer_b=ByT5Tokenizer(extra_ids=0))
    Lockstep(session, tiny_llama(seed=2), tokenizer_b=ByT5Tokenizer())  # the same: accepted
