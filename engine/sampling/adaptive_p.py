"""Adaptive-p (MrJackSpade; llama.cpp pull request #17927, ``llama_sampler_adaptive_p_apply``
in src/llama-sampling.cpp): prefer the tokens whose probability is near a target, and steer the
average probability of the chosen tokens towards it.

At each step, with p the probabilities of the tokens still in (the stage's input) and an
exponential moving average m of the *original* probabilities of the tokens chosen so far:

* adapted target t' = clamp(2·target − m, 0, 1): above-target picks lower the next target;
* every token still in gets the new logit PEAK − SHARPNESS · d² / (1 + d) with
  d = |p − t'| / WIDTH (PEAK 5, SHARPNESS 10, WIDTH 0.3: quadratic near the target, linear in
  the tails); tokens already removed (-inf) stay removed; the chain's draw then samples
  from the softmax of these logits, as llama.cpp's sampler does after the transform.
* m = weighted_sum / total_weight, updated after each token with the chosen token's original
  probability p_c: weighted_sum ← p_c + decay·weighted_sum, total_weight ← 1 + decay·total_weight,
  both primed as if the target had been met: target / (1 − decay) and 1 / (1 − decay).

It ends the chain (llama.cpp puts it in place of the final draw). The running average is kept
per prefix of the sequence (the stage reads ``input_ids``), so a rewind or a branch picks up the
average that belongs to the text it continues; past the last ``KEEP`` steps it starts afresh.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence

import torch

from engine.sampling.base import NEG_INF, LogitsProcessor
from engine.sampling.checks import check_setting

WIDTH, PEAK, SHARPNESS = 0.3, 5.0, 10.0
KEEP = 64  # prefixes whose original probabilities are kept (a rewind within them is exact)


def adapted_target(target: float, weighted_sum: float, total_weight: float) -> float:
    average = weighted_sum / total_weight if total_weight else target
    return min(1.0, max(0.0, 2 * target - average))


def transform(scores: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """scores: [batch, vocab]; target: [batch, 1] adapted targets -> the new logits."""
    p = scores.float().softmax(-1)
    d = (p - target).abs() / WIDTH
    out = PEAK - SHARPNESS * d * d / (1 + d)
    return torch.where(scores == NEG_INF, NEG_INF, out).to(scores.dtype)


class AdaptiveP(LogitsProcessor):
    """Reshape the distribution around an adapted target probability; target < 0 is off."""

    uses_ids = True

    def __init__(self, target: float, decay: float = 0.9) -> None:
        check_setting("adaptive_p_target", target)
        check_setting("adaptive_p_decay", decay)
        self.target, self.decay = float(target), float(decay)
        # prefix of ids -> (weighted_sum, total_weight, original probabilities [vocab])
        self._seen: OrderedDict[tuple[int, ...], tuple[float, float, torch.Tensor]] = OrderedDict()
        self._targets: list[float] = []

    @property
    def label(self) -> str:
        return f"adaptive-p {self.target:g}"

    def primed(self) -> tuple[float, float]:
        return self.target / (1 - self.decay), 1 / (1 - self.decay)

    def _state(self, ids: tuple[int, ...]) -> tuple[float, float]:
        """The running sums for a step that continues ``ids``."""
        before = self._seen.get(ids[:-1]) if ids else None
        if before is None:
            return self.primed()
        weighted, total, probs = before
        chosen = float(probs[ids[-1]]) if ids[-1] < probs.shape[-1] else 0.0
        return chosen + self.decay * weighted, 1 + self.decay * total

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self.target < 0:
            return scores.clone()
        probs = scores.float().softmax(-1)  # the original probabilities, kept for the update
        targets = []
        for row, ids in enumerate(input_ids.tolist()):  # ids live on the host
            key = tuple(ids)
            weighted, total = self._state(key)
            targets.append(adapted_target(self.target, weighted, total))
            self._seen[key] = (weighted, total, probs[row].detach())
            self._seen.move_to_end(key)
        while len(self._seen) > KEEP:
            self._seen.popitem(last=False)
        self._targets = targets
        target = torch.tensor(targets, dtype=torch.float32, device=scores.device)[:, None]
        return transform(scores, target)

    def note(self, before: torch.Tensor, after: torch.Tensor) -> str | None:
        return f"adapted target {self._targets[0]:.3f}" if self._targets else None

    def describe(self, values: Sequence[float], show: Callable[[int], str]) -> str:
        return ""
