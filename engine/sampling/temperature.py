"""Temperature variants: plain, dynamic (entropy-scaled), quadratic smoothing."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from engine.sampling import greedy
from engine.sampling.base import NEG_INF, LogitsProcessor
from engine.sampling.checks import check_setting


class Temperature(LogitsProcessor):
    """Divide the scores by the temperature; 0 keeps only the argmax (greedy)."""

    def __init__(self, temperature: float) -> None:
        check_setting("temperature", temperature)
        self.temperature = float(temperature)

    @property
    def label(self) -> str:
        return (
            "greedy (temperature 0)"
            if self.temperature == 0
            else f"temperature {self.temperature:g}"
        )

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self.temperature == 0:  # the first maximum stays, every other score is -inf
            return greedy.keep_first_max(scores)
        if self.temperature == 1:
            return scores.clone()
        # Shift by the max first: tiny temperatures then give -inf, never inf - inf = NaN.
        top = scores.amax(dim=-1, keepdim=True)
        return (scores - top) / self.temperature


class DynamicTemperature(LogitsProcessor):
    """Entropy-based dynamic temperature (llama.cpp ``llama_sampler_temp_ext_apply``, by
    kalomaze): with the N tokens still in, H their entropy and H_max = ln N, the temperature is
    ``max(0, t - range) + 2·range·(H / H_max) ** exponent`` (from t - range to t + range); one
    token left: unchanged. A temperature of 0 keeps only the argmax."""

    def __init__(self, temperature: float, temp_range: float, exponent: float = 1.0) -> None:
        check_setting("temperature", temperature)
        check_setting("dynatemp_range", temp_range)
        check_setting("dynatemp_exponent", exponent)
        self.temperature, self.range, self.exponent = float(temperature), temp_range, exponent

    @property
    def label(self) -> str:
        return f"dynamic temperature {self.temperature:g}±{self.range:g}"

    def _temperature(self, scores: torch.Tensor) -> torch.Tensor:
        low = max(0.0, self.temperature - self.range)
        high = self.temperature + self.range
        n = (scores != NEG_INF).sum(-1, keepdim=True)
        logp = scores.float().log_softmax(-1)
        entropy = -torch.nan_to_num(logp.exp() * logp).sum(-1, keepdim=True)
        ratio = entropy / torch.log(n.clamp_min(2).float())
        return (low + (high - low) * ratio.clamp(0, 1) ** self.exponent).to(scores.dtype)

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        t = self._temperature(scores)  # [batch, 1]
        single = (scores != NEG_INF).sum(-1, keepdim=True) <= 1
        top = scores.amax(-1, keepdim=True)
        scaled = (scores - top) / t.clamp_min(1e-30)
        kept = Temperature(0)(input_ids, scores)
        out = torch.where(t > 0, scaled, kept)
        return torch.where(single, scores, out)

    def note(self, before: torch.Tensor, after: torch.Tensor) -> torch.Tensor:
        return self._temperature(before)

    def describe(self, values: Sequence[float], show: Callable[[int], str]) -> str:
        return f"dynamic temperature {values[0]:.2f}"


class Smoothing(LogitsProcessor):
    """Quadratic sampling / smoothing factor (kalomaze; text-generation-webui
    ``QuadraticSamplingLogitsWarper``): with d = logit - max, logit' = max - k·f·d² + s·f·d³ where
    k = (3 - curve) / 2 and s = (curve - 1) / 2 (curve 1: a plain parabola). Larger f makes the
    distribution sharper around the top; 0 is off. -inf stays -inf."""

    def __init__(self, factor: float, curve: float = 1.0) -> None:
        check_setting("smoothing_factor", factor)
        check_setting("smoothing_curve", curve)
        self.factor, self.curve = float(factor), float(curve)

    @property
    def label(self) -> str:
        return f"smoothing {self.factor:g}"

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self.factor <= 0:
            return scores.clone()
        top = scores.amax(-1, keepdim=True)
        d = torch.where(scores == NEG_INF, 0.0, scores - top)
        k, s = (3 - self.curve) / 2, (self.curve - 1) / 2
        out = top - k * self.factor * d * d + s * self.factor * d * d * d
        return torch.where(scores == NEG_INF, scores, out)
