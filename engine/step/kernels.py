"""The matrix products of a step, ``x @ w.T``, for every kind of weight the step holds: float
weights (oneDNN on the CPU, where ``engine.step.fastpath.prepared`` chose it, else
``torch.matmul``) and the quantised ones of ``engine.quant`` (int8 per row, int4 in groups),
told apart by the weight's dtype. Written in the subset of Python TorchScript reads: the fast
step (``engine.step.forward``) and the quantised modules (``engine.quant.linear``) both call
these, so the two cannot disagree."""

from __future__ import annotations

import contextlib

import torch
from torch import Tensor

# TorchScript's name for its Scalar type (int or float), which the oneDNN op's argument list
# takes; to Python (and to type checkers) it is a float.
number = float

# The lab's own CPU ops (engine/quant/native.py builds them where it can: the int8 / int4
# products, a layer's steps, a step's vocabulary passes): their schemas defined here, whether
# or not they are built, so that TorchScript can compile ``mm`` everywhere (a weight in their
# layout exists only where they run). The whole token's step (csrc/step.cpp's Decoder class,
# engine.step.fastpath) is registered by the library itself.
_LIBRARY = torch.library.Library("decoding_lab", "FRAGMENT")
SCHEMAS = (
    "int8_mm(Tensor x, Tensor w, Tensor s) -> Tensor",
    "int4_mm(Tensor x, Tensor w, Tensor sz) -> Tensor",
    # one decoder layer's small steps for one token (csrc/layer.cpp; engine.step.forward)
    "rms_norm(Tensor x, Tensor w, float eps) -> Tensor",
    "add_rms_norm(Tensor x, Tensor a, Tensor w, float eps) -> (Tensor, Tensor)",
    "silu_mul(Tensor u) -> Tensor",
    "rope_kv(Tensor qkv, Tensor cos, Tensor sin, Tensor(a!) k_all, Tensor(b!) v_all, "
    "int layer, Tensor pos, int n_heads, int n_kv, int rot) -> Tensor",
    "decode_attention(Tensor q, Tensor k_all, Tensor v_all, int layer, int attn_len, "
    "float scale, bool sdpa_rounding=False) -> Tensor",
    # one layer of the Decoder's (csrc/step.cpp), for the tests
    "decode_layer(Tensor x, Tensor[] w, int[] slots, int layer, Tensor pos, Tensor cos, "
    "Tensor sin, Tensor(a!) k_all, Tensor(b!) v_all, int attn_len, int n_heads, int n_kv, "
    "int rot, float eps, float scale, bool onednn) -> Tensor",
    # a step record's numbers from the logits and probabilities (csrc/stats.cpp;
    # engine.decode.measure)
    "step_stats(Tensor logits, Tensor probs, Tensor tokens, int n, Tensor cut, Tensor finite) "
    "-> Tensor",
    "all_finite(Tensor x) -> Tensor",
    # a greedy step's record whole (csrc/greedy.cpp; engine.decode.measure.greedy_measured)
    "greedy_stats(Tensor logits, int n, Tensor finite) -> Tensor",
    # what a sampler stage cut (csrc/stats.cpp; engine.sampling.chain); greedy's stage,
    # probabilities and pick (csrc/greedy.cpp; engine.sampling.greedy)
    "stage_cut(Tensor before, Tensor after, Tensor(a!) cut, int stage, bool binding) -> Tensor",
    "first_max(Tensor x) -> Tensor",
    "keep_first_max(Tensor x) -> Tensor",
    "one_hot_probs(Tensor x) -> Tensor",
)
for _schema in SCHEMAS:
    with contextlib.suppress(RuntimeError):  # defined already (a module reloaded)
        _LIBRARY.define(_schema)


def linear(x: Tensor, w: Tensor, onednn: bool) -> Tensor:
    """``x @ w.T`` for float weights: through oneDNN where ``engine.step.fastpath.prepared``
    chose it (``w`` then in the layout it prepared: bfloat16 matrices are packed), else
    ``torch.matmul``."""
    if onednn:
        no_scalars: list[number | None] = []  # the op's Scalar?[] argument, typed for TorchScript
        return torch.ops.mkldnn._linear_pointwise(x, w, None, "none", no_scalars, "")
    return torch.matmul(x, w.t())


def int8_onednn(x: Tensor, w: Tensor, s: Tensor) -> Tensor:
    """``x @ w.T`` for int8 weights packed for oneDNN (``engine.quant.onednn``, which says
    why; ``w`` [K, N]), ``s`` their row scales: each row of ``x`` as two int8 planes, ``x = r
    (hi + lo / 254)``, one integer product for both, combined in float32. Gives float32 [n, N].
    256 rows at a time, so scoring a long text through the head holds [512, N] of products,
    not [2n, N]. A row whose largest element is under 1e-30 comes out as zeros."""
    n = x.shape[0]
    out = torch.empty(n, w.shape[1], dtype=torch.float32, device=x.device)
    scales = s.float()
    zero_points = torch.zeros(0, dtype=torch.int64)
    no_scalars: list[number | None] = []  # the op's Scalar?[] argument, typed for TorchScript
    for start in range(0, n, 256):
        xf = x[start : start + 256].float()
        rows = xf.shape[0]
        r = xf.abs().amax(-1, keepdim=True).clamp_min(1e-30) / 127.0
        a = xf / r  # within [-127, 127]
        hi = a.round()
        q = torch.cat((hi, ((a - hi) * 254.0).round())).to(torch.int8)  # |lo| <= 127
        y = torch.ops.onednn.qlinear_pointwise(
            q, 1.0, 0, w, scales, zero_points, None, 1.0, 0, torch.float32, "none",
            no_scalars, "",
        )  # fmt: skip
        part = out[start : start + rows]
        torch.add(y[:rows], y[rows:], alpha=1.0 / 254.0, out=part)
        part.mul_(r)
    return out


def mm(x: Tensor, w: Tensor, s: Tensor, onednn: bool) -> Tensor:
    """``x @ w.T`` for x [n, K] and any weight: ``s`` empty for float weights; for int8 ``w``
    [N, K] its row scales [N]; for int4 ``w`` (uint8, packed) its (scale, zero) pairs
    [K / group, N, 2]; weights in the lab's own layouts (rank 3, ``engine.quant.native``) go
    to its kernels. Quantised products take and give bfloat16 (engine.quant.formats), but for
    int8 weights packed for oneDNN (an output head, ``engine.quant.onednn``), which give
    float32."""
    if s.numel() == 0:
        return linear(x, w, onednn)
    if w.is_mkldnn:
        return int8_onednn(x, w, s)
    if w.dim() == 3:
        if w.dtype == torch.int8:
            return torch.ops.decoding_lab.int8_mm(x.contiguous(), w, s)
        return torch.ops.decoding_lab.int4_mm(x.contiguous(), w, s)
    if w.dtype == torch.int8:
        # the int8 kernel loads 16 bfloat16 activations at a time with aligned loads: a view
        # that does not start on a 32-byte boundary would crash the process, so copy it
        if not x.is_contiguous() or (x.storage_offset() * x.element_size()) % 32 != 0:
            x = x.clone(memory_format=torch.contiguous_format)
        return torch.ops.aten._weight_int8pack_mm(x, w, s)
    group = x.shape[1] // s.shape[0]
    return torch.ops.aten._weight_int4pack_mm_for_cpu(x.contiguous(), w, group, s)
