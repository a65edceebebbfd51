"""Direct logit attribution: the residual stream at the output is the embedding plus what every
attention and MLP block added, so with the final norm's scale frozen at its value for this
position the logit difference of two tokens is a sum of one term per block (plus the biases).

The final norm is recognised from its own output rather than from its class: LayerNorm (centred,
with a bias), RMSNorm with weight w, or Gemma's with (1 + w); the scale is computed from the
residual and the form that reproduces the module's output is used."""

from __future__ import annotations

import torch
from torch import Tensor

from engine.errors import InternalsUnavailable
from engine.internals.anatomy import Anatomy


def frozen_norm(norm: torch.nn.Module, h: Tensor) -> tuple[Tensor, bool, Tensor]:
    """(gain, centred, bias) with ``norm(h) == centre(h) * gain + bias`` for this ``h`` [d],
    where ``gain`` already holds the scale computed from ``h``: applied to any other vector it
    is the norm with that scale frozen."""
    h = h.float()
    out = norm(h[None])[0].float()
    eps = getattr(norm, "eps", getattr(norm, "variance_epsilon", None))
    weight = getattr(norm, "weight", None)
    if eps is None or weight is None:
        raise InternalsUnavailable(f"The final norm ({type(norm).__name__}) is not one I know.")
    w = weight.float()
    b = getattr(norm, "bias", None)
    bias = b.float() if b is not None else torch.zeros_like(h)
    rtol = 1e-4 if weight.dtype == torch.float32 else 2e-2  # a bf16 model's norm rounds
    atol = rtol * 0.1 * float(out.abs().max())
    for centred in (False, True):
        x = h - h.mean() if centred else h
        scale = torch.rsqrt(x.pow(2).mean() + eps)
        for gain in (w, 1.0 + w):
            g = gain * scale
            if torch.allclose(x * g + bias, out, rtol=rtol, atol=atol):
                return g, centred, bias
    raise InternalsUnavailable(
        f"The final norm ({type(norm).__name__}) does not match LayerNorm or RMSNorm, so its "
        "output cannot be split over the blocks."
    )


def split_logit_difference(
    an: Anatomy, resid: Tensor, mids: Tensor, token: int, rival: int
) -> tuple[Tensor, float, float]:
    """(per-block terms [L, S], embedding term, bias term) of logit(token) - logit(rival) at one
    position: ``resid`` [L + 1, d] (before each block, then the final norm's input) and ``mids``
    [L, S - 1, d] (after each sub-block but the last)."""
    resid, mids = resid.float(), mids.float()
    gain, centred, bias = frozen_norm(an.final_norm, resid[-1])
    w = an.head.weight
    u = (w[token].float() - w[rival].float()) * an.out_scale * gain  # [d]
    if centred:  # (x - mean(x)) . u == x . (u - mean(u))
        u = u - u.mean()
    # the residual at each read point: before block l, after its sub-blocks, after it
    points = torch.cat([resid[:-1, None], mids, resid[1:, None]], dim=1)  # [L, S + 1, d]
    blocks = (points[:, 1:] - points[:, :-1]) @ u  # [L, S]
    embedding = float(resid[0] @ u)
    wdiff = (w[token].float() - w[rival].float()) * an.out_scale
    bias_term = float(bias @ wdiff)
    head_bias = getattr(an.head, "bias", None)
    if head_bias is not None:
        bias_term += float(head_bias[token] - head_bias[rival])
    return blocks, embedding, bias_term
