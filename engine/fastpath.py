"""A lean decode path for Llama-family models (SmolLM2, Llama, TinyLlama...).

At batch 1 a small model spends much of each token on launching ~40 small ops per layer, not
on arithmetic. This path reuses the model's own weights, but fuses q/k/v and gate/up into one
matrix product each, keeps a preallocated KV cache written in place, computes the rotary
tables once per call, and calls scaled_dot_product_attention directly: ~15 ops per layer.
RMSNorm and RoPE follow transformers' Llama code (norm computed in float32), so the logits
agree with ``model(...)`` to float rounding; tests compare both.

The whole forward pass is one TorchScript function (compiled once from the source below). Its
interpreter runs without Python's GIL, so a busy GUI thread cannot stall the ~450 op launches
of a token: the GIL was the largest loss of the window against the headless engine.

On CPU the matrix products go through oneDNN (``torch.ops.mkldnn._linear_pointwise``), which
reads a weight matrix at 30-35 GB/s on the development machine where ``x @ w.T`` (MKL gemv)
reads 15 GB/s at these shapes. float32 weights are used in place; bfloat16 weights are
reordered once into oneDNN's blocked layout (a second copy, cached per model), because the
plain bfloat16 layout is no faster. If the oneDNN op is missing or disagrees with ``x @ w.T``
on a probe, the path falls back to ``x @ w.T``.

``LlamaFastStepper`` is a ``engine.stepper.Stepper`` (``logits``, ``truncate``, ``cache``,
``forward_passes``), so sessions can use it or ``ModelStepper`` alike.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Sequence
from typing import Any

import torch

from engine.kvcache import StaticKV

SUPPORTED = ("llama",)


class FastPathUnsupported(ValueError):
    """The model is not a plain Llama-family decoder this path knows how to run."""


def supports(model: torch.nn.Module) -> str | None:
    """None if the fast path can run ``model``, else the reason it cannot."""
    cfg = model.config
    if getattr(cfg, "model_type", None) not in SUPPORTED:
        return f"model type {getattr(cfg, 'model_type', '?')!r} (fast path: {', '.join(SUPPORTED)})"
    if getattr(cfg, "attention_bias", False) or getattr(cfg, "mlp_bias", False):
        return "bias terms"
    if getattr(cfg, "hidden_act", "silu") != "silu":
        return f"activation {cfg.hidden_act}"
    rope = getattr(cfg, "rope_scaling", None) or {}
    if rope and rope.get("rope_type", rope.get("type", "default")) not in ("default", None):
        return f"rope scaling {rope}"
    return None


def _fused(*linears: torch.nn.Linear) -> torch.Tensor:
    """One weight matrix for several linear layers with the same input. The layers' own
    weights become views into it, so the memory is shared with the model, not copied; a model
    moved to another dtype or device afterwards gets fused again."""
    weights = [m.weight for m in linears]
    base = weights[0].data
    storage = base.untyped_storage()
    offset = 0
    for w in weights:  # already fused: consecutive views of one storage
        if (
            w.data.untyped_storage().data_ptr() != storage.data_ptr()
            or w.data.storage_offset() != offset
        ):
            break
        offset += w.numel()
    else:
        total = sum(w.shape[0] for w in weights)
        return base.as_strided((total, base.shape[1]), base.stride(), base.storage_offset())
    fused = torch.cat([w.data for w in weights])
    row = 0
    for m in linears:
        rows = m.weight.shape[0]
        m.weight.data = fused[row : row + rows]
        row += rows
    return fused


# One forward pass over ``ids`` (TorchScript). ``number`` is TorchScript's Scalar type, which
# the oneDNN op's argument list needs and which Python annotations cannot spell. A torch built
# without oneDNN gets the matmul-only ``linear``.
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
def norm(x: Tensor, w: Tensor, eps: float) -> Tensor:
    # as transformers' LlamaRMSNorm: normalise in float32, scale in the model dtype
    return w * torch.rms_norm(x.float(), [x.shape[-1]], None, eps).to(x.dtype)


def forward(
    ids: Tensor, embed: Tensor, layers: List[List[Tensor]], final_norm: Tensor,
    lm_head: Tensor, k_all: Tensor, v_all: Tensor, start: int, inv_freq: Tensor,
    rope_scale: float, n_heads: int, n_kv: int, head_dim: int, eps: float, keep: int,
    onednn: bool,
) -> Tensor:
    n = ids.shape[0]
    end = start + n
    q_size = n_heads * head_dim
    kv_size = n_kv * head_dim
    half = head_dim // 2
    x = embed.index_select(0, ids)  # [n, hidden]
    pos = torch.arange(start, end, dtype=torch.float32, device=x.device)
    freqs = torch.outer(pos, inv_freq)  # [n, D/2]
    emb = torch.cat((freqs, freqs), -1)
    cos = (emb.cos() * rope_scale).to(x.dtype)
    sin = (emb.sin() * rope_scale).to(x.dtype)
    # causal mask for the new rows over all cached + new positions (none for one row)
    mask: Optional[Tensor] = None
    if n > 1:
        mask = torch.ones([n, end], dtype=torch.bool, device=x.device).tril(start)
    i = 0
    for w in layers:  # w: input norm, qkv, o, post-attention norm, gate+up, down
        h = norm(x, w[0], eps)
        qkv = linear(h, w[1], onednn)  # [n, q + 2 kv]
        # rotate q and k together: [heads + kv_heads, n, D]
        qk = qkv[:, : q_size + kv_size].view(n, n_heads + n_kv, head_dim).transpose(0, 1)
        qk = qk * cos + torch.cat((-qk[:, :, half:], qk[:, :, :half]), -1) * sin
        k_all[i, :, start:end] = qk[n_heads:]
        v_all[i, :, start:end] = qkv[:, q_size + kv_size :].view(n, n_kv, head_dim).transpose(0, 1)
        att = torch.ops.aten.scaled_dot_product_attention(
            qk[:n_heads].unsqueeze(0), k_all[i, :, :end].unsqueeze(0),
            v_all[i, :, :end].unsqueeze(0), attn_mask=mask, enable_gqa=n_heads != n_kv,
        )[0]
        x = x + linear(att.transpose(0, 1).reshape(n, q_size), w[2], onednn)
        h = norm(x, w[3], eps)
        gate, up = linear(h, w[4], onednn).chunk(2, -1)
        x = x + linear(torch.ops.aten.silu(gate) * up, w[5], onednn)
        i += 1
    x = norm(x[n - keep :], final_norm, eps)
    return linear(x, lm_head, onednn).float()  # [keep, vocab]
"""
_compiled: Any = None
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
    """The fast path's TorchScript functions (``forward``, ``linear``, ``norm``)."""
    return torch.jit.CompilationUnit(_LINEAR_SOURCE[onednn] + _FORWARD_SOURCE)


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


# bfloat16 weights reordered for oneDNN, per model: {model: (key, packed weights)}
_PACKED: weakref.WeakKeyDictionary[torch.nn.Module, tuple[tuple[int, ...], list[torch.Tensor]]]
_PACKED = weakref.WeakKeyDictionary()


def _cpu_kernel(
    model: torch.nn.Module, weights: list[torch.Tensor]
) -> tuple[bool, list[torch.Tensor]]:
    """Whether to use oneDNN, and the weights the matrix products take, for these weights of
    ``model``."""
    w0 = weights[0]
    if w0.device.type != "cpu" or w0.dtype not in (torch.float32, torch.bfloat16):
        return False, weights
    try:
        if not onednn_supports(w0.dtype):
            return False, weights
        if w0.dtype == torch.float32:
            ready = weights
        else:
            key = tuple(w.data_ptr() for w in weights) + (len(weights),)
            cached = _PACKED.get(model)
            if cached is not None and cached[0] == key:
                ready = cached[1]
            else:
                _PACKED.pop(model, None)  # drop stale copies before making new ones
                ready = [torch.ops.mkldnn._reorder_linear_weight(w, 1) for w in weights]
                _PACKED[model] = (key, ready)
        probe = torch.randn(3, w0.shape[1], dtype=w0.dtype)
        tol = 1e-3 if w0.dtype == torch.float32 else 2e-2
        got, want = linear(probe, ready[0], True), linear(probe, w0, False)
        if not torch.allclose(got, want, atol=tol, rtol=tol):
            return False, weights
    except (RuntimeError, AttributeError, NotImplementedError):
        return False, weights
    return True, ready


class LlamaFastStepper:
    def __init__(self, model: torch.nn.Module, max_len: int | None = None) -> None:
        reason = supports(model)
        if reason is not None:
            raise FastPathUnsupported(f"The fast path does not support this model: {reason}")
        cfg = model.config
        self.model = model
        inner = model.model
        self.device = inner.embed_tokens.weight.device
        self.dtype = inner.embed_tokens.weight.dtype
        self.n_heads = cfg.num_attention_heads
        self.n_kv = cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.n_heads
        self.hidden = cfg.hidden_size
        self.eps = cfg.rms_norm_eps
        self.max_len = max_len or cfg.max_position_embeddings
        with torch.no_grad():
            self.embed = inner.embed_tokens.weight
            self.layers = [
                (
                    layer.input_layernorm.weight,
                    _fused(layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj),
                    layer.self_attn.o_proj.weight,
                    layer.post_attention_layernorm.weight,
                    _fused(layer.mlp.gate_proj, layer.mlp.up_proj),
                    layer.mlp.down_proj.weight,
                )
                for layer in inner.layers
            ]
            self.final_norm = inner.norm.weight
            self.lm_head = model.get_output_embeddings().weight
            # the matrix products: oneDNN on CPU where it is available, x @ w.T elsewhere
            plain = [w for layer in self.layers for w in layer[1:3] + layer[4:]] + [self.lm_head]
            self.onednn, ready = _cpu_kernel(model, plain)
            it = iter(ready)
            self.layers = [  # lists, as the TorchScript forward takes them
                [w_in, next(it), next(it), w_post, next(it), next(it)]
                for (w_in, _, _, w_post, _, _) in self.layers
            ]
            self.lm_head = next(it)
            rotary = inner.rotary_emb
            self.inv_freq = rotary.inv_freq.float().to(self.device)
            self.rope_scale = float(getattr(rotary, "attention_scaling", 1.0))
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
        if len(ids) < keep:
            raise ValueError(f"need at least {keep} ids, got {len(ids)}")
        if len(ids) > self.max_len:
            raise ValueError(f"{len(ids)} tokens exceed the model's context of {self.max_len}")
        start = self.cache.reusable(ids, keep)
        self.cache.crop(start)
        new = list(ids[start:])
        k_all, v_all = self.cache.ensure(start + len(new))
        logits = self._forward(
            torch.tensor(new, device=self.device),
            self.embed,
            self.layers,
            self.final_norm,
            self.lm_head,
            k_all,
            v_all,
            start,
            self.inv_freq,
            self.rope_scale,
            self.n_heads,
            self.n_kv,
            self.head_dim,
            self.eps,
            keep,
            self.onednn,
        )
        self.forward_passes += 1
        self.cache.extend(new)
        return logits


def fast_stepper_or_none(model: torch.nn.Module, **kwargs: Any) -> LlamaFastStepper | None:
    """The fast path when the model supports it, else None (use ModelStepper)."""
    if getattr(model.config, "is_encoder_decoder", False) or supports(model) is not None:
        return None
    try:
        return LlamaFastStepper(model, **kwargs)
    except FastPathUnsupported:
        return None
