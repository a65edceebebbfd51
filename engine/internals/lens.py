"""The logit lens (nostalgebraist, 2020): the model's own final norm and unembedding applied to
the residual stream after every layer, read as a next-token distribution. Layer 0 is the
embedding; layer L (the last) is the model's output itself.

The **decision layer** of a token is the first layer from which it is the lens's top-1 and
stays top-1 up to the output; a token that is not the output's top-1 (a sampled second choice)
has none."""

from __future__ import annotations

import math
import time
from functools import lru_cache
from typing import Any

import torch
from torch import Tensor

from engine.internals.anatomy import Anatomy

LN2 = math.log(2.0)


def lens_logprobs(an: Anatomy, resid: Tensor) -> Tensor:
    """[layers + 1, V] log-probabilities of the lens at one position (resid: [L + 1, d])."""
    return torch.log_softmax(an.lens(resid).float(), dim=-1)


def decision_layer(top1: Tensor) -> int | None:
    """The first layer from which ``top1`` (bools over layers 0..L) holds to the end."""
    if not bool(top1[-1]):
        return None
    misses = (~top1).nonzero()
    return int(misses[-1]) + 1 if len(misses) else 0


def kl_bits(logp: Tensor) -> Tensor:
    """KL(final || layer) in bits for every layer of a lens ``logp`` [L + 1, V]."""
    final = logp[-1]
    p = final.exp()
    return ((p * (final - logp)).nansum(dim=-1) / LN2).clamp_min(0.0)


# -- the decision strip: every position at once ------------------------------------------------

# The strip's scan asks, layer by layer from the output down, whether each still-decided token
# is the lens's top-1. Each question reads the whole unembedding; ROWS residual vectors go
# through it together, so that small batches do not re-read it once per layer.
ROWS = 64
SCREEN_K = 64  # candidates a bf16 screen checks exactly
CHUNK = 256  # rows of full [rows, V] logits at a time


@lru_cache(maxsize=8)
def bf16_pays(d: int, vocab: int, device: str) -> bool:
    """Whether a bf16 product against the unembedding beats fp32 on this CPU (AMX / AVX-512
    bf16 make it 2-3x faster; elsewhere it is emulated and slower). Measured once per shape."""
    if device != "cpu":
        return False
    a, w = torch.randn(ROWS, d), torch.randn(vocab, d)
    ab, wb = a.bfloat16(), w.bfloat16()

    def best(x: Tensor, y: Tensor) -> float:
        times = []
        for _ in range(3):
            t = time.perf_counter()
            torch.mm(x, y.T)
            times.append(time.perf_counter() - t)
        return min(times)

    return best(ab, wb) < 0.7 * best(a, w)


class TopOne:
    """Asks whether token ``c`` is the top-1 of ``x @ W.T`` for many rows at once, with the
    answer torch's argmax of the fp32 product would give. On CPUs where bf16 pays, a bf16
    product screens the vocabulary and the few tokens that could still beat ``c`` (inside a
    bound on the bf16 rounding, computed from the rounding itself) are checked in fp32."""

    def __init__(self, weight: Tensor, screen: bool | None = None) -> None:
        self.w = weight  # [V, d], the unembedding
        can = weight.dtype == torch.float32 and weight.device.type == "cpu"
        if screen is None:  # where it pays (measured once per shape)
            screen = can and bf16_pays(weight.shape[1], weight.shape[0], "cpu")
        self.screen = can and screen
        if self.screen:
            self.wb = weight.bfloat16()
            self.w_norm = float(weight.norm(dim=1).max())
            self.dw_norm = float((weight - self.wb.float()).norm(dim=1).max())

    def __call__(self, x: Tensor, c: Tensor) -> Tensor:
        parts = zip(x.split(CHUNK), c.split(CHUNK), strict=True)
        if not self.screen:
            return torch.cat([(a @ self.w.T).argmax(-1) == b for a, b in parts])
        return torch.cat([self._screened(a.float(), b) for a, b in parts])

    def _screened(self, x: Tensor, c: Tensor) -> Tensor:
        xb = x.bfloat16()
        dx = (x - xb.float()).norm(dim=1)
        xn = x.norm(dim=1)
        # |x.w - xb.wb| <= |dx||w| + |x||dw| + |dx||dw|, plus the fp32 sums' own rounding
        d = x.shape[1]
        bound = dx * self.w_norm + xn * self.dw_norm + dx * self.dw_norm
        bound = bound * 1.01 + 2 * d * 2.0**-24 * xn * self.w_norm
        approx = xb @ self.wb.T  # [n, V] bf16
        vals, idx = approx.topk(SCREEN_K, dim=-1)
        lc = approx.gather(1, c[:, None]).squeeze(1).float()
        # a token outside the top-K is below the K-th value; if that is under lc - 2 bound,
        # no token outside can beat c exactly, and the top-K (and c) decide
        covered = vals[:, -1].float() < lc - 2 * bound
        exact = torch.einsum("nd,nkd->nk", x, self.w[idx])
        ec = (x * self.w[c]).sum(-1)
        rival = exact.masked_fill(idx == c[:, None], float("-inf"))
        best, at = rival.max(-1)
        rival_id = idx.gather(1, at[:, None]).squeeze(1)
        win = (ec > best) | ((ec == best) & (c < rival_id))  # argmax takes the lowest id of a tie
        if not bool(covered.all()):
            rest = ~covered
            win[rest] = (x[rest] @ self.w.T).argmax(-1) == c[rest]
        return win


_TOP_ONE: list[tuple[tuple[Any, ...], TopOne]] = []


def top_one(weight: Tensor, screen: bool | None = None) -> TopOne:
    """The TopOne of an unembedding, kept for the next strip (its bf16 copy costs ~80 ms on
    SmolLM2); a weight changed in place or another model's makes a new one. ``screen``: None
    where it pays, or forced on or off (the benchmark measures both)."""
    key = (weight.data_ptr(), weight._version, weight.dtype, screen)
    if _TOP_ONE and _TOP_ONE[0][0] == key:
        return _TOP_ONE[0][1]
    _TOP_ONE[:] = [(key, TopOne(weight, screen))]
    return _TOP_ONE[0][1]


def strip_scan(
    an: Anatomy, resid: Tensor, chosen: Tensor, screen: bool | None = None
) -> list[int | None]:
    """Decision layers of ``chosen`` [P] from the residuals ``resid`` [L + 1, P, d], walking
    from the output down and stopping for each token at the first layer where it is not top-1
    (only what is needed is computed: a sampled second choice costs the output layer alone)."""
    n_layers = resid.shape[0] - 1
    top = None if asks_the_head(an) else top_one(an.head.weight, screen)
    final = _hits(an, top, _head_input(an, resid[n_layers]), chosen)  # the model's output
    decision = torch.full_like(chosen, -1)
    alive = final.nonzero().squeeze(1)
    decision[alive] = n_layers
    layer = n_layers - 1
    while layer >= 0 and alive.numel():
        k = max(1, min(layer + 1, math.ceil(ROWS / alive.numel())))  # layers done together
        low = layer - k + 1
        x = _head_input(an, resid[low : layer + 1, alive])
        hit = _hits(an, top, x.reshape(-1, x.shape[-1]), chosen[alive].repeat(k)).view(k, -1)
        keep = torch.ones_like(alive, dtype=torch.bool)
        for j in range(k - 1, -1, -1):
            keep &= hit[j]
            decision[alive[keep]] = low + j
        alive = alive[keep]
        layer = low - 1
    return [None if int(d) < 0 else int(d) for d in decision]


def _head_input(an: Anatomy, resid: Tensor) -> Tensor:
    x = an.final_norm(resid)
    return x * an.out_scale if an.out_scale != 1.0 else x


def asks_the_head(an: Anatomy) -> bool:
    """Whether top-1 tests go through the head itself rather than ``TopOne`` on its weight:
    a head with a bias or a soft-cap (whose float rounding can tie two saturated scores), and
    a quantised head (engine.quant: its own product, float32 logits on oneDNN, which a
    bfloat16 product of its dequantised weights could tie at a near-tie)."""
    head = an.head
    return (
        getattr(head, "bias", None) is not None
        or an.softcap is not None
        or getattr(head, "qweight", None) is not None
    )


def _hits(an: Anatomy, top: TopOne | None, x: Tensor, c: Tensor) -> Tensor:
    """Top-1 tests on head inputs ``x``, as the lens's argmax answers them (``top`` None: the
    head is asked in full, ``asks_the_head``)."""
    if top is None:
        return torch.cat([an.finish(an.head(part)).argmax(-1) for part in x.split(CHUNK)]) == c
    return top(x, c)
