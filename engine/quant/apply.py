"""Turning a loaded model's matrices into int8 or int4 (``quantize_model``): every linear layer
(and GPT-2's Conv1D) becomes a ``QuantLinear``; the rest of the model (embeddings, norms)
runs in bfloat16, the dtype both kernels take. What was done is kept on the model as a
``QuantSummary`` (``model.decoding_lab_quant``), which the status bar and the bench describe.

The plan for each matrix:

* ``int8``: int8 with one scale per row, rounded here from the model's weights;
* ``int4``: int4 in groups of 32, except the output head, which stays int8 per row (llama.cpp's
  4-bit files keep it at 6 or 8 bits too: a token's logits all come from it);
* the products run on the lab's own kernels where they are built here (``engine.quant.native``,
  in their layouts), else on PyTorch's; the int8 head's gives float32 logits, on the lab's
  kernel, or else on oneDNN's int8 matmul where the CPU has it (``engine.quant.onednn``);
* a matrix whose shape one format cannot take falls back to the other, or stays bfloat16, and
  the summary names it with the reason;
* integers made elsewhere (a GGUF file's own 4-bit blocks, ``engine.quant.gguf``) are used as
  they are, with their origin recorded.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from engine.quant import native
from engine.quant.formats import (
    COMPUTE,
    INT4,
    INT8,
    KINDS,
    int4_refusal,
    int8_refusal,
    pack_int4,
    quantize_int4,
    quantize_int8,
)
from engine.quant.linear import QuantLinear

ROUNDED = "rounded here"  # the origin of integers this module chose


@dataclass
class Prequantised:
    """One matrix's integers made elsewhere: int8 ``q`` [N, K] with ``scales`` [N], or int4
    ``q`` uint8 [N, K] in 0..15 with ``scales`` [K / G, N, 2]; ``origin`` says from what."""

    q: Tensor
    scales: Tensor
    origin: str


@dataclass
class Forced:
    """One matrix to be rounded here in format ``fmt`` (int8 or int4) whatever the plan would
    choose, with ``origin`` recorded (a GGUF type with no kernel here, say); ``source``: where
    its values came from ("GGUF Q4_0"), kept in the origin when its shape makes it fall back
    to another format."""

    fmt: str
    origin: str
    source: str = ""


@dataclass
class QuantSummary:
    """What ``quantize_model`` did: the kind asked for, how many matrices came from where
    ("int4, GGUF Q4_1 as it is": 210, ...), and the matrices kept in bfloat16 with why."""

    kind: str
    origins: Counter[str] = field(default_factory=Counter)
    kept: list[str] = field(default_factory=list)
    fell_back: list[str] = field(default_factory=list)  # "name: why" of each other format
    head_on_onednn: bool = False
    head_float: str = ""  # the kernel that gives the head's float32 logits, if any
    kernels: str = ""  # whose kernels run the products, and why where not ours

    def count(self, fmt: str) -> int:
        """Matrices in format ``fmt`` (int8 or int4), whatever their origin."""
        return sum(n for origin, n in self.origins.items() if origin.startswith(fmt))

    def describe(self) -> str:
        """One line: how many matrices of each format from where, and what fell back or was
        kept in bfloat16 and why (the CLI's load line, the window's status)."""
        total = sum(self.origins.values()) + len(self.kept)
        parts = [f"{self.count(self.kind)} of {total} matrices {self.kind}"]
        parts += [f"{n} × {origin}" for origin, n in self.origins.most_common()]
        if self.fell_back:
            parts.append(f"{len(self.fell_back)} fell back from {self.kind} ({self.fell_back[0]})")
        if self.kept:
            parts.append(f"{len(self.kept)} kept in bfloat16 ({self.kept[0]})")
        if self.kernels:
            parts.append(self.kernels)
        if self.head_float:
            parts.append(f"the head's float32 logits on {self.head_float}")
        return f"{self.kind}: " + "; ".join(parts)


def _linear_layers(model: nn.Module) -> Iterator[tuple[str, nn.Module, Tensor, Tensor | None]]:
    """(name, module, weight [N, K], bias) of every linear layer, GPT-2's Conv1D included (its
    weight is stored [K, N])."""
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            yield name, module, module.weight.data, module.bias
        elif type(module).__name__ == "Conv1D" and hasattr(module, "nf"):
            yield name, module, module.weight.data.t(), module.bias


def _head_name(model: nn.Module) -> str | None:
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    return next((n for n, m in model.named_modules() if m is head), None)


def _plan(kind: str, is_head: bool, n: int, k: int) -> tuple[str | None, str]:
    """The format for one [n, k] matrix (None: stays bfloat16) and why, when it is not the
    one asked for."""
    want = INT8 if kind == INT8 or is_head else INT4
    order = [want] + [f for f in (INT4, INT8) if f != want and not (f == INT4 and is_head)]
    reasons = []
    for fmt in order:
        why = int4_refusal(n, k) if fmt == INT4 else int8_refusal(n, k)
        if why is None:
            return fmt, "; ".join(reasons)
        reasons.append(f"{fmt}: {why}")
    return None, "; ".join(reasons)


def int4_layout(u: Tensor, sz: Tensor) -> tuple[Tensor, Tensor]:
    """int4 integers ``u`` [N, K] and their (scale, zero) pairs [K / 32, N, 2] in the layout
    of the kernel that will run them: the lab's (``engine.quant.native``) or PyTorch's."""
    k = u.shape[1]
    if native.takes_int4(k, k // sz.shape[0], u.shape[0]):
        return native.pack4(u), native.scales4(sz)
    return pack_int4(u), sz


def _made_here(fmt: str, w: Tensor) -> tuple[Tensor, Tensor, str]:
    if fmt == INT8:
        q, s = quantize_int8(w)
        return q, s, f"int8 per row, {ROUNDED}"
    return *int4_layout(*quantize_int4(w)), f"int4 in groups of 32, {ROUNDED}"


def _replace(model: nn.Module, name: str, new: nn.Module) -> None:
    parent_name, _, child = name.rpartition(".")
    setattr(model.get_submodule(parent_name) if parent_name else model, child, new)


def _made(
    kind: str, name: str, head: str | None, w: Tensor, given: Prequantised | Forced | None,
    summary: QuantSummary | None = None,
) -> tuple[Tensor, Tensor, str] | str:  # fmt: skip
    """One matrix's (integers in the kernel's layout, scales, origin), or why it stays; a
    matrix that falls back from the format asked for is noted in ``summary.fell_back``."""
    n, k = w.shape
    if isinstance(given, Prequantised):
        if given.q.dtype == torch.int8:
            return given.q, given.scales, given.origin
        return *int4_layout(given.q, given.scales), given.origin
    fmt, why = _plan(kind, name == head, n, k)
    source = ""
    if isinstance(given, Forced):
        refused = int4_refusal(n, k) if given.fmt == INT4 else int8_refusal(n, k)
        if refused is None:
            q, s, _ = _made_here(given.fmt, w)
            return q, s, given.origin
        why = f"{given.fmt}: {refused}"
        source = f" from {given.source}" if given.source else ""
    if fmt is None:
        return f"{name}{source}: {why}"
    q, s, origin = _made_here(fmt, w)
    if why and summary is not None and fmt != kind:
        summary.fell_back.append(f"{name}: {why}")
    return q, s, origin + source


def install(
    model: nn.Module, name: str, q: Tensor, scales: Tensor, origin: str, summary: QuantSummary
) -> None:
    """Replace the linear layer ``name`` by a ``QuantLinear`` holding ``q`` and ``scales``
    (already in the kernel's layout), keeping its bias, and count it in ``summary``."""
    module = model.get_submodule(name)
    k = module.weight.shape[1] if isinstance(module, nn.Linear) else module.weight.shape[0]
    _replace(model, name, QuantLinear(q, scales, module.bias, k, origin))
    summary.origins[origin] += 1


def finish(model: nn.Module, summary: QuantSummary) -> QuantSummary:
    """The rest of the model to bfloat16, the head's product to oneDNN where it runs here,
    and the summary kept on it."""
    if getattr(model.config, "tie_word_embeddings", False):
        model.config.tie_word_embeddings = False  # the head is its own integers now
    model.to(COMPUTE)  # embeddings, norms, biases and any matrix kept as it was
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if isinstance(head, QuantLinear):
        summary.head_float = head.as_head()
        summary.head_on_onednn = head.on_onednn
    summary.kernels = kernels_line(model)
    model.decoding_lab_quant = summary
    return summary


def kernels_line(model: nn.Module) -> str:
    """Whose kernels run the model's int8 / int4 products (the head on oneDNN aside)."""
    mods = [m for m in model.modules() if isinstance(m, QuantLinear) and not m.on_onednn]
    ours = sum(m.on_native for m in mods)
    if ours == len(mods):
        return f"the lab's kernels ({native.isa()})" if mods else ""
    why = native.why_not() or "their layout does not fit every matrix"
    return f"{len(mods) - ours} of {len(mods)} products on PyTorch's kernels ({why})"


def quantize_model(
    model: nn.Module, kind: str, given: dict[str, Prequantised | Forced] | None = None,
    say: Callable[[str], None] | None = None,
) -> QuantSummary:  # fmt: skip
    """Replace ``model``'s linear layers by int8 / int4 ones (``kind``), in place, on the CPU;
    ``given`` holds integers made elsewhere, or a format forced, by layer name. Returns the
    summary (also kept as ``model.decoding_lab_quant``)."""
    if kind not in KINDS:
        raise ValueError(f"quantize_model: kind must be one of {KINDS}, got {kind!r}")
    if getattr(model, "decoding_lab_quant", None) is not None:
        raise ValueError("this model's weights are quantised already")
    if next(model.parameters()).device.type != "cpu":
        raise ValueError("int8 and int4 weights run on the CPU kernels only")
    given = given or {}
    native.prepare(say)
    head = _head_name(model)
    summary = QuantSummary(kind)
    layers = list(_linear_layers(model))
    with torch.no_grad():
        for i, (name, _module, w, _bias) in enumerate(layers):
            if say is not None and i % 16 == 0:
                say(f"Quantising the weights to {kind}: {i} of {len(layers)} matrices")
            made = _made(kind, name, head, w, given.get(name), summary)
            if isinstance(made, str):
                summary.kept.append(made)
                continue
            install(model, name, *made, summary)
    if not summary.count(kind):
        raise ValueError(_nothing_in(kind, summary, len(layers)))
    return finish(model, summary)


def _nothing_in(kind: str, summary: QuantSummary, matrices: int) -> str:
    """Why a load that asked for ``kind`` is refused: none of its matrices could take it (it
    would run another format, or bfloat16, under the label)."""
    reasons = summary.fell_back or summary.kept
    why = f" (first: {reasons[0]})" if reasons else ""
    other = "; int8 may fit" if kind == INT4 and summary.count(INT8) else ""
    return (
        f"none of its {matrices} matrices can be {kind}{why}: it would run "
        f"{'bfloat16' if not summary.origins else 'another format'} under the {kind} label"
        f"{other}"
    )
