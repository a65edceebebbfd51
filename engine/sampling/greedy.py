"""A greedy step's three passes over the vocabulary: temperature 0's scores (the first
maximum kept), their probabilities, and the pick, each one op of the lab's on float32 CPU
rows (``engine/quant/csrc/greedy.cpp``) where torch takes several: max, full_like, gather and
scatter; a softmax; max again. On SmolLM2's 49,152 tokens, warm, 2-core Xeon: 28, 25 and 23
us in torch, each a few in the op; more just after a forward pass has streamed the weights
through the caches (resources/notes/quantized-weights.md, "Stop 46").

Each gives torch's own numbers: the first maximum as ``max(dim=-1)`` finds it (a NaN is the
maximum; a row of -inf gives index 0), and a row with one finite score left is one-hot, as
torch's softmax makes it (e^0 / 1, and e^-inf = 0). ``tests/engine/test_greedy_ops.py`` holds
them to torch's operations. Other devices and dtypes, and machines without the build, run
torch's."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from engine.sampling.base import NEG_INF


def _lab(x: torch.Tensor) -> bool:
    from engine.quant import native

    return native.takes_rows(x)


def keep_first_max(scores: torch.Tensor) -> torch.Tensor:
    """[rows, vocab] -> each row's first maximal score kept, every other -inf."""
    if _lab(scores):
        return torch.ops.decoding_lab.keep_first_max(scores.contiguous())
    first = scores.max(dim=-1, keepdim=True).indices
    return torch.full_like(scores, NEG_INF).scatter_(-1, first, scores.gather(-1, first))


def softmax(scores: torch.Tensor) -> torch.Tensor:
    """``F.softmax(scores, dim=-1)``; one-hot rows without the exponentials where every row
    has one finite score left (a greedy chain's, or top-k 1's)."""
    if _lab(scores):
        one_hot = torch.ops.decoding_lab.one_hot_probs(scores.contiguous())
        if one_hot.numel() > 0:
            return one_hot
    return F.softmax(scores, dim=-1)


def first_max(probs: torch.Tensor) -> torch.Tensor:
    """probs [vocab] -> [1]: the index of the first maximum (``probs.max(-1).indices``)."""
    row = probs.reshape(1, -1)
    if _lab(row):
        return torch.ops.decoding_lab.first_max(row.contiguous())
    return probs.max(-1).indices.reshape(1)
