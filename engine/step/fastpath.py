"""A lean decode path for the decoder families people open: Llama 2/3 and SmolLM, Mistral,
Qwen2/2.5, Qwen3, Gemma 2/3, Phi-3 and GPT-2.

At batch 1 a small model spends much of each token on launching ~40 small ops per layer, not
on arithmetic. This path reuses the model's own weights, but fuses q/k/v and gate/up into one
matrix product each, keeps a preallocated KV cache written in place, computes the rotary
tables once per call, and calls scaled_dot_product_attention directly: ~15 ops per layer.

The step is written once (``_FORWARD_SOURCE``); the families differ only in a small spec
(``read_spec``): which norm (Llama's RMSNorm, Gemma's ``(1 + w)`` RMSNorm, LayerNorm), which
activation, gated or plain MLP, q/k norms, biases, Gemma's extra norms, embedding scale,
learned positions, soft-capping, sliding windows per layer, rotary tables per layer. Norms
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
from dataclasses import dataclass, field
from typing import Any

import torch

from engine.step.kvcache import StaticKV

log = logging.getLogger(__name__)

# model_type -> norm kind (the family's spec beyond what the modules themselves say)
NORM_RMS, NORM_RMS_GEMMA, NORM_LAYER = 0, 1, 2
FAMILIES = {
    "llama": NORM_RMS,
    "mistral": NORM_RMS,
    "qwen2": NORM_RMS,
    "qwen3": NORM_RMS,
    "phi3": NORM_RMS,
    "gemma2": NORM_RMS_GEMMA,
    "gemma3_text": NORM_RMS_GEMMA,
    "gpt2": NORM_LAYER,
}
SUPPORTED = tuple(FAMILIES)
ACT_SILU, ACT_GELU_TANH, ACT_GELU = 0, 1, 2
_ACTIVATIONS = {
    "silu": ACT_SILU,
    "swish": ACT_SILU,
    "gelu_pytorch_tanh": ACT_GELU_TANH,
    "gelu_new": ACT_GELU_TANH,
    "gelu_fast": ACT_GELU_TANH,
    "gelu": ACT_GELU,
}
# rotary types whose tables change at run time (transformers' dynamic_rope_update)
_RUNTIME_ROPE = ("dynamic", "longrope")

# per-layer weight slots (an empty tensor where a family has no such weight)
(IN_W, IN_B, QKV_W, QKV_B, QN_W, KN_W, O_W, O_B, PA_W, PA_B, PF_W, PF_B, PFF_W, PFF_B,
 UP_W, UP_B, DOWN_W, DOWN_B) = range(18)  # fmt: skip
N_SLOTS = 18


class FastPathUnsupported(ValueError):
    """The model is not a decoder this path knows how to run."""


def _activation(cfg: Any) -> str:
    return (
        getattr(cfg, "hidden_activation", None)
        or getattr(cfg, "hidden_act", None)
        or getattr(cfg, "activation_function", None)
        or "silu"
    )


def _rope_types(cfg: Any) -> list[str]:
    params = getattr(cfg, "rope_parameters", None) or getattr(cfg, "rope_scaling", None) or {}
    if not isinstance(params, dict):
        return []
    if "rope_type" in params or "type" in params:
        return [params.get("rope_type", params.get("type", "default"))]
    return [p.get("rope_type", "default") for p in params.values() if isinstance(p, dict)]


def supports(model: torch.nn.Module) -> str | None:
    """None if the fast path can run ``model``, else the reason it cannot (one line)."""
    cfg = model.config
    kind = getattr(cfg, "model_type", None)
    if getattr(cfg, "is_encoder_decoder", False):
        return "encoder-decoder model"
    if kind not in FAMILIES:
        return f"model type {kind!r} (fast path: {', '.join(SUPPORTED)})"
    if getattr(cfg, "mlp_bias", False):
        return "MLP bias terms"
    if _activation(cfg) not in _ACTIVATIONS:
        return f"activation {_activation(cfg)}"
    for rope in _rope_types(cfg):
        if rope in _RUNTIME_ROPE:
            return f"rope type {rope} (its tables change at run time)"
    if kind == "gpt2":
        if getattr(cfg, "scale_attn_by_inverse_layer_idx", False) or not getattr(
            cfg, "scale_attn_weights", True
        ):
            return "GPT-2 attention scaling variant"
        if getattr(cfg, "add_cross_attention", False):
            return "GPT-2 with cross-attention"
    return None


def _fused(*tensors: torch.Tensor) -> torch.Tensor:
    """One tensor for several parameters that multiply the same input (weights stacked by
    rows, or biases). The parameters become views into it, so the memory is shared with the
    model, not copied; a model moved to another dtype or device afterwards gets fused again."""
    base = tensors[0].data
    storage = base.untyped_storage()
    offset = base.storage_offset()
    for t in tensors:  # already fused: consecutive views of one storage
        if (
            t.data.untyped_storage().data_ptr() != storage.data_ptr()
            or t.data.storage_offset() != offset
            or not t.data.is_contiguous()
        ):
            break
        offset += t.numel()
    else:
        total = sum(t.shape[0] for t in tensors)
        return base.as_strided((total, *base.shape[1:]), base.stride(), base.storage_offset())
    fused = torch.cat([t.data for t in tensors])
    row = 0
    for t in tensors:
        rows = t.shape[0]
        t.data = fused[row : row + rows]
        row += rows
    return fused


def _transposed(conv_weight: torch.nn.Parameter) -> torch.Tensor:
    """GPT-2's Conv1D keeps its weight as [in, out]. Store it column-major instead (the model
    computes the same ``x @ w``) so that ``w.t()``, the [out, in] matrix this path multiplies
    by, is contiguous without a second copy of the weights."""
    if not conv_weight.data.t().is_contiguous():
        conv_weight.data = conv_weight.data.t().contiguous().t()
    return conv_weight.data.t()


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


@dataclass
class Spec:
    """What the step needs of one model: weights in the step's slots and the family's
    switches. ``MATRIX_SLOTS`` of each layer and ``lm_head`` are the matrix products."""

    embed: torch.Tensor
    embed_scale: torch.Tensor  # empty: none (Gemma: sqrt(hidden) in the model dtype)
    wpe: torch.Tensor  # empty: none (GPT-2: learned positions)
    layers: list[list[torch.Tensor]]
    sliding: list[bool]
    rope_of: list[int]
    final_w: torch.Tensor
    final_b: torch.Tensor
    lm_head: torch.Tensor
    inv_freqs: list[torch.Tensor]
    rope_scales: list[float]
    rot: int
    n_heads: int
    n_kv: int
    head_dim: int
    eps: float
    norm_kind: int
    act_kind: int
    gated: bool
    attn_scale: float
    attn_softcap: float
    final_softcap: float
    window: int
    max_len: int
    family: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    MATRIX_SLOTS = (QKV_W, O_W, UP_W, DOWN_W)

    @property
    def dtype(self) -> torch.dtype:
        return self.embed.dtype

    @property
    def device(self) -> torch.device:
        return self.embed.device

    def args(self, onednn: bool) -> dict[str, Any]:
        """The step's keyword arguments that stay the same from call to call."""
        return dict(
            embed=self.embed, embed_scale=self.embed_scale, wpe=self.wpe, layers=self.layers,
            sliding=self.sliding, rope_of=self.rope_of, final_w=self.final_w,
            final_b=self.final_b, lm_head=self.lm_head, inv_freqs=self.inv_freqs,
            rope_scales=self.rope_scales, rot=self.rot, n_heads=self.n_heads, n_kv=self.n_kv,
            head_dim=self.head_dim, eps=self.eps, norm_kind=self.norm_kind,
            act_kind=self.act_kind, gated=self.gated, attn_scale=self.attn_scale,
            attn_softcap=self.attn_softcap, final_softcap=self.final_softcap,
            window=self.window, onednn=onednn,
        )  # fmt: skip


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


def _w(module: torch.nn.Module | None, name: str = "weight") -> torch.Tensor | None:
    t = getattr(module, name, None) if module is not None else None
    return t.data if isinstance(t, torch.Tensor) else None


def _rope(inner: torch.nn.Module, cfg: Any, layer_types: list[str]) -> tuple[
    list[torch.Tensor], list[float], list[int]
]:  # fmt: skip
    """Rotary tables as the model's own rotary module computed them (so llama3 / linear /
    yarn scaling come for free), one per layer type where the model keeps several."""
    rotary = inner.rotary_emb
    if hasattr(rotary, "inv_freq"):
        scale = float(getattr(rotary, "attention_scaling", 1.0))
        return [rotary.inv_freq.float()], [scale], [0] * len(layer_types)
    kinds = sorted(set(layer_types))
    freqs = [getattr(rotary, f"{k}_inv_freq").float() for k in kinds]
    scales = [float(getattr(rotary, f"{k}_attention_scaling", 1.0)) for k in kinds]
    return freqs, scales, [kinds.index(k) for k in layer_types]


def _decoder_spec(model: torch.nn.Module, norm_kind: int) -> Spec:
    """Llama-shaped decoders: ``model.model`` with embed_tokens, layers, norm, rotary_emb."""
    cfg = model.config
    inner = model.model
    kind = cfg.model_type
    n_heads, n_kv = cfg.num_attention_heads, cfg.num_key_value_heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // n_heads
    n_layers = len(inner.layers)
    embed = inner.embed_tokens.weight.data
    empty = embed.new_empty(0)
    layer_types = list(getattr(cfg, "layer_types", None) or ["full_attention"] * n_layers)
    window = int(getattr(cfg, "sliding_window", None) or 0)
    if kind in ("mistral", "phi3"):  # one window for every layer, when set
        sliding = [window > 0] * n_layers
    else:
        sliding = [t == "sliding_attention" for t in layer_types]
    if not any(sliding):
        window = 0
    layers = []
    for layer in inner.layers:
        att, mlp = layer.self_attn, layer.mlp
        if hasattr(att, "qkv_proj"):  # Phi-3: already fused
            qkv, qkv_b = att.qkv_proj.weight.data, _w(att.qkv_proj, "bias")
        else:
            qkv = _fused(att.q_proj.weight, att.k_proj.weight, att.v_proj.weight)
            biases = [att.q_proj.bias, att.k_proj.bias, att.v_proj.bias]
            qkv_b = _fused(*biases) if all(b is not None for b in biases) else None
        if hasattr(mlp, "gate_up_proj"):
            up = mlp.gate_up_proj.weight.data
        else:
            up = _fused(mlp.gate_proj.weight, mlp.up_proj.weight)
        gemma = hasattr(layer, "pre_feedforward_layernorm")
        pre_mlp = layer.pre_feedforward_layernorm if gemma else layer.post_attention_layernorm
        slots = [
            _w(layer.input_layernorm), None, qkv, qkv_b,
            _w(getattr(att, "q_norm", None)), _w(getattr(att, "k_norm", None)),
            att.o_proj.weight.data, _w(att.o_proj, "bias"),
            _w(layer.post_attention_layernorm) if gemma else None, None,
            _w(pre_mlp), None,
            _w(layer.post_feedforward_layernorm) if gemma else None, None,
            up, None, mlp.down_proj.weight.data, None,
        ]  # fmt: skip
        layers.append([empty if t is None else t for t in slots])
    freqs, scales, rope_of = _rope(inner, cfg, layer_types)
    rot = 2 * freqs[0].shape[0]
    embed_scale = getattr(inner.embed_tokens, "embed_scale", None)
    scalar = getattr(cfg, "query_pre_attn_scalar", None)
    return Spec(
        embed=embed,
        embed_scale=empty if embed_scale is None else embed_scale.to(embed.dtype).reshape(()),
        wpe=empty,
        layers=layers,
        sliding=sliding,
        rope_of=rope_of,
        final_w=inner.norm.weight.data,
        final_b=empty,
        lm_head=model.get_output_embeddings().weight.data,
        inv_freqs=[f.to(embed.device) for f in freqs],
        rope_scales=scales,
        rot=rot,
        n_heads=n_heads,
        n_kv=n_kv,
        head_dim=head_dim,
        eps=float(cfg.rms_norm_eps),
        norm_kind=norm_kind,
        act_kind=_ACTIVATIONS[_activation(cfg)],
        gated=True,
        attn_scale=float(scalar) ** -0.5 if scalar else head_dim**-0.5,
        attn_softcap=float(getattr(cfg, "attn_logit_softcapping", None) or 0.0),
        final_softcap=float(getattr(cfg, "final_logit_softcapping", None) or 0.0),
        window=window,
        max_len=int(cfg.max_position_embeddings),
        family=kind,
    )


def _gpt2_spec(model: torch.nn.Module) -> Spec:
    """GPT-2: learned positions, LayerNorm with bias, Conv1D weights ([in, out]), gelu_new,
    tied head, no rotary."""
    cfg = model.config
    tr = model.transformer
    embed = tr.wte.weight.data
    empty = embed.new_empty(0)
    layers = []
    for block in tr.h:
        att, mlp = block.attn, block.mlp
        slots = [
            block.ln_1.weight.data, block.ln_1.bias.data,
            _transposed(att.c_attn.weight), att.c_attn.bias.data, empty, empty,
            _transposed(att.c_proj.weight), att.c_proj.bias.data, empty, empty,
            block.ln_2.weight.data, block.ln_2.bias.data, empty, empty,
            _transposed(mlp.c_fc.weight), mlp.c_fc.bias.data,
            _transposed(mlp.c_proj.weight), mlp.c_proj.bias.data,
        ]  # fmt: skip
        layers.append(slots)
    n_heads = cfg.n_head
    head_dim = cfg.n_embd // n_heads
    return Spec(
        embed=embed, embed_scale=empty, wpe=tr.wpe.weight.data, layers=layers,
        sliding=[False] * len(layers), rope_of=[0] * len(layers), final_w=tr.ln_f.weight.data,
        final_b=tr.ln_f.bias.data, lm_head=model.get_output_embeddings().weight.data,
        inv_freqs=[], rope_scales=[], rot=head_dim, n_heads=n_heads, n_kv=n_heads,
        head_dim=head_dim, eps=float(cfg.layer_norm_epsilon), norm_kind=NORM_LAYER,
        act_kind=_ACTIVATIONS[_activation(cfg)], gated=False, attn_scale=head_dim**-0.5,
        attn_softcap=0.0, final_softcap=0.0, window=0, max_len=int(cfg.n_positions),
        family="gpt2",
    )  # fmt: skip


def read_spec(model: torch.nn.Module) -> Spec:
    """The step's weights and switches for ``model`` (raises FastPathUnsupported)."""
    reason = supports(model)
    if reason is not None:
        raise FastPathUnsupported(f"The fast path does not support this model: {reason}")
    kind = model.config.model_type
    with torch.no_grad():
        if kind == "gpt2":
            return _gpt2_spec(model)
        return _decoder_spec(model, FAMILIES[kind])


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
