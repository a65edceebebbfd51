"""The fused per-token function (``engine.decode.device_stats``) against today's path (the
chain, ``Chain.pick`` and ``engine.decode.measure``): the same token and the same numbers on
hand-built logits, for each chain it runs; the chains it cannot run are named with a reason."""

import pytest
import torch

from engine.decode.device_stats import (
    fallback_reason,
    plan_for,
    token_stats,
    window_seen,
)
from engine.decode.measure import measure, unpack_row
from engine.sampling.build import build_chain
from engine.sampling.settings import SamplerSettings

VOCAB, TOP_N = 64, 12

CHAINS = {
    "greedy": SamplerSettings(temperature=0),
    "plain": SamplerSettings(),
    "temperature": SamplerSettings(temperature=0.7),
    "top-k": SamplerSettings(temperature=0.9, top_k=7),
    "top-p": SamplerSettings(top_p=0.8),
    "min-p": SamplerSettings(temperature=1.3, min_p=0.05),
    "all": SamplerSettings(
        temperature=0.8, top_k=20, top_p=0.9, min_p=0.02, repetition_penalty=1.3
    ),
    "penalty-window": SamplerSettings(repetition_penalty=1.8, penalty_last_n=3, top_k=10),
    "llama.cpp order": SamplerSettings(
        temperature=0.6, top_k=30, top_p=0.95, order="temperature_last", repetition_penalty=1.2
    ),
    "greedy+penalty": SamplerSettings(temperature=0, repetition_penalty=1.5),
}


def _today(settings, logits, ids, seed):
    chain = build_chain(settings)
    g = torch.Generator().manual_seed(seed)
    chain.prepare(g)
    probs, cut = chain.probs(ids if chain.uses_ids else None, logits)
    token = chain.pick(probs[0], g)
    report = chain.report()
    return measure(logits, probs, token, TOP_N, cut, None, report.penalties)[0]


def _fused(settings, logits, ids, seed, forced=None):
    plan = plan_for(build_chain(settings), TOP_N)
    assert not isinstance(plan, str), plan
    capacity = torch.zeros(40, dtype=torch.long)
    capacity[: ids.shape[1]] = ids[0]
    seen = window_seen(capacity, ids.shape[1], plan.last_n, VOCAB) if plan.penalties else None
    out = torch.full((plan.width(VOCAB),), float("nan"), dtype=torch.float64)
    g = torch.Generator().manual_seed(seed)
    finite = torch.ones(1, dtype=torch.bool)
    token = token_stats(plan, logits, finite, seen, g, forced, out)
    return token, unpack_row(out.tolist(), TOP_N, plan.penalties)


@pytest.mark.parametrize("name", CHAINS)
@pytest.mark.parametrize("seed", [0, 1, 7])
def test_the_fused_function_gives_what_the_chain_and_measure_give(name, seed):
    torch.manual_seed(seed)
    logits = torch.randn(1, VOCAB) * 3
    ids = torch.randint(0, VOCAB, (1, 9))
    ids[0, -1] = int(logits.argmax())  # the penalty has the top token to push down
    settings = CHAINS[name]
    want = _today(settings, logits, ids, seed)
    token, got = _fused(settings, logits, ids, seed)
    assert int(token) == got.token_id == want.token_id
    assert (got.rank, got.survivors, got.top_ids, got.top_cut) == (
        want.rank, want.survivors, want.top_ids, want.top_cut,
    )  # fmt: skip
    for field in ("raw_prob", "prob", "entropy_raw", "entropy", "top_raw", "top_prob"):
        torch.testing.assert_close(
            torch.tensor(getattr(got, field)), torch.tensor(getattr(want, field)),
            atol=1e-6, rtol=0,
        )  # fmt: skip
    assert got.penalties == want.penalties
    assert got.finite


def test_a_forced_token_is_measured_as_the_pick_would_be():
    torch.manual_seed(3)
    logits = torch.randn(1, VOCAB)
    ids = torch.randint(0, VOCAB, (1, 4))
    forced = int(logits.argmin())
    _, got = _fused(CHAINS["top-k"], logits, ids, 0, forced=torch.tensor([forced]))
    assert got.token_id == forced and got.rank == VOCAB and got.prob == 0.0


def test_the_penalty_window_reads_only_the_last_n_valid_ids():
    ids = torch.tensor([5, 6, 7, 8, 9, 1, 1, 1])  # valid below 5; the rest is stale
    seen = window_seen(ids, torch.tensor([5]), 2, 12)[0]
    assert seen.nonzero().flatten().tolist() == [8, 9]
    assert window_seen(ids, 5, 0, 12)[0].nonzero().flatten().tolist() == [5, 6, 7, 8, 9]


FALLBACKS = {
    "mirostat": (SamplerSettings(mirostat=2), "mirostat"),
    "DRY": (SamplerSettings(dry_multiplier=0.8), "DRY"),
    "grammar": (SamplerSettings(grammar="choice:yes|no"), "grammar"),
    "XTC": (SamplerSettings(xtc_probability=0.5), "XTC"),
    "logit bias": (SamplerSettings(logit_bias=(("#5", 2.0),)), "logit bias"),
    "banned strings": (SamplerSettings(banned_strings=("#5",)), "banned strings"),
    "typical-p": (SamplerSettings(typical_p=0.9), "typical-p"),
    "dynamic temperature": (SamplerSettings(dynatemp_range=0.5), "dynamic temperature"),
    "no-repeat-ngram": (SamplerSettings(no_repeat_ngram_size=3), "no-repeat-ngram"),
    "frequency penalty": (SamplerSettings(frequency_penalty=0.5), "frequency"),
}


@pytest.mark.parametrize("name", FALLBACKS)
def test_chains_the_device_path_cannot_run_fall_back_with_a_named_reason(name):
    settings, words = FALLBACKS[name]
    if name == "grammar":
        pytest.importorskip("llguidance")
        from transformers import ByT5Tokenizer

        chain = build_chain(settings, tokenizer=ByT5Tokenizer())
    else:
        chain = build_chain(settings)
    reason = fallback_reason(chain)
    assert reason is not None and words.lower() in reason.lower()
    assert plan_for(chain, TOP_N) == reason


@pytest.mark.parametrize("name", CHAINS)
def test_the_common_chains_have_a_plan(name):
    assert fallback_reason(build_chain(CHAINS[name])) is None
