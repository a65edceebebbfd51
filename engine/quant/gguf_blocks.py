"""A GGUF file's 4-bit blocks read as integers and group scales, without dequantising them, so
that ``engine.quant.formats.int4_groups`` can hand them to the int4 kernel as they are.

The block layouts (llama.cpp's ``ggml-common.h`` / ``ggml-quants.c``; each row of a matrix is
a run of blocks along K; half-precision numbers are IEEE float16):

* ``Q4_0``, 18 bytes per 32 weights: d, then 16 bytes of nibbles; weight j (j < 16) is the low
  nibble of byte j, weight j + 16 its high nibble; w = d * (u - 8).
* ``Q4_1``, 20 bytes per 32: d, m, 16 bytes of nibbles as Q4_0; w = d * u + m.
* ``Q4_K``, 144 bytes per 256: d, dmin, 12 bytes holding eight 6-bit scales and eight 6-bit
  mins, 128 bytes of nibbles; sub-blocks of 32, two per 32-byte run (low nibbles first);
  w = d * scale_i * u - dmin * min_i. Scales and mins 0-3 are the low 6 bits of bytes 0-3 and
  4-7; 4-7 take their low 4 bits from bytes 8-11 (scales: low nibble, mins: high nibble) and
  their top 2 bits from the top bits of bytes 0-3 (scales) and 4-7 (mins).

All three are ``w = scale * u + offset`` per group of 32 with u in 0..15: exactly the int4
kernel's form once offset + 8 scale is its zero. The integers go to the kernel unchanged; the
float16 scale and zero become bfloat16 (the only scale type the kernel vectorises), a relative
change of at most 2^-9 in each, far inside the 4-bit step. Every other type has no 4-bit
kernel here.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

# type name -> (weights per block, bytes per block)
BLOCKS = {"Q4_0": (32, 18), "Q4_1": (32, 20), "Q4_K": (256, 144)}
FOUR_BIT = tuple(BLOCKS)


def _half(raw: Tensor) -> Tensor:
    """[..., 2] little-endian bytes -> float32 [...] (IEEE half)."""
    return raw.contiguous().view(torch.float16).squeeze(-1).float()


def _low_high(qs: Tensor) -> Tensor:
    """[..., 16 or 32] bytes -> [..., 32 or 64] nibbles: all low nibbles, then all high."""
    return torch.cat((qs & 15, qs >> 4), -1)


def read_blocks(data: np.ndarray, kind: str, n: int, k: int) -> tuple[Tensor, Tensor, Tensor]:
    """One matrix's raw bytes [n, bytes per row] in format ``kind`` -> (u uint8 [n, k] in
    0..15, scale and offset float32 [n, k / 32]) with w = scale * u + offset. The shape is
    checked against the format before anything is read (a file is hostile until then)."""
    per, size = BLOCKS[kind]
    if k % per or data.dtype != np.uint8 or data.shape != (n, k // per * size):
        raise ValueError(
            f"a {kind} matrix of {n} x {k} should be {n} x {k // per * size} bytes, "
            f"got {data.shape} {data.dtype}"
        )
    # a copy: the reader's memory map is read-only
    raw = torch.from_numpy(np.array(data, copy=True)).reshape(n, k // per, size)
    if kind == "Q4_K":
        return _q4_k(raw, n, k)
    d = _half(raw[..., 0:2])  # [n, blocks]
    if kind == "Q4_0":
        u, offset = _low_high(raw[..., 2:18]), -8.0 * d
    else:
        u, offset = _low_high(raw[..., 4:20]), _half(raw[..., 2:4])
    return u.reshape(n, k), d, offset


def _six_bit(packed: Tensor) -> tuple[Tensor, Tensor]:
    """Q4_K's 12 bytes [..., 12] -> (scales, mins), each [..., 8] in 0..63."""
    a, b, c = packed[..., 0:4], packed[..., 4:8], packed[..., 8:12]
    scales = torch.cat((a & 63, (c & 15) | ((a >> 6) << 4)), -1)
    mins = torch.cat((b & 63, (c >> 4) | ((b >> 6) << 4)), -1)
    return scales, mins


def _q4_k(raw: Tensor, n: int, k: int) -> tuple[Tensor, Tensor, Tensor]:
    d, dmin = _half(raw[..., 0:2]), _half(raw[..., 2:4])  # [n, super-blocks]
    scales, mins = _six_bit(raw[..., 4:16])  # [n, super, 8]
    runs = raw[..., 16:144].reshape(n, -1, 4, 32)  # four 32-byte runs, two sub-blocks each
    u = torch.stack((runs & 15, runs >> 4), 3)  # [n, super, 4, 2, 32]: sub-block 2r, 2r + 1
    scale = d[..., None] * scales.float()  # [n, super, 8]
    offset = -dmin[..., None] * mins.float()
    return u.reshape(n, k), scale.reshape(n, -1), offset.reshape(n, -1)
