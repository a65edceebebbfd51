"""Truncation stages: each removes tokens (sets them to -inf), keeping at least one."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch

from engine.sampling.base import NEG_INF, LogitsProcessor, StepState, _check, _keep_top
from engine.sampling.checks import check_setting
from engine.sampling.sorting import stable_sort


class TopK(LogitsProcessor):
    """Keep the k highest scores (ties with the k-th kept); 0 is off."""

    def __init__(self, top_k: int) -> None:
        check_setting("top_k", top_k)
        self.top_k = top_k

    @property
    def label(self) -> str:
        return f"top-k {self.top_k}"

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        k = min(self.top_k, scores.shape[-1])
        if k == 0 or k == scores.shape[-1]:
            return scores.clone()
        kth = torch.topk(scores, k, dim=-1).values[..., -1:]  # [batch, 1]
        return scores.masked_fill(scores < kth, NEG_INF)


class TopP(LogitsProcessor):
    """Nucleus filter: keep the smallest set of top tokens whose probability mass reaches p."""

    def __init__(self, top_p: float, min_tokens_to_keep: int = 1) -> None:
        check_setting("top_p", top_p)
        _check(
            isinstance(min_tokens_to_keep, int) and min_tokens_to_keep >= 1,
            "min_tokens_to_keep must be >= 1",
        )
        self.top_p = float(top_p)
        self.min_tokens_to_keep = min_tokens_to_keep

    @property
    def label(self) -> str:
        return f"top-p {self.top_p:.2f}"

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self.top_p >= 1:
            return scores.clone()
        sorted_scores, order = stable_sort(scores, descending=True)
        probs = sorted_scores.float().softmax(dim=-1)
        mass_before = probs.cumsum(dim=-1) - probs  # mass of the tokens ranked above each one
        # Tolerance: float32 sums of probabilities that are "exactly p" land a few ulps either side.
        remove_sorted = mass_before >= self.top_p - 1e-6
        remove_sorted[..., : self.min_tokens_to_keep] = False
        remove = torch.zeros_like(remove_sorted).scatter(-1, order, remove_sorted)
        return scores.masked_fill(remove, NEG_INF)


class MinP(LogitsProcessor):
    """Keep tokens whose probability is at least min_p times the top probability; 0 is off."""

    def __init__(self, min_p: float) -> None:
        check_setting("min_p", min_p)
        self.min_p = float(min_p)

    @property
    def label(self) -> str:
        return f"min-p {self.min_p:.2f}"

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self.min_p <= 0:
            return scores.clone()
        # In log space: log p - log p_max = score - score_max, so no softmax is needed.
        gap = scores - scores.amax(dim=-1, keepdim=True)
        return scores.masked_fill(gap < math.log(self.min_p) - 1e-6, NEG_INF)


class TypicalP(LogitsProcessor):
    """Locally typical sampling (Meister et al. 2022): keep tokens whose surprisal is closest to
    the entropy until their mass reaches ``mass`` (tokens tied with the last one kept, as in
    transformers' ``TypicalLogitsWarper``); 1 is off."""

    def __init__(self, mass: float, min_tokens_to_keep: int = 1) -> None:
        check_setting("typical_p", mass)
        self.mass = float(mass)
        self.min_tokens_to_keep = min_tokens_to_keep

    @property
    def label(self) -> str:
        return f"typical-p {self.mass:.2f}"

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self.mass >= 1:
            return scores.clone()
        logp = scores.float().log_softmax(dim=-1)
        p = logp.exp()
        entropy = -torch.nan_to_num(p * logp).sum(dim=-1, keepdim=True)
        distance = (-logp - entropy).abs()
        sorted_distance, order = stable_sort(distance)
        sorted_p = p.gather(-1, order)
        # The token whose mass reaches ``mass`` is the boundary; every token at least as
        # typical as it is kept, ties included (transformers' TypicalLogitsWarper).
        last = ((sorted_p.cumsum(dim=-1) < self.mass - 1e-6).sum(-1, keepdim=True)).clamp(
            max=scores.shape[-1] - 1
        )
        remove_sorted = sorted_distance > sorted_distance.gather(-1, last)
        remove_sorted |= torch.isinf(sorted_distance)  # already removed tokens stay removed
        remove_sorted[..., : self.min_tokens_to_keep] = False
        remove = torch.zeros_like(remove_sorted).scatter(-1, order, remove_sorted)
        return scores.masked_fill(remove, NEG_INF)


class TopNSigma(LogitsProcessor):
    """Top-nσ (Tang et al. 2024; llama.cpp ``llama_sampler_top_n_sigma_apply``): keep logits
    >= max - n·σ, where σ is the population standard deviation of the logits still in (those
    not -inf). Works on logits, so it ignores temperature. 0 is off."""

    def __init__(self, n: float) -> None:
        check_setting("top_n_sigma", n)
        self.n = float(n)

    @property
    def label(self) -> str:
        return f"top-nσ {self.n:g}"

    def _sigma(self, scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        live = scores != NEG_INF
        count = live.sum(-1, keepdim=True).clamp_min(1)
        x = torch.where(live, scores, 0.0)
        mean = x.sum(-1, keepdim=True) / count
        var = (torch.where(live, scores - mean, 0.0) ** 2).sum(-1, keepdim=True) / count
        return scores.amax(-1, keepdim=True), var.sqrt()

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self.n <= 0 or scores.shape[-1] <= 1:
            return scores.clone()
        top, sigma = self._sigma(scores)
        return scores.masked_fill(scores < top - self.n * sigma, NEG_INF)

    def note(self, before: torch.Tensor, after: torch.Tensor) -> torch.Tensor:
        return self._sigma(before)[1]

    def describe(self, values: Sequence[float], show: Callable[[int], str]) -> str:
        return f"σ {values[0]:.2f}: kept logits ≥ max − {self.n * values[0]:.2f}"


class EpsilonCutoff(LogitsProcessor):
    """Epsilon sampling (Hewitt et al. 2022; transformers' ``EpsilonLogitsWarper``): remove
    tokens with probability < epsilon, keeping the most probable one. 0 is off."""

    def __init__(self, epsilon: float, min_tokens_to_keep: int = 1) -> None:
        check_setting("epsilon_cutoff", epsilon)
        self.epsilon, self.min_tokens_to_keep = float(epsilon), min_tokens_to_keep

    @property
    def label(self) -> str:
        return f"epsilon {self.epsilon:g}"

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self.epsilon <= 0:
            return scores.clone()
        remove = _keep_top(scores.softmax(-1) < self.epsilon, scores, self.min_tokens_to_keep)
        return scores.masked_fill(remove, NEG_INF)


class EtaCutoff(LogitsProcessor):
    """Eta sampling (Hewitt et al. 2022; transformers' ``EtaLogitsWarper``): remove tokens with
    probability < min(eta, sqrt(eta) · exp(-H)), H the entropy in nats; the most probable is
    kept. 0 is off."""

    def __init__(self, eta: float, min_tokens_to_keep: int = 1) -> None:
        check_setting("eta_cutoff", eta)
        self.eta, self.min_tokens_to_keep = float(eta), min_tokens_to_keep

    @property
    def label(self) -> str:
        return f"eta {self.eta:g}"

    def _cutoff(self, scores: torch.Tensor) -> torch.Tensor:
        logp = scores.log_softmax(-1)
        entropy = -torch.nan_to_num(logp.exp() * logp).sum(-1, keepdim=True)
        eta = torch.tensor(self.eta, dtype=scores.dtype, device=scores.device)
        return torch.minimum(eta, eta.sqrt() * torch.exp(-entropy))  # [batch, 1]

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self.eta <= 0:
            return scores.clone()
        remove = scores.softmax(-1) < self._cutoff(scores)
        return scores.masked_fill(_keep_top(remove, scores, self.min_tokens_to_keep), NEG_INF)

    def note(self, before: torch.Tensor, after: torch.Tensor) -> torch.Tensor:
        return self._cutoff(before)

    def describe(self, values: Sequence[float], show: Callable[[int], str]) -> str:
        return f"cutoff p < {values[0]:.2g}"


class TopA(LogitsProcessor):
    """Top-a (BlinkDL; koboldcpp and text-generation-webui): remove tokens with probability
    < a · p_max², keeping the most probable. 0 is off."""

    def __init__(self, a: float) -> None:
        check_setting("top_a", a)
        self.a = float(a)

    @property
    def label(self) -> str:
        return f"top-a {self.a:g}"

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self.a <= 0:
            return scores.clone()
        probs = scores.softmax(-1)
        p_max = probs.amax(-1, keepdim=True)
        remove = _keep_top(probs < self.a * p_max * p_max, scores)
        return scores.masked_fill(remove, NEG_INF)


class XTC(LogitsProcessor):
    """Exclude Top Choices (p-e-w, text-generation-webui #6335; llama.cpp
    ``llama_sampler_xtc_apply``): with chance ``probability`` (one uniform draw from the step's
    generator, fires when draw <= probability), if at least two tokens have probability
    >= ``threshold``, remove all of them except the least probable one. Ties with that least
    probable one are kept. probability 0 is off."""

    needs_state = True

    def __init__(self, threshold: float, probability: float, seed: int = 0) -> None:
        check_setting("xtc_threshold", threshold)
        check_setting("xtc_probability", probability)
        self.threshold, self.probability = float(threshold), float(probability)
        self.state = StepState()
        self.seed = seed

    @property
    def label(self) -> str:
        return f"XTC {self.threshold:g}/{self.probability:g}"

    def _generator(self, device: torch.device) -> torch.Generator:
        g = self.state.generator
        if g is None or g.device.type != device.type:
            g = self.state.generator = torch.Generator(device=device).manual_seed(self.seed)
        return g

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self.probability <= 0:
            return scores.clone()
        draw = torch.rand(
            (scores.shape[0], 1), generator=self._generator(scores.device), device=scores.device
        )
        probs = scores.softmax(-1)
        above = probs >= self.threshold
        least = torch.where(above, probs, 2.0).amin(-1, keepdim=True)
        fire = (draw <= self.probability) & (above.sum(-1, keepdim=True) >= 2)
        return scores.masked_fill(above & (probs > least) & fire, NEG_INF)

    def note(self, before: torch.Tensor, after: torch.Tensor) -> torch.Tensor:
        removed = (after == NEG_INF) & (before != NEG_INF)
        k = min(3, before.shape[-1])
        top = torch.topk(torch.where(removed, before, NEG_INF), k, dim=-1)
        ids = torch.where(top.values > NEG_INF, top.indices, -1)
        return torch.cat([removed.sum(-1, keepdim=True), ids], dim=-1)

    def describe(self, values: Sequence[float], show: Callable[[int], str]) -> str:
        n = int(values[0])
        if n == 0:
            return "XTC did not fire"
        names = ", ".join(repr(show(int(i))) for i in values[1:] if i >= 0)
        return f"XTC removed {n} top token{'s' if n > 1 else ''}: {names}"
