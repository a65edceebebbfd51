"""The output head's int8 product through oneDNN's int8 matrix multiply, where it runs here.

Why the head: it is the largest matrix a token reads (Qwen2.5's 151,936 x 896, 136 MB in
int8), and PyTorch's weight-only int8 kernel (``torch._weight_int8pack_mm``) is bound by its
arithmetic, not by memory, on the CPU it runs on: 27.5 ms on one thread and 13.2 on two for
that head on the 2-core Xeon the bench ran on (the weights fresh from memory or not alike).
It also rounds its output to bfloat16, so logits of 10-20 come out in steps of 0.03-0.06.
oneDNN's int8 matmul multiplies the same int8 weights with VNNI / AMX instructions, in 9.7 ms
there, and gives float32.

It multiplies 8-bit integers by 8-bit integers, so the activations must be integers too.
Rounding a hidden state to 8 bits per token loses too much (its largest element is 7-18x its
RMS: the KL of SmolLM2's head to float32 went 0.0013 -> 0.0040 nats), so each row ``x`` goes
in as two int8 planes, ``x = s (hi + lo / 254)`` with ``s = max|x| / 127``, ``hi = round(x /
s)`` and ``lo = round((x / s - hi) * 254)``: the error is at most ``s / 508`` an element, and
the integer products are exact (int32), combined in float32. Against a float64 product of the
same int8 weights the relative error is 2.6e-4 (8.4e-5 without an outlier), against 2.4e-3 for
the bfloat16 kernel's; for a row whose largest element is over ~130x its RMS the two planes
are coarser than bfloat16 for the small elements (not the case for a normed hidden state).
The planes cost ~30 us a product, which is why the layers (~100 smaller products a token,
where oneDNN's integer kernel is no faster) stay on PyTorch's kernels.

The packed weights are oneDNN's blocked layout for this CPU and replace the plain copy (one
copy of the head in memory); ``unpack`` gives the plain integers back for a cache file or the
Inside tab. Used only where the CPU has VNNI or AMX (without them oneDNN's u8 x s8 arithmetic
can saturate 16-bit sums) and a probe with the largest values agrees with a float64 product;
``DECODING_LAB_ONEDNN_INT8=0`` turns it off (the bench's A/B)."""

from __future__ import annotations

import functools
import logging

import torch
from torch import Tensor

from engine.models.device import cpu_flags, switched_off
from engine.step.kernels import int8_onednn

log = logging.getLogger(__name__)

_FLAGS = ("avx512_vnni", "avx_vnni", "amx_int8")


def _cpu_has_int8_dot() -> bool:
    """Whether the CPU reports VNNI or AMX int8 (elsewhere than Linux: unknown, so no)."""
    return any(f in cpu_flags() for f in _FLAGS)


def pack(q: Tensor) -> Tensor:
    """int8 [N, K] -> oneDNN's packed weight for this CPU (an opaque tensor, shape [K, N])."""
    return torch.ops.onednn.qlinear_prepack(q.contiguous(), None)


def unpack(packed: Tensor) -> Tensor:
    """The plain int8 [N, K] of a ``pack``ed weight."""
    return packed.to_dense().t().contiguous()


def _probe_agrees() -> bool:
    """A product with the largest integers either plane can hold, and a random one, against
    float64: a kernel that saturates or mis-rounds shows here."""
    gen = torch.Generator().manual_seed(0)
    n, k = 48, 256
    q = torch.randint(-127, 128, (n, k), generator=gen, dtype=torch.int8)
    q[0] = 127
    q[1] = -127
    s = torch.rand(n, generator=gen) * 0.01 + 1e-3
    x = torch.randn(3, k, generator=gen)
    x[0] = 1.0  # hi = 127 everywhere
    x[1] = torch.where(torch.arange(k) % 2 == 0, 1.0, 1.0 - 0.5 / 127)  # lo = +-127 too
    got = int8_onednn(x, pack(q), s).double()
    want = x.double() @ (q.double() * s.double()[:, None]).t()
    return bool(((got - want).abs() <= 1e-4 * want.abs().amax() + 1e-6).all())


@functools.cache
def usable() -> bool:
    """Whether the head's int8 product goes through oneDNN here (see the module doc)."""
    if switched_off("DECODING_LAB_ONEDNN_INT8"):
        return False
    try:
        torch.ops.onednn.qlinear_prepack  # noqa: B018 - raises when the op is missing
        if not (torch.backends.mkldnn.is_available() and _cpu_has_int8_dot()):
            return False
        if _probe_agrees():
            return True
        log.warning("oneDNN's int8 product disagrees with float64 here; the head stays on "
                    "PyTorch's int8 kernel")  # fmt: skip
    except (AttributeError, RuntimeError, NotImplementedError) as exc:
        log.info("oneDNN's int8 product is not available here: %s", exc)
    return False
