"""A lean decode path for the decoder families people open: Llama 2/3 and SmolLM, Mistral,
Qwen2/2.5, Qwen3, Gemma 2/3, Phi-3 and GPT-2.

At batch 1 a small model spends much of each token on launching ~40 small ops per layer, not
on arithmetic. This path reuses the model's own weights, but fuses q/k/v and gate/up into one
matrix product each, keeps a preallocated KV cache written in place, computes the rotary
tables once per call, and calls scaled_dot_product_attention directly: ~15 ops per layer.

The step is written once (``_FORWARD_SOURCE``); the families differ only in a small spec
(``read_spec``, in ``engine.step.fast_spec``): which norm (Llama's RMSNorm, Gemma's
``(1 + w)`` RMSNorm, LayerNorm), which activation, gated or plain MLP, q/k norms, biases,
Gemma's extra norms, embedding scale, learned positions, soft-capping, sliding windows per
layer, rotary tables per layer. Norms
follow transformers (computed in float32 where transformers does), so the logits agree with
``model(...)`` to float rounding; tests compare both and ``transformers.generate``.

The same source runs two ways. Compiled by TorchScript (``FastStepper``, the CPU and dynamic
path): its interpreter runs without Python's GIL, so a busy GUI thread cannot stall the op
launches of a token. Executed as plain Python (``python_forward``, used by
``engine.step.static_step``), where ``torch.compile`` can trace and fuse it and a CUDA graph can
capture it.

On CPU the matrix products go through oneDNN (``torch.ops.mkldnn._linear_pointwise``), which
reads a weight matrix at 30-35 GB/s on the development machine where ``x @ w.T`` (MKL gemv)
reads 15 GB/s at these shapes. float32 weights are used in place; bfloat16 weights are
reordered once into oneDNN's blocked layout (a second copy, cached per model), because the
plain bfloat16 layout is no faster. If the oneDNN op is missing or disagrees with ``x @ w.T``
on a probe, the path falls back to ``x @ w.T``.

``FastStepper`` is a ``engine.step.stepper.Stepper`` (``logits``, ``truncate``, ``cache``,
``forward_passes``), so sessions can use it or ``ModelStepper`` alike.
"""

from __future__ import annotations

import logging
import threading
import typing
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from engine.step.fast_spec import (  # noqa: F401 - re-exported: the fast path's public names
    FAMILIES,
    SUPPORTED,
    FastPathUnsupported,
    Spec,
    _fused,
    read_spec,
    supports,
)
from engine.step.kvcache import StaticKV

log = logging.getLogger(__name__)

# One forward pass over ``ids`` (TorchScript, or plain Python for torch.compile). ``number`` is
# TorchScript's Scalar type, which the oneDNN op's argument list needs and which Python
# annotations cannot spell. A torch built without oneDNN gets the matmul-only ``linear``.
_LINEAR_SOURCE = {
    True: """
def linear(x: Tensor, w: Tensor, onednn: bool) -> Tensor:
    if onednn:
        no_scalars: List[Optional[number]] = []
        return torch.ops.mkldnn._linear_pointwise(x, w, None, "none", no_scalars, "")
    return torch.matmul(x, w.t())
""",
    False: """
def linear(x: Tensor, w: Tensor, onednn: bool) -> Tensor:
    return torch.matmul(x, w.t())
""",
}
_FORWARD_SOURCE = """
def norm(x: Tensor, w: Tensor, b: Tensor, kind: int, eps: float) -> Tensor:
    if kind == 0:  # Llama's RMSNorm: normalise in float32, scale in the model dtype
        return w * torch.rms_norm(x.float(), [x.shape[-1]], None, eps).to(x.dtype)
    if kind == 1:  # Gemma's: scale by (1 + w) in float32, then cast
        return (torch.rms_norm(x.float(), [x.shape[-1]], None, eps) * (1.0 + w.float())).to(
            x.dtype
        )
    return torch.layer_norm(x, [x.shape[-1]], w, b, eps)


def affine(x: Tensor, w: Tensor, b: Tensor, onednn: bool) -> Tensor:
    y = linear(x, w, onednn)
    if b.numel() > 0:
        y = y + b
    return y


def act(x: Tensor, kind: int) -> Tensor:
    if kind == 0:
        return torch.ops.aten.silu(x)
    if kind == 1:
        return torch.ops.aten.gelu(x, approximate="tanh")
    return torch.ops.aten.gelu(x)


def rotate(x: Tensor, cos: Tensor, sin: Tensor, rot: int) -> Tensor:
    # x: [heads, n, D]; cos, sin: [n, rot]; only the first ``rot`` dims turn (Phi's partial)
    half = rot // 2
    xr = x[:, :, :rot]
    out = xr * cos + torch.cat((-xr[:, :, half:], xr[:, :, :half]), -1) * sin
    if rot < x.shape[-1]:
        out = torch.cat((out, x[:, :, rot:]), -1)
    return out


def attend(q: Tensor, k: Tensor, v: Tensor, mask: Optional[Tensor], scale: float,
           softcap: float, gqa: bool) -> Tensor:
    # q: [H, n, D]; k, v: [KV, L, D]; mask: [n, L] (True = may attend) -> [H, n, D]
    if softcap <= 0.0:
        return torch.ops.aten.scaled_dot_product_attention(
            q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0), attn_mask=mask, scale=scale,
            enable_gqa=gqa,
        )[0]
    # Gemma 2's soft-capped scores: SDPA has no hook for tanh, so spell attention out
    rep = q.shape[0] // k.shape[0]
    if rep > 1:
        k = k.repeat_interleave(rep, 0)
        v = v.repeat_interleave(rep, 0)
    scores = torch.matmul(q, k.transpose(1, 2)) * scale
    scores = torch.tanh(scores / softcap) * softcap
    if mask is not None:
        scores = scores.masked_fill(mask.logical_not(), float("-inf"))
    probs = torch.softmax(scores.float(), -1).to(q.dtype)
    return torch.matmul(probs, v)


def forward(
    ids: Tensor, pos: Tensor, attn_len: int, always_mask: bool, embed: Tensor,
    embed_scale: Tensor, wpe: Tensor, layers: List[List[Tensor]], sliding: List[bool],
    rope_of: List[int], final_w: Tensor, final_b: Tensor, lm_head: Tensor, k_all: Tensor,
    v_all: Tensor, inv_freqs: List[Tensor], rope_scales: List[float], rot: int, n_heads: int,
    n_kv: int, head_dim: int, eps: float, norm_kind: int, act_kind: int, gated: bool,
    attn_scale: float, attn_softcap: float, final_softcap: float, window: int, keep: int,
    onednn: bool,
) -> Tensor:
    # ids, pos: [n] on the device; keys and values go to k_all/v_all[layer, :, pos];
    # attention reads positions [0, attn_len) of the cache, masked causally (and by window).
    n = ids.shape[0]
    q_size = n_heads * head_dim
    kv_size = n_kv * head_dim
    x = embed.index_select(0, ids)  # [n, hidden]
    if embed_scale.numel() > 0:
        x = x * embed_scale
    if wpe.numel() > 0:
        x = x + wpe.index_select(0, pos)
    # rotary tables, one pair per distinct table (Gemma 3: local and global)
    cos_sin: List[List[Tensor]] = []
    for j in range(len(inv_freqs)):
        freqs = torch.outer(pos.float(), inv_freqs[j])  # [n, rot/2]
        emb = torch.cat((freqs, freqs), -1)
        cos_sin.append(
            [(emb.cos() * rope_scales[j]).to(x.dtype), (emb.sin() * rope_scales[j]).to(x.dtype)]
        )
    # masks [n, attn_len]: key j is visible to the row at position p when j <= p (and
    # j > p - window on sliding layers); none at all for one row over exactly its past
    full: Optional[Tensor] = None
    local: Optional[Tensor] = None
    if n > 1 or always_mask:
        j = torch.arange(attn_len, device=x.device)
        full = j.unsqueeze(0) <= pos.unsqueeze(1)
    if window > 0 and (full is not None or attn_len > window):
        j = torch.arange(attn_len, device=x.device)
        local = (j.unsqueeze(0) <= pos.unsqueeze(1)) & (j.unsqueeze(0) > pos.unsqueeze(1) - window)
    gqa = n_heads != n_kv
    layer_ids = torch.arange(len(layers), device=x.device)
    i = 0
    for w in layers:
        h = norm(x, w[0], w[1], norm_kind, eps)
        qkv = affine(h, w[2], w[3], onednn)  # [n, q + 2 kv]
        qk = qkv[:, : q_size + kv_size].view(n, n_heads + n_kv, head_dim).transpose(0, 1)
        v = qkv[:, q_size + kv_size :].view(n, n_kv, head_dim).transpose(0, 1)
        if w[4].numel() > 0:  # Qwen3 / Gemma 3: RMSNorm over each head's q and k
            qk = torch.cat(
                (norm(qk[:n_heads], w[4], w[4], norm_kind, eps),
                 norm(qk[n_heads:], w[5], w[5], norm_kind, eps)), 0
            )
        if len(inv_freqs) > 0:
            cs = cos_sin[rope_of[i]]
            qk = rotate(qk, cs[0], cs[1], rot)
        # written into the whole buffer, not into a view of layer i: torch.compile then
        # updates the graph's input in place instead of copying a layer's cache per token
        at: List[Optional[Tensor]] = [layer_ids[i : i + 1], None, pos]
        torch.ops.aten.index_put_(k_all, at, qk[n_heads:].transpose(0, 1))  # [n, kv, D]
        torch.ops.aten.index_put_(v_all, at, v.transpose(0, 1))
        mask = local if sliding[i] and local is not None else full
        att = attend(qk[:n_heads], k_all[i, :, :attn_len], v_all[i, :, :attn_len], mask,
                     attn_scale, attn_softcap, gqa)
        a = affine(att.transpose(0, 1).reshape(n, q_size), w[6], w[7], onednn)
        if w[8].numel() > 0:  # Gemma: norm the attention output before the residual
            a = norm(a, w[8], w[9], norm_kind, eps)
        x = x + a
        h = norm(x, w[10], w[11], norm_kind, eps)
        u = affine(h, w[14], w[15], onednn)
        if gated:
            gate, up = u.chunk(2, -1)
            u = act(gate, act_kind) * up
        else:
            u = act(u, act_kind)
        m = affine(u, w[16], w[17], onednn)
        if w[12].numel() > 0:
            m = norm(m, w[12], w[13], norm_kind, eps)
        x = x + m
        i += 1
    x = norm(x[n - keep :], final_w, final_b, norm_kind, eps)
    logits = linear(x, lm_head, onednn)
    if final_softcap > 0.0:
        logits = torch.tanh(logits / final_softcap) * final_softcap
    return logits.float()  # [keep, vocab]
"""
_compiled: Any = None
_python: dict[str, Any] | None = None
_compile_lock = threading.Lock()


def has_onednn_linear() -> bool:
    """Whether this torch has the oneDNN linear op the CPU path uses."""
    try:
        torch.ops.mkldnn._linear_pointwise  # noqa: B018 - raises when the op is missing
    except (AttributeError, RuntimeError):
        return False
    return torch.backends.mkldnn.is_available()


def onednn_supports(dtype: torch.dtype) -> bool:
    """Whether oneDNN runs matrix products in ``dtype`` on this CPU: bfloat16 needs AVX-512
    (bw, vl, dq) or AVX-NE-CONVERT; an AVX2-only CPU (some AMD EPYC machines) has only fp32."""
    if not has_onednn_linear():
        return False
    if dtype == torch.bfloat16:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    return dtype == torch.float32


def compile_forward(onednn: bool) -> Any:
    """The fast path's TorchScript functions (``forward``, ``linear``, ``norm``...)."""
    return torch.jit.CompilationUnit(_LINEAR_SOURCE[onednn] + _FORWARD_SOURCE)


def python_forward(fresh: bool = False) -> Any:
    """The same step as plain Python functions (``forward`` etc., matrix products by
    ``torch.matmul``), for ``torch.compile`` and CUDA graphs. ``fresh``: a new function object
    (its own code object), so that each ``torch.compile`` of it keeps its own cache of
    compiled graphs instead of sharing dynamo's per-code recompile limit."""
    global _python
    with _compile_lock:
        if _python is None or fresh:
            scope: dict[str, Any] = {
                "torch": torch,
                "Tensor": torch.Tensor,
                "List": typing.List,  # noqa: UP006 - the TorchScript source's names
                "Optional": typing.Optional,
            }
            exec(compile(_LINEAR_SOURCE[False] + _FORWARD_SOURCE, "<fastpath>", "exec"), scope)
            if fresh:
                return scope["forward"]
            _python = scope
    return _python["forward"]


def _script() -> Any:
    """The compiled functions for this torch, built on first use."""
    global _compiled
    with _compile_lock:
        if _compiled is None:
            try:
                _compiled = compile_forward(has_onednn_linear())
            except Exception as exc:  # noqa: BLE001 - no TorchScript: use model.forward
                raise FastPathUnsupported(f"TorchScript is not available: {exc}") from exc
    return _compiled


def linear(x: torch.Tensor, w: torch.Tensor, onednn: bool) -> torch.Tensor:
    """``x @ w.T`` as the fast path computes it: with oneDNN (``w`` as ``_cpu_kernel`` prepared
    it) or with ``torch.matmul``."""
    return _script().linear(x, w, onednn)


def _cpu_kernel(weights: list[torch.Tensor]) -> tuple[bool, list[torch.Tensor]]:
    """Whether to use oneDNN, and the weights the matrix products take (bfloat16 ones packed
    into oneDNN's blocked layout; ``prepared`` caches the result per model)."""
    w0 = weights[0]
    if w0.device.type != "cpu" or w0.dtype not in (torch.float32, torch.bfloat16):
        return False, weights
    try:
        if not onednn_supports(w0.dtype):
            return False, weights
        if w0.dtype == torch.float32:
            ready = weights
        else:
            ready = [torch.ops.mkldnn._reorder_linear_weight(w, 1) for w in weights]
        probe = torch.randn(3, w0.shape[1], dtype=w0.dtype)
        tol = 1e-3 if w0.dtype == torch.float32 else 2e-2
        got, want = linear(probe, ready[0], True), linear(probe, w0, False)
        if not torch.allclose(got, want, atol=tol, rtol=tol):
            return False, weights
    except (RuntimeError, AttributeError, NotImplementedError):
        return False, weights
    return True, ready


# The step's weights as prepared for one model, so that a second stepper on the same model
# (a session restarted, a draft stepper, the bench) takes the same tensors instead of packing
# the bfloat16 matrices again (a second copy of the model): {model: (key, prepared)}.
_PACKED: weakref.WeakKeyDictionary[torch.nn.Module, tuple[tuple[Any, ...], Prepared]]
_PACKED = weakref.WeakKeyDictionary()


@dataclass
class Prepared:
    """The weights the step takes for one model: whether the matrix products go through
    oneDNN, every layer's slots (matrices packed where oneDNN wants them) and the LM head."""

    onednn: bool
    layers: list[list[torch.Tensor]]
    lm_head: torch.Tensor


def _weights_key(layers: list[list[torch.Tensor]], lm_head: torch.Tensor) -> tuple[Any, ...]:
    """What identifies the model's weights as they are now: a model moved to another dtype or
    device, or re-fused, has new storage, so its old preparation no longer matches."""
    tensors = [t for layer in layers for t in layer] + [lm_head]
    where = tuple((t.data_ptr(), t.storage_offset(), tuple(t.shape), t.dtype) for t in tensors)
    return (torch.backends.mkldnn.is_available(), *where)


def prepared(
    model: torch.nn.Module,
    layers: list[list[torch.Tensor]],
    lm_head: torch.Tensor,
    slots: Sequence[int] = Spec.MATRIX_SLOTS,
) -> Prepared:
    """The step's weights for ``model`` (``slots`` of each layer and ``lm_head`` are the
    matrix products), made once and reused while its weights stay put. The slots are the
    cached tensor objects themselves (not new ``.data`` views), so every stepper on the model
    shares them."""
    key = _weights_key(layers, lm_head)
    cached = _PACKED.get(model)
    if cached is not None and cached[0] == key:
        return cached[1]
    _PACKED.pop(model, None)  # drop stale copies before making new ones
    plain = [layer[s] for layer in layers for s in slots]
    onednn, ready = _cpu_kernel(plain + [lm_head])
    it = iter(ready)
    layers = [list(layer) for layer in layers]
    for layer in layers:
        for s in slots:
            layer[s] = next(it)
    made = Prepared(onednn, layers, next(it))
    _PACKED[model] = (key, made)
    return made


class FastStepper:
    """The TorchScript step over a ``StaticKV`` that grows as needed (attention reads only the
    filled part): the CPU path, and the GPU path where no graph is captured."""

    def __init__(self, model: torch.nn.Module, max_len: int | None = None) -> None:
        spec = read_spec(model)
        self.model = model
        self.spec = spec
        self.family = spec.family
        self.device, self.dtype = spec.device, spec.dtype
        self.n_heads, self.n_kv, self.head_dim = spec.n_heads, spec.n_kv, spec.head_dim
        self.max_len = min(max_len or spec.max_len, spec.max_len)
        with torch.no_grad():
            # the matrix products: oneDNN on CPU where it is available, x @ w.T elsewhere
            ready = prepared(model, spec.layers, spec.lm_head)
        self.onednn, self.lm_head = ready.onednn, ready.lm_head
        self.layers = [list(layer) for layer in ready.layers]  # shared tensors, own lists
        self._args = spec.args(self.onednn) | {"layers": self.layers, "lm_head": self.lm_head}
        self._forward = _script().forward
        self.forward_passes = 0
        self.cache = StaticKV(
            len(self.layers), self.n_kv, self.head_dim, self.dtype, self.device, self.max_len
        )

    def truncate(self, length: int) -> None:
        # The cache is a preallocated buffer: forgetting positions is just moving the end.
        self.cache.crop(length)

    @torch.inference_mode()
    def logits(self, ids: Sequence[int], keep: int = 1) -> torch.Tensor:
        """Same contract as ModelStepper.logits: [keep, vocab] float32."""
        start, new = self.cache.take(ids, keep, self.max_len)
        end = start + len(new)
        k_all, v_all = self.cache.ensure(end)
        logits = self._forward(
            ids=torch.tensor(new, device=self.device),
            pos=torch.arange(start, end, device=self.device),
            attn_len=end,
            always_mask=False,
            k_all=k_all,
            v_all=v_all,
            keep=keep,
            **self._args,
        )
        self.forward_passes += 1
        self.cache.extend(new)
        return logits


LlamaFastStepper = FastStepper  # the name this path had while it knew only Llama


def fast_stepper_or_none(model: torch.nn.Module, **kwargs: Any) -> FastStepper | None:
    """The fast path when the model's family has one, else None (use ModelStepper); the reason
    is logged in one line."""
    reason = supports(model)
    if reason is not None:
        log.info("fast path off: %s; using model.forward", reason)
        return None
    try:
        return FastStepper(model, **kwargs)
    except FastPathUnsupported as exc:
        log.info("fast path off: %s; using model.forward", exc)
        return None
