"""``QuantLinear``: a model's linear layer with int8 or int4 weights, so that ``model.forward``
(beam search, the tree, scoring, ``transformers.generate``) runs the quantised model through
the same kernels as the fast step (``engine.step.kernels.mm``); and ``fuse``, which joins
q/k/v (or gate/up) into one matrix for the fast step while the layers keep views into it."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from engine.quant import native, onednn
from engine.quant.formats import COMPUTE, INT4, INT8, ROW_BLOCK
from engine.step.kernels import mm


def _aligned(t: Tensor) -> Tensor:
    """``t`` on a 64-byte boundary, copied if it is not: the int8 kernel reads weights and
    scales with aligned vector loads, and a tensor read from a file (safetensors keeps 8-byte
    offsets) can start anywhere; a misaligned one crashes the process."""
    t = t.contiguous()
    return t if t.data_ptr() % 64 == 0 else t.clone()


class QuantLinear(nn.Module):
    """``y = x @ W.T + b`` with W int8 per row (``qweight`` int8 [N, K], ``scales`` [N]) or
    int4 in groups (``qweight`` packed uint8 [N, K / 2], ``scales`` [K / G, N, 2]), or either
    in the lab's own layouts (``engine.quant.native``: rank 3; int8 ones are viewed so here
    wherever those kernels run). The input is cast to bfloat16 for the kernel and the output
    back to the input's dtype, except where the product gives float32 (an int8 head, ``as_head``:
    logits stay float32).
    ``origin`` says where the integers came from (rounded here, or a GGUF file's own blocks)."""

    def __init__(
        self, qweight: Tensor, scales: Tensor, bias: Tensor | None, in_features: int,
        origin: str = "",
    ) -> None:  # fmt: skip
        super().__init__()
        self.kind = INT8 if qweight.dtype == torch.int8 else INT4
        self.in_features = in_features
        self.out_features = qweight.shape[0]
        if self.kind == INT8 and qweight.dim() == 2 and native.takes_int8(in_features):
            qweight = qweight.reshape(self.out_features, in_features // 32, 32)
        self.origin = origin
        self.register_buffer("qweight", _aligned(qweight))
        self.register_buffer("scales", _aligned(scales))
        self.bias = None if bias is None else nn.Parameter(bias.to(COMPUTE), requires_grad=False)
        self._dequantised: Tensor | None = None

    def extra_repr(self) -> str:
        where = ", on oneDNN" if self.on_onednn else ""
        return f"{self.in_features} -> {self.out_features}, {self.kind}, {self.origin}{where}"

    def forward(self, x: Tensor) -> Tensor:
        shape = x.shape
        x2 = x.reshape(-1, self.in_features).to(COMPUTE)
        y = mm(x2, self.qweight, self.scales.contiguous(), False)  # [rows, N]
        if self.bias is not None:
            y = y + self.bias
        y = y.reshape(*shape[:-1], self.out_features)
        return y if y.dtype == torch.float32 else y.to(x.dtype)

    @property
    def on_native(self) -> bool:
        """Whether the product runs on the lab's own kernels (``engine.quant.native``)."""
        return self.qweight.dim() == 3

    @property
    def on_onednn(self) -> bool:
        """Whether the product runs on oneDNN's int8 matmul (``use_onednn``)."""
        return self.qweight.is_mkldnn

    def use_onednn(self) -> bool:
        """Hand this int8 matrix's product to oneDNN (``engine.quant.onednn``) where that runs
        here: the integers re-laid in its packed layout in place of the plain ones (one copy),
        the scales in float32 (the same values). True when it now runs there."""
        if self.kind != INT8 or self.on_onednn or not onednn.usable():
            return self.on_onednn
        self.qweight = onednn.pack(self.qweight.reshape(self.out_features, -1))
        self.scales = self.scales.float()
        return True

    def as_head(self) -> str:
        """Make this int8 matrix's product give float32 (an output head: logits are not
        rounded to bfloat16's steps), on the lab's kernel where it runs (float32 scales: the
        same values), else on oneDNN's int8 matmul where that runs. Says which ("" where the
        product stays PyTorch's bfloat16 one)."""
        if self.kind != INT8:
            return ""
        if self.on_native:
            self.scales = self.scales.float()
            return "the lab's kernel"
        return "oneDNN's int8 matmul" if self.use_onednn() else ""

    def stored(self) -> tuple[Tensor, Tensor]:
        """(integers, scales) as a cache file keeps them, whatever kernel runs them now:
        int8 plain [N, K] with bfloat16 scales; int4 in the kernel's layout."""
        if self.kind == INT8 and self.on_native:
            return self.qweight.reshape(self.out_features, -1), self.scales.to(COMPUTE)
        if not self.on_onednn:
            return self.qweight, self.scales
        return onednn.unpack(self.qweight), self.scales.to(COMPUTE)

    @property
    def weight(self) -> Tensor:
        """The weights the kernel multiplies by, dequantised to bfloat16 [N, K] (computed on
        first use and kept: the Inside tab reads the unembedding this way). The int4 values
        come out of the kernel itself, multiplied by the identity, so they are what it uses
        whatever its packed layout."""
        if self._dequantised is None:
            with torch.inference_mode(False), torch.no_grad():
                self._dequantised = self._dequantise()
        return self._dequantised

    def _dequantise(self) -> Tensor:
        if self.kind == INT8:
            q, s = self.stored()
            return (q.float() * s.float()[:, None]).to(COMPUTE)
        k = self.in_features
        eye = torch.eye(k, dtype=COMPUTE)
        cols = [mm(eye[r : r + 256], self.qweight, self.scales.contiguous(), False)
                for r in range(0, k, 256)]  # fmt: skip
        return torch.cat(cols).t().contiguous()  # [K, N] -> [N, K]

    def nbytes(self) -> int:
        """Bytes the kernel reads per product: the integers and their scales."""
        b = 0 if self.bias is None else self.bias.numel() * self.bias.element_size()
        scales = self.scales.numel() * self.scales.element_size()
        return self.qweight.numel() * self.qweight.element_size() + scales + b


def fuse(mods: list[QuantLinear]) -> tuple[Tensor, Tensor] | None:
    """One (weights, scales) pair for layers that multiply the same input (q, k, v), rows
    stacked; each layer's buffers become views into it, so nothing is kept twice. None when
    the layers cannot share one product (different formats or groups, or int4 row counts that
    do not fall on the packed layout's row blocks)."""
    first = mods[0]
    done = getattr(first, "_fused_into", None)
    if done is not None and all(getattr(m, "_fused_into", None) is done for m in mods):
        return done
    same = all(m.kind == first.kind and m.in_features == first.in_features for m in mods)
    same = same and not any(m.on_onednn for m in mods)  # a head's layout: never fused
    same = same and len({m.on_native for m in mods}) == 1
    groups_axis = 2 if first.on_native else 0  # int4 scales: [N, 2, G] or [G, N, 2]
    if not same or (first.kind == INT4 and len({m.scales.shape[groups_axis] for m in mods}) > 1):
        return None
    aten_int4 = first.kind == INT4 and not first.on_native
    if aten_int4 and any(m.out_features % ROW_BLOCK for m in mods[:-1]):
        return None
    starts = [sum(m.out_features for m in mods[:i]) for i in range(1, len(mods))]
    aligned = first.kind != INT8 or first.on_native  # the lab's kernels load unaligned
    if not aligned and any(r * first.in_features % 64 or r * 2 % 64 for r in starts):
        return None  # a layer's rows or scales would start off the int8 kernel's alignment
    w = torch.cat([m.qweight for m in mods])
    axis = 1 if aten_int4 else 0  # PyTorch's int4 scales are [groups, N, 2]
    s = torch.cat([m.scales.contiguous() for m in mods], axis)
    row = 0
    for m in mods:
        n = m.out_features
        m.qweight = w[row : row + n]
        m.scales = s[:, row : row + n] if axis else s[row : row + n]
        m._fused_into = (w, s)
        row += n
    return w, s


def quantised_kind(model: nn.Module) -> str | None:
    """ "int8" or "int4" for a model whose layers ``engine.quant.apply`` replaced, else None."""
    summary = getattr(model, "decoding_lab_quant", None)
    return None if summary is None else summary.kind
