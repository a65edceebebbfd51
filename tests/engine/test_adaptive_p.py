"""Adaptive-p against llama.cpp's rule (src/llama-sampling.cpp, PR #17927), worked by hand:
new logit = 5 - 10·d²/(1 + d) with d = |p - t'| / 0.3, t' = clamp(2·target - EMA, 0, 1)."""

import math

import pytest
import torch

from engine import GenerationSession, SamplerSettings
from engine.sampling.adaptive_p import AdaptiveP, adapted_target
from engine.sampling.build import build_chain
from engine.sampling.settings import LLAMA_CPP_ORDER, TRANSFORMERS_ORDER
from tiny_models import tiny_llama


def logits_of(probs):
    return torch.tensor([[math.log(p) if p > 0 else float("-inf") for p in probs]])


def test_first_step_by_hand():
    # Primed as if the target were met: EMA = 0.5, so t' = 2·0.5 - 0.5 = 0.5.
    stage = AdaptiveP(0.5, decay=0.9)
    out = stage(torch.tensor([[7, 8]]), logits_of([0.5, 0.3, 0.2]))
    # d = 0, 2/3, 1 -> 5, 5 - 10·(4/9)/(5/3) = 5 - 8/3, 5 - 10·1/2 = 0
    torch.testing.assert_close(out, torch.tensor([[5.0, 5 - 8 / 3, 0.0]]))


def test_removed_tokens_stay_removed():
    stage = AdaptiveP(0.2, decay=0.5)
    out = stage(torch.tensor([[1]]), logits_of([0.6, 0.4, 0.0]))
    # t' = 0.2: d = 4/3, 2/3 -> 5 - 10·(16/9)/(7/3) = 5 - 160/21, 5 - 8/3
    torch.testing.assert_close(out[0, :2], torch.tensor([5 - 160 / 21, 5 - 8 / 3]))
    assert out[0, 2] == float("-inf")


def test_the_average_follows_the_chosen_tokens():
    stage = AdaptiveP(0.5, decay=0.9)
    stage(torch.tensor([[3, 4]]), logits_of([0.5, 0.3, 0.2]))
    # Token 2 (original p 0.2) was chosen: weighted = 0.2 + 0.9·5 = 4.7, total = 1 + 0.9·10
    # = 10, EMA = 0.47, so t' = 1 - 0.47 = 0.53.
    assert adapted_target(0.5, 4.7, 10.0) == pytest.approx(0.53)
    out = stage(torch.tensor([[3, 4, 2]]), logits_of([0.53, 0.47 - 0.3, 0.3]))
    d = [0.0, (0.53 - 0.17) / 0.3, (0.53 - 0.3) / 0.3]
    torch.testing.assert_close(
        out, torch.tensor([[5 - 10 * x * x / (1 + x) for x in d]]), rtol=1e-5, atol=1e-5
    )
    # A branch that chose token 0 (p 0.5) instead continues from its own average: t' = 0.5.
    again = stage(torch.tensor([[3, 4, 0]]), logits_of([0.5, 0.3, 0.2]))
    torch.testing.assert_close(again, torch.tensor([[5.0, 5 - 8 / 3, 0.0]]))


def test_off_below_zero_and_last_in_both_orders():
    assert not build_chain(SamplerSettings(adaptive_p_target=-1.0)).stages
    chain = build_chain(SamplerSettings(adaptive_p_target=0.4, min_p=0.05, temperature=0.8))
    assert chain.labels[-1] == "adaptive-p 0.4"
    assert LLAMA_CPP_ORDER[-1] == TRANSFORMERS_ORDER[-1] == "adaptive_p"
    with pytest.raises(ValueError, match="adaptive_p_decay"):
        SamplerSettings(adaptive_p_target=0.5, adaptive_p_decay=1.0)


def test_a_low_target_picks_less_probable_tokens_in_a_run():
    """In a session the stage reports its adapted target at every step, and a low target
    makes the chosen tokens less probable (under the model) than plain sampling's."""
    model = tiny_llama(seed=5)
    base = SamplerSettings(temperature=0.5, max_new_tokens=40, seed=1)
    plain = GenerationSession(model, [5, 6, 7], base, eos_token_ids=[])
    steered = GenerationSession(
        model, [5, 6, 7], base.with_(adaptive_p_target=0.1), eos_token_ids=[]
    )
    p_plain = [s.raw_prob for s in plain.stream()]
    chosen = []
    for step in steered.stream():
        notes = dict((n.stage, n.text) for n in step.stage_notes)
        assert notes["adaptive-p 0.1"].startswith("adapted target")
        chosen.append(step.raw_prob)
    assert sum(chosen) / len(chosen) < sum(p_plain) / len(p_plain)
