"""Attention of one query position: each head's weights, their average, and attention rollout
(Abnar & Zuidema, 2020): each layer's head-averaged matrix with the residual connection added
as the identity, rows renormalised, multiplied from the first layer to the last; the query's
row says how much of each input token reached it through every path."""

from __future__ import annotations

import torch
from torch import Tensor


def with_residual(mean: Tensor) -> Tensor:
    """A head-averaged attention matrix [T, T] with the identity added, rows summing to 1."""
    a = mean + torch.eye(mean.shape[0], dtype=mean.dtype, device=mean.device)
    return a / a.sum(dim=-1, keepdim=True)


def rollout_row(means: list[Tensor]) -> Tensor:
    """Row of the last position of (A_L ... A_1) with A_l = with_residual(means[l]): computed
    from the output down as a row vector times each matrix, [T]."""
    return rolled_out([with_residual(mean) for mean in means])


def rolled_out(matrices: list[Tensor]) -> Tensor:
    """Row of the last position of (A_L ... A_1), the A_l given with their residual and rows
    renormalised ([T, T] each, or their first T rows and columns)."""
    row = matrices[-1][-1]
    for a in reversed(matrices[:-1]):
        row = row @ a
    return row
