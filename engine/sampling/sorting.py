"""A stable sort of score rows, the same values and order as ``torch.sort(x, dim=-1,
stable=True)`` gives, faster on the CPU for vocabulary-sized rows.

Why: on the CPU ``torch.sort`` of one float row runs a comparison sort (3.2 ms for SmolLM2's
49,152 tokens, 13.7 ms for Qwen's 151,936, on a 2-core Xeon), paid by every top-p, typical-p
and mirostat step. For a 1-D integer tensor of at least 32,768 elements it runs a parallel
radix sort instead (1.0 ms at 49,152). So each float is mapped to an int64 key whose order is
the float order (the sign-magnitude bits flipped for negatives, -0.0 taken as 0.0 and every
NaN as the largest, as the comparison sort takes them), and the keys are sorted: a radix sort
is stable, so tied scores keep their index order exactly as ``stable=True`` keeps it.
"""

from __future__ import annotations

import torch

RADIX_MIN = 32768  # torch sorts a 1-D integer tensor this long or longer by radix
_TOP = 2**31 - 1


def _keys(row: torch.Tensor, descending: bool) -> torch.Tensor:
    """int64 keys [n] >= 0 whose ascending order is ``row``'s order (descending: reversed)."""
    values = row.float() + 0.0  # -0.0 becomes 0.0: the two compare equal
    values = values.masked_fill(values.isnan(), float("nan"))  # one NaN, the sign bit clear
    bits = values.view(torch.int32).long()
    # negatives (bits >> 31 is all ones) flip their magnitude: ascending float <-> ascending
    # int. By bits: torch's CPU where on signs mixed at random took 418 us a 151,936 row, this 150
    ordered = bits ^ ((bits >> 31) & _TOP)
    return _TOP - ordered if descending else ordered + _TOP + 1


def stable_sort(x: torch.Tensor, descending: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """``torch.sort(x, dim=-1, descending=descending, stable=True)`` for x [rows, n]: the
    same sorted values and indices; by integer keys on the CPU where torch radix-sorts them."""
    if x.device.type != "cpu" or x.dim() != 2 or x.shape[-1] < RADIX_MIN:
        return torch.sort(x, dim=-1, descending=descending, stable=True)
    order = torch.stack([torch.sort(_keys(row, descending), stable=True)[1] for row in x])
    return x.gather(-1, order), order
