"""Sweeps and stochastic variation, checked against transformers' generate and model.forward."""

from collections import Counter

import pytest
import torch

from engine import GenerationSession, SamplerSettings
from engine.experiments.sweep import distinct_n, first_difference, sweep, variation
from tiny_models import tiny_llama

PROMPT = [5, 17, 42, 9]


@pytest.fixture(scope="module")
def model():
    return tiny_llama(seed=7)


@pytest.fixture(scope="module")
def make(model):
    return lambda s: GenerationSession(model, PROMPT, s, eos_token_ids=[1], top_n=1)


def test_distinct_n_and_first_difference_by_hand():
    assert distinct_n([1, 2, 1, 2, 3], 1) == 3 / 5
    assert distinct_n([1, 2, 1, 2, 3], 2) == 3 / 4  # (1,2) twice, (2,1), (2,3)
    assert distinct_n([1], 2) == 0.0
    assert first_difference([1, 2, 3], [1, 2, 4]) == 2
    assert first_difference([1, 2], [1, 2, 3]) == 2
    assert first_difference([1, 2], [1, 2]) is None


def test_temperature_sweep_matches_the_model(model, make):
    base = SamplerSettings(temperature=1.0, max_new_tokens=8, seed=4)
    rows = sweep(make, base, "temperature", [0.0, 0.7, 1.5])
    assert [r.value for r in rows] == [0.0, 0.7, 1.5]
    x = torch.tensor([PROMPT])
    greedy = model.generate(x, max_new_tokens=8, do_sample=False)[0, len(PROMPT) :].tolist()
    assert list(rows[0].token_ids) == greedy[: len(rows[0].token_ids)]
    assert rows[0].sampler_logprob == pytest.approx(0.0, abs=1e-6)  # greedy: every p is 1
    for row in rows:
        seq = torch.tensor([PROMPT + list(row.token_ids)])
        with torch.no_grad():
            logp = model(seq).logits[0].log_softmax(-1)  # position t predicts token t + 1
        direct = sum(float(logp[len(PROMPT) - 1 + i, t]) for i, t in enumerate(row.token_ids))
        assert row.logprob == pytest.approx(direct, abs=1e-3)
        assert row.distinct[0] == distinct_n(row.token_ids, 1)
    again = sweep(make, base, "temperature", [0.7])
    assert again[0] == rows[1]  # same seed, same output


def test_sweep_refuses_bad_values(make):
    base = SamplerSettings(max_new_tokens=2)
    with pytest.raises(ValueError, match="cannot sweep"):
        sweep(make, base, "order", [1])
    with pytest.raises(ValueError, match="top_p"):
        sweep(make, base, "top_p", [1.5])
    with pytest.raises(ValueError, match="whole numbers"):
        sweep(make, base, "top_k", [2.5])


def test_variation_groups_runs_by_output(make):
    base = SamplerSettings(temperature=2.0, max_new_tokens=5, seed=100)
    result = variation(make, base, 12)
    assert sum(c.count for c in result.continuations) == 12
    assert result.distinct == len(result.continuations) > 1
    mode = result.continuations[0]
    assert mode.diverges_at is None and mode.count == max(c.count for c in result.continuations)
    for c in result.continuations:
        assert len(c.seeds) == c.count
        again = make(base.with_(seed=c.seeds[-1]))
        list(again.stream())
        assert tuple(again.generated_ids) == c.token_ids  # the group really is that seed's
        if c is not mode:
            assert c.diverges_at == first_difference(c.token_ids, mode.token_ids) is not None
    greedy = variation(make, base.with_(temperature=0.0), 4)
    assert greedy.distinct == 1 and greedy.continuations[0].count == 4


def test_variation_counts_equal_counting_by_hand(make):
    """Each seed run on its own, counted with a Counter; the divergence found by a plain walk."""
    base = SamplerSettings(temperature=1.8, top_k=8, max_new_tokens=4, seed=7)
    result = variation(make, base, 15)
    outputs = []
    for seed in range(7, 22):
        session = make(base.with_(seed=seed))
        list(session.stream())
        outputs.append(tuple(session.generated_ids))
    counted = Counter(outputs)
    assert len(counted) > 1  # the grouping has something to do
    assert {c.token_ids: c.count for c in result.continuations} == dict(counted)
    mode = result.continuations[0].token_ids
    assert counted[mode] == max(counted.values())
    for c in result.continuations[1:]:
        walk = 0
        while walk < min(len(c.token_ids), len(mode)) and c.token_ids[walk] == mode[walk]:
            walk += 1
        assert c.diverges_at == walk
