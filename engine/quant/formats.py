"""The two weight formats and the arithmetic that defines them, with the facts about PyTorch's
CPU kernels they are laid out for (torch 2.13, ``aten/src/ATen/native/cpu/int8mm_kernel.cpp``
and ``int4mm_kernel.cpp``):

* **int8, one scale per row** (``torch._weight_int8pack_mm(x, q, s)``): ``w = q * s`` with
  ``q`` int8 [N, K] and ``s`` [N]. Vectorised (AVX2 / AVX-512) only for bfloat16 ``x`` and
  ``s``; it reads 16 columns at a time with aligned loads, so K must be a multiple of 16 and
  ``x`` 32-byte aligned (a misaligned ``x`` crashes the process; ``engine.step.forward.mm``
  copies such an input first).
* **int4, asymmetric in groups of G along K** (``torch._weight_int4pack_mm_for_cpu(x, packed,
  G, sz)``, G in 32, 64, 128, 256): ``w = (q - 8) * scale + zero`` with ``q`` in 0..15 and
  ``sz`` [K / G, N, 2] holding (scale, zero) per group and row. Vectorised only for bfloat16
  ``x`` and ``sz``; the weights are packed once (``pack_int4``) into blocks of 64 rows on
  AVX-512 CPUs and 32 on AVX2, so the layout belongs to the machine and is never stored; N
  must be a multiple of 16.

Both kernels dequantise in float32, accumulate in float32 and round the output to bfloat16:
the rest of a quantised model's step runs in bfloat16 (``COMPUTE``). Scales and zeros are
bfloat16 too, and are rounded *before* the integers are chosen, so the integers are the best
ones for the scale the kernel will use.
"""

from __future__ import annotations

import torch
from torch import Tensor

INT8, INT4 = "int8", "int4"
KINDS = (INT8, INT4)
GROUP = 32  # int4 group size: the bundled GGUF's Q4 blocks are 32 wide too
COMPUTE = torch.bfloat16  # the kernels' activation, scale and output dtype
ROW_BLOCK = 64  # int4 rows are packed in blocks of 64 (AVX-512) or 32 (AVX2): cut at 64s
_PACK_ROWS = 64 * 128  # rows packed per call (the packing op takes int32 [rows, K])


def int8_refusal(n: int, k: int) -> str | None:
    """Why an [n, k] matrix cannot be int8 here, or None."""
    if k % 16:
        return f"{k} columns is not a multiple of 16 (the int8 kernel reads 16 at a time)"
    return None


def int4_refusal(n: int, k: int, group: int = GROUP) -> str | None:
    """Why an [n, k] matrix cannot be int4 in groups of ``group`` here, or None."""
    if k % group:
        return f"{k} columns is not a multiple of the group size {group}"
    if n % 16:
        return f"{n} rows is not a multiple of 16 (the int4 kernel's smallest row block)"
    return None


def quantize_int8(w: Tensor) -> tuple[Tensor, Tensor]:
    """w [N, K] -> (q int8 [N, K], s bfloat16 [N]): symmetric, one scale per row, |q| <= 127
    (-128 only where the bfloat16 rounding of s shrank the scale)."""
    w = w.float().contiguous()
    s = (w.abs().amax(1) / 127.0).to(COMPUTE)
    safe = torch.where(s == 0, torch.ones_like(s), s).float()
    q = torch.round(w / safe[:, None]).clamp(-128, 127).to(torch.int8)
    return q, s


def dequantize_int8(q: Tensor, s: Tensor) -> Tensor:
    """The float32 weights the int8 kernel multiplies by: q * s."""
    return q.float() * s.float()[:, None]


def int4_groups(scale: Tensor, offset: Tensor) -> Tensor:
    """Per group ``w = scale * u + offset`` (u in 0..15, the GGUF way and ours) -> the kernel's
    (scale, zero) pairs with ``w = (u - 8) * scale + zero``: zero = offset + 8 scale.
    scale, offset: [N, K / G] -> sz bfloat16 [K / G, N, 2]."""
    zero = offset.float() + 8.0 * scale.float()
    return torch.stack((scale.float(), zero), -1).transpose(0, 1).contiguous().to(COMPUTE)


def quantize_int4(w: Tensor, group: int = GROUP) -> tuple[Tensor, Tensor]:
    """w [N, K] -> (u uint8 [N, K] in 0..15, sz bfloat16 [K / group, N, 2]): asymmetric,
    min to max of each group in 15 steps, rounded to the nearest level."""
    n, k = w.shape
    g = w.float().contiguous().reshape(n, k // group, group)
    lo, hi = g.amin(-1), g.amax(-1)
    sz = int4_groups((hi - lo) / 15.0, lo)  # rounded to bfloat16 here, before choosing u
    scale, zero = sz[..., 0].float().t(), sz[..., 1].float().t()  # [N, K / group]
    safe = torch.where(scale == 0, torch.ones_like(scale), scale)
    u = torch.round((g - zero[..., None]) / safe[..., None] + 8.0).clamp(0, 15)
    return u.reshape(n, k).to(torch.uint8), sz


def dequantize_int4(u: Tensor, sz: Tensor) -> Tensor:
    """The float32 weights the int4 kernel multiplies by: (u - 8) * scale + zero."""
    n, k = u.shape
    groups = sz.shape[0]
    scale = sz[..., 0].float().t().reshape(n, groups, 1)
    zero = sz[..., 1].float().t().reshape(n, groups, 1)
    w = (u.float().reshape(n, groups, k // groups) - 8.0) * scale + zero
    return w.reshape(n, k)


def pack_int4(u: Tensor) -> Tensor:
    """u uint8 [N, K] in 0..15 -> the int4 kernel's packed uint8 [N, K / 2] for this CPU, a
    few thousand rows at a time (the packing op wants them as int32)."""
    parts = [
        torch.ops.aten._convert_weight_to_int4pack_for_cpu(u[r : r + _PACK_ROWS].int(), 1)
        for r in range(0, u.shape[0], _PACK_ROWS)
    ]
    return parts[0] if len(parts) == 1 else torch.cat(parts)


def nibbles(u: Tensor) -> Tensor:
    """u uint8 [N, K] in 0..15 -> two per byte [N, K / 2] (low nibble first): how the int4
    integers are kept in a cache file, independent of the CPU's packed layout."""
    return u[:, 0::2] | (u[:, 1::2] << 4)


def from_nibbles(b: Tensor) -> Tensor:
    """The inverse of ``nibbles``: [N, K / 2] -> u uint8 [N, K]."""
    return torch.stack((b & 15, b >> 4), -1).reshape(b.shape[0], -1)
