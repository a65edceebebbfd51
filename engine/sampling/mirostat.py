"""Mirostat (v1 and v2): truncation steered by a running target surprise mu."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch

from engine.sampling.base import NEG_INF, LogitsProcessor, StepState, _check
from engine.sampling.checks import check_setting
from engine.sampling.sorting import stable_sort


class Mirostat(LogitsProcessor):
    """Mirostat (Basu et al., ICLR 2021; llama.cpp ``llama_sampler_mirostat_apply`` (v1) and
    ``llama_sampler_mirostat_v2_apply`` (v2)), aiming at a target surprise ``tau`` (bits).

    v2 keeps the tokens whose surprise -log2 p is <= mu (at least the top one). v1 estimates
    the Zipf exponent s from the top m = 100 probabilities (least squares of
    ln(p_i / p_i+1) on ln((i + 2) / (i + 1))), then keeps the top
    k = ((s - 1) · 2^mu / (1 - N^(1 - s))) ^ (1 / s) tokens (N the vocabulary size, k >= 1).
    After the token is drawn, mu <- mu - eta · (surprise of the drawn token - tau): the chain's
    ``accept`` does this with the drawn token's final probability (``update_mu``); mu starts at
    2·tau.
    Ties at v1's cut: the lower token id ranks first."""

    needs_state = True
    M = 100

    def __init__(self, version: int, tau: float = 5.0, eta: float = 0.1) -> None:
        _check(version in (1, 2), f"mirostat must be 1 or 2, got {version!r}")
        check_setting("mirostat_tau", tau)
        check_setting("mirostat_eta", eta)
        self.version, self.tau, self.eta = version, float(tau), float(eta)
        self.state = StepState()

    @property
    def label(self) -> str:
        return f"mirostat v{self.version} τ {self.tau:g}"

    @property
    def mu(self) -> float:
        return self.state.mu if self.state.mu is not None else 2 * self.tau

    def update_mu(self, mu: float, chosen_prob: float) -> float:
        """mu after drawing a token of (final) probability ``chosen_prob``."""
        surprise = -math.log2(chosen_prob) if chosen_prob > 0 else 64.0
        return mu - self.eta * (surprise - self.tau)

    def _k(self, sorted_p: torch.Tensor, vocab: int) -> torch.Tensor:
        m = min(self.M, sorted_p.shape[-1])
        p = sorted_p[..., :m].double()  # [batch, m]
        i = torch.arange(m - 1, device=p.device, dtype=torch.float64)
        t = torch.log((i + 2) / (i + 1))  # [m - 1]
        valid = p[..., 1:] > 0  # only tokens still in (llama.cpp's array has no others)
        b = torch.where(valid, torch.log(p[..., :-1] / p[..., 1:].clamp_min(1e-300)), 0.0)
        tt = torch.where(valid, t * t, 0.0)
        s_hat = (t * b).sum(-1, keepdim=True) / tt.sum(-1, keepdim=True)
        eps = s_hat - 1
        k = ((eps * 2.0**self.mu) / (1 - float(vocab) ** (-eps))) ** (1 / s_hat)
        k = torch.nan_to_num(k, nan=1.0, posinf=float(vocab)).clamp(1, vocab)
        return k.floor().long()  # [batch, 1]

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self.version == 2:
            # Cutting the sorted list at the first surprise > mu is a threshold on p: no sort.
            surprise = -scores.float().log_softmax(-1) / math.log(2)
            remove = surprise > self.mu
            top = scores.argmax(-1, keepdim=True)
            return scores.masked_fill(remove.scatter(-1, top, False), NEG_INF)
        sorted_scores, order = stable_sort(scores, descending=True)
        sorted_p = sorted_scores.float().softmax(-1)
        rank = torch.arange(scores.shape[-1], device=scores.device)
        remove_sorted = rank >= self._k(sorted_p, scores.shape[-1])
        remove_sorted[..., 0] = False
        remove = torch.zeros_like(remove_sorted).scatter(-1, order, remove_sorted)
        return scores.masked_fill(remove, NEG_INF)

    def note(self, before: torch.Tensor, after: torch.Tensor) -> torch.Tensor:
        # The mu travels with the count: the words name the mu this row was filtered under,
        # whatever the chain's mu is by the time they are written (speculative rows).
        kept = (after != NEG_INF).sum(-1, keepdim=True).double()
        return torch.cat([kept, torch.full_like(kept, self.mu)], dim=-1)

    def describe(self, values: Sequence[float], show: Callable[[int], str]) -> str:
        return f"mu {values[1]:.2f}: kept {int(values[0])}"
