"""Sample-this-step-N-times: the empirical histogram converges to the after-sampler
distribution (a chi-square bound with a fixed seed), and the statistics match closed forms."""

import math
from dataclasses import replace

import pytest
import torch

from engine import GenerationSession, SamplerSettings
from engine.experiments.step_sample import (
    StepDraws,
    chi2_sf,
    draw,
    goodness_of_fit,
    next_distribution,
    sample_step,
)
from engine.sampling.build import build_chain
from tiny_models import tiny_llama


def chi2_quantile(q: float, dof: int) -> float:
    """The q-quantile of chi-square(dof), by bisection on the regularised lower incomplete
    gamma function (an independent route from the code's survival function)."""
    lo, hi = 0.0, 10.0 * dof + 100.0
    a = torch.tensor(dof / 2.0, dtype=torch.float64)
    for _ in range(200):
        mid = (lo + hi) / 2
        if float(torch.special.gammainc(a, torch.tensor(mid / 2, dtype=torch.float64))) < q:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def test_survival_function_matches_closed_forms():
    for x in (0.1, 1.0, 3.7, 12.0):
        assert chi2_sf(x, 2) == pytest.approx(math.exp(-x / 2), rel=1e-9)  # dof 2: e^(-x/2)
        assert chi2_sf(x, 1) == pytest.approx(math.erfc(math.sqrt(x / 2)), rel=1e-9)
    # The textbook table: the 0.95 quantile of chi-square(10) is 18.307.
    assert chi2_sf(18.307, 10) == pytest.approx(0.05, abs=1e-4)


def test_goodness_of_fit_by_hand():
    probs = torch.tensor([0.5, 0.3, 0.2, 0.0])
    counts = torch.tensor([60, 25, 15, 0])  # n = 100; expected 50, 30, 20
    tv, chi2, dof, p = goodness_of_fit(counts, probs)
    assert tv == pytest.approx(0.5 * (0.1 + 0.05 + 0.05))
    assert chi2 == pytest.approx(100 / 50 + 25 / 30 + 25 / 20)
    assert dof == 2
    assert p == pytest.approx(math.exp(-chi2 / 2))


def test_rare_tokens_are_pooled_into_one_cell():
    probs = torch.tensor([0.9, 0.05, 0.03, 0.02])
    counts = torch.tensor([90, 6, 3, 1])  # n = 100: expected 90, 5, 3, 2 -> the last two pool
    _tv, chi2, dof, _p = goodness_of_fit(counts, probs)
    assert dof == 2
    assert chi2 == pytest.approx(0 + 1 / 5 + (4 - 5) ** 2 / 5)


@pytest.fixture(scope="module")
def session():
    model = tiny_llama(seed=3)
    settings = SamplerSettings(temperature=1.3, top_k=40, seed=5)
    return GenerationSession(model, [5, 17, 42, 9], settings, eos_token_ids=[1])


def test_the_distribution_is_the_chains(session):
    logits, probs = next_distribution(session)
    expected = session.model(torch.tensor([[5, 17, 42, 9]])).logits[0, -1:]
    torch.testing.assert_close(logits, expected[0], rtol=1e-4, atol=1e-4)
    chain = build_chain(SamplerSettings(temperature=1.3, top_k=40))
    reference, _cut = chain.probs(None, expected)
    torch.testing.assert_close(probs, reference[0], rtol=1e-4, atol=1e-6)
    assert int((probs > 0).sum()) == 40


def test_empirical_converges_within_the_chi_square_bound(session):
    result = sample_step(session, 100_000, seed=11)
    assert sum(r.count for r in result.rows) + result.other_count == 100_000
    assert result.survivors == 40
    assert all(r.count == 0 for r in result.rows if r.prob == 0)  # cut tokens never drawn
    bound = chi2_quantile(0.999, result.dof)
    assert result.dof >= 30
    assert result.chi2 < bound, (result.chi2, bound)
    # Total variation shrinks as N grows (roughly as 1 / sqrt(N)).
    tvs = [c.tv for c in result.checkpoints]
    assert [c.n for c in result.checkpoints] == [10, 100, 1000, 10_000, 100_000]
    assert all(a > b for a, b in zip(tvs, tvs[1:], strict=False)), tvs
    assert tvs[-1] < 0.02


def test_a_wrong_distribution_is_rejected(session):
    """The test can fail: draws from a flattened distribution, checked against the real one."""
    _logits, probs = next_distribution(session)
    flat = (probs > 0).float()
    g = torch.Generator().manual_seed(0)
    counts = torch.bincount(draw(flat, 20_000, g), minlength=probs.shape[-1])
    _tv, chi2, dof, p = goodness_of_fit(counts, probs)
    assert chi2 > chi2_quantile(0.999, dof) and p < 1e-3


def test_seeded_and_the_session_does_not_move(session):
    before = list(session.ids)
    a = sample_step(session, 5000, seed=2)
    b = sample_step(session, 5000, seed=2)
    assert a.rows == b.rows and session.ids == before and not session.history
    with pytest.raises(ValueError):
        sample_step(session, 100_001)


def test_draw_more_adds_rounds_as_counted_by_hand(session):
    """Rounds of "draw more" add up: the counts equal a bincount of the same generator's draws
    taken by hand, the first round is sample_step's, and the checkpoints run on over rounds."""
    draws = StepDraws(session, seed=4, top=10)
    first = draws.more(100)
    assert first == replace(sample_step(session, 100, seed=4, top=10), sample_s=first.sample_s,
                            forward_s=first.forward_s)  # fmt: skip
    total = draws.more(900)
    _logits, probs = next_distribution(session)
    g = torch.Generator().manual_seed(4)
    by_hand = torch.bincount(
        torch.cat([torch.multinomial(probs.float(), k, True, generator=g) for k in (100, 900)]),
        minlength=probs.shape[-1],
    )
    assert total.n == 1000 and [c.n for c in total.checkpoints] == [10, 100, 1000]
    assert {r.token_id: r.count for r in total.rows} == {
        r.token_id: int(by_hand[r.token_id]) for r in total.rows
    }
    assert total.other_count == 1000 - sum(int(by_hand[r.token_id]) for r in total.rows)
    tv, _chi2, _dof, p = goodness_of_fit(by_hand, probs)
    assert total.tv == pytest.approx(tv) and total.p_value == pytest.approx(p)
