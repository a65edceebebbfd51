"""What a ``Step`` record says about a token, computed on the model's device and copied to
the host in one go: the top-N candidates with their raw and processed probabilities (and the
stage that cut each), the chosen token's probability and rank, how many tokens could have been
picked, and the entropy before and after the sampler."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

LN2 = math.log(2.0)


@dataclass(frozen=True)
class Measured:
    """The host copy of one row's numbers."""

    token_id: int
    raw_prob: float  # of the chosen token, softmax of the raw logits
    prob: float  # of the chosen token, after the chain
    rank: int  # 1-based, in the raw distribution
    survivors: int  # tokens with probability > 0 after the chain
    entropy_raw: float  # bits
    entropy: float  # bits
    finite: bool  # the logits had no NaN or inf
    top_ids: tuple[int, ...]  # top-N by raw probability
    top_raw: tuple[float, ...]
    top_prob: tuple[float, ...]
    top_cut: tuple[int, ...]  # index of the chain stage that removed each, -1 if kept
    top_extra: tuple[tuple[float, ...], ...] = ()  # each ``at_top`` row read at top_ids
    extra: tuple[float, ...] = ()  # the ``extra`` block's row


def measure(
    logits: torch.Tensor,
    probs: torch.Tensor,
    tokens: torch.Tensor,
    top_n: int,
    cut: torch.Tensor | None = None,
    finite: torch.Tensor | None = None,
    at_top: Sequence[torch.Tensor] = (),
    extra: torch.Tensor | None = None,
) -> list[Measured]:
    """logits, probs: [rows, vocab] (raw logits; probabilities after the chain); tokens: [rows]
    the chosen ids; cut: [rows, vocab] stage indices from the chain; finite: [rows] bool (default:
    checked on ``logits``); at_top: more [rows, vocab] tensors to read at the top-N ids (what the
    penalties did); extra: [rows, k] numbers to bring along (the stages' notes). One
    device-to-host copy for all rows."""
    rows = logits.shape[0]
    n = min(top_n, logits.shape[-1])
    raw_logp = F.log_softmax(logits, dim=-1)
    raw = raw_logp.exp()
    top_raw, top_ids = torch.topk(raw, n, dim=-1)  # [rows, n]
    tok = tokens.reshape(rows, 1).to(logits.device)
    chosen_raw = raw.gather(1, tok)  # [rows, 1]
    if finite is None:
        finite = torch.isfinite(logits).all(dim=-1)
    top_cut = cut.gather(1, top_ids) if cut is not None else torch.full_like(top_ids, -1)
    # float64 keeps token ids exact; entropy of a one-hot row is -0.0: clamp_min keeps -0.0,
    # adding 0.0 makes it 0.0 (the window printed "-0.00 bits")
    columns = [
        tok,
        chosen_raw,
        probs.gather(1, tok),
        (raw > chosen_raw).sum(1, keepdim=True) + 1,
        (probs > 0).sum(1, keepdim=True),
        (-torch.xlogy(raw, raw).sum(1, keepdim=True) / LN2).clamp_min(0) + 0.0,
        (-torch.xlogy(probs, probs).sum(1, keepdim=True) / LN2).clamp_min(0) + 0.0,
        finite.reshape(rows, 1),
        top_ids,
        top_raw,
        probs.gather(1, top_ids),
        top_cut,
        *(t.gather(1, top_ids) for t in at_top),
    ]
    if extra is not None:
        columns.append(extra.reshape(rows, -1))
    packed = torch.cat([c.double() for c in columns], dim=1).tolist()  # the one copy
    out = []
    for row in packed:
        tops = row[8:]
        out.append(
            Measured(
                token_id=int(row[0]),
                raw_prob=row[1],
                prob=row[2],
                rank=int(row[3]),
                survivors=int(row[4]),
                entropy_raw=row[5],
                entropy=row[6],
                finite=row[7] == 1.0,
                top_ids=tuple(int(i) for i in tops[:n]),
                top_raw=tuple(tops[n : 2 * n]),
                top_prob=tuple(tops[2 * n : 3 * n]),
                top_cut=tuple(int(i) for i in tops[3 * n : 4 * n]),
                top_extra=tuple(tuple(tops[(4 + j) * n : (5 + j) * n]) for j in range(len(at_top))),
                extra=tuple(tops[(4 + len(at_top)) * n :]),
            )
        )
    return out
