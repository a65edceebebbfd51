"""Property tests over the newer stages: on any logits (with -inf holes and extreme values) and
any history, each stage returns a new tensor without touching its inputs, the chain keeps a
proper distribution with at least one token, and a seeded run draws the same way twice."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.sampling.build import build_chain
from engine.sampling.chain import apply_chain
from engine.sampling.mirostat import Mirostat
from engine.sampling.penalties import (
    DRY,
    BannedSequences,
    FrequencyPresencePenalty,
    RepetitionPenalty,
    SequenceBias,
    SuppressTokens,
)
from engine.sampling.settings import ORDER_LLAMA_CPP, SamplerSettings
from engine.sampling.temperature import DynamicTemperature, Smoothing
from engine.sampling.truncation import XTC, EpsilonCutoff, EtaCutoff, TopA, TopNSigma

INF = float("inf")

STAGES = [
    lambda: FrequencyPresencePenalty(0.7, 0.4, last_n=3),
    lambda: RepetitionPenalty(1.4, last_n=2),
    lambda: DRY(0.8, 1.75, 2, 0, breaker_ids=[0]),
    lambda: SequenceBias({(1,): 3.0, (2, 3): -INF}),
    lambda: BannedSequences([[4], [1, 5]]),
    lambda: SuppressTokens([0, 2]),
    lambda: TopNSigma(1.0),
    lambda: EpsilonCutoff(0.05),
    lambda: EtaCutoff(0.05),
    lambda: TopA(0.4),
    lambda: XTC(0.1, 1.0),
    lambda: DynamicTemperature(0.8, 0.6, 1.5),
    lambda: Smoothing(0.4, 2.0),
    lambda: Mirostat(1, 3.0),
    lambda: Mirostat(2, 1.0),
]

rows = st.integers(3, 40).flatmap(
    lambda v: st.lists(
        st.one_of(st.floats(-1e4, 1e4), st.floats(-20, 20), st.just(-INF), st.just(0.0)),
        min_size=v,
        max_size=v,
    ).filter(lambda r: any(x > -INF for x in r))
)
histories = st.lists(st.integers(0, 2), min_size=0, max_size=12)  # ids < the smallest vocab


@pytest.mark.parametrize("make", STAGES)
@settings(max_examples=60, deadline=None)
@given(row=rows, history=histories)
def test_each_stage_keeps_a_distribution_and_its_inputs(make, row, history):
    stage = make()
    scores = torch.tensor([row])
    ids = torch.tensor([history], dtype=torch.long).reshape(1, -1)
    before_s, before_ids = scores.clone(), ids.clone()
    out, _ = apply_chain([stage], ids, scores, track=True)
    direct = stage(ids, scores)
    assert direct.data_ptr() != scores.data_ptr()
    assert torch.equal(scores, before_s) and torch.equal(ids, before_ids)
    assert (out > -INF).any()
    assert not torch.isnan(out).any()
    probs = out.softmax(-1)
    assert torch.isfinite(probs).all()
    assert abs(probs.sum().item() - 1) < 1e-4


new_settings = st.builds(
    SamplerSettings,
    temperature=st.one_of(st.just(0.0), st.floats(0.05, 3.0)),
    frequency_penalty=st.floats(-1.0, 2.0),
    presence_penalty=st.floats(-1.0, 2.0),
    penalty_last_n=st.integers(0, 6),
    dry_multiplier=st.one_of(st.just(0.0), st.floats(0.1, 3.0)),
    dry_allowed_length=st.integers(1, 3),
    top_n_sigma=st.one_of(st.just(0.0), st.floats(0.01, 3.0)),
    epsilon_cutoff=st.one_of(st.just(0.0), st.floats(1e-4, 0.5)),
    eta_cutoff=st.one_of(st.just(0.0), st.floats(1e-4, 0.5)),
    xtc_threshold=st.floats(0.0, 1.0),
    xtc_probability=st.floats(0.0, 1.0),
    top_a=st.one_of(st.just(0.0), st.floats(0.01, 5.0)),
    dynatemp_range=st.one_of(st.just(0.0), st.floats(0.01, 2.0)),
    smoothing_factor=st.one_of(st.just(0.0), st.floats(0.01, 3.0)),
    smoothing_curve=st.floats(1.0, 3.0),
    mirostat=st.sampled_from([0, 1, 2]),
    mirostat_tau=st.floats(0.0, 10.0),
    suppress_tokens=st.lists(st.integers(0, 50), max_size=3).map(tuple),
    order=st.sampled_from(["temperature_first", ORDER_LLAMA_CPP]),
)


@settings(max_examples=200, deadline=None)
@given(s=new_settings, row=rows, history=histories, seed=st.integers(0, 2**31))
def test_any_chain_gives_a_distribution_and_draws_reproducibly(s, row, history, seed):
    chain = build_chain(s)
    scores = torch.tensor([row])
    ids = torch.tensor([history], dtype=torch.long).reshape(1, -1)
    draws = []
    for _ in range(2):
        g = torch.Generator().manual_seed(seed)
        chain.prepare(g)
        probs, _ = chain.probs(ids, scores)
        assert torch.isfinite(probs).all() and (probs > 0).any()
        assert abs(probs.sum().item() - 1) < 1e-4
        draws.append((probs.clone(), int(chain.pick(probs[0], g))))
    assert torch.equal(draws[0][0], draws[1][0])
    assert draws[0][1] == draws[1][1]
