"""What the fast path needs of one decoder model (``read_spec``): its weights in the step's
slots (q/k/v and gate/up fused into one matrix each, as views into one storage shared with the
model) and the family's switches (norm kind, activation, rotary tables, windows, soft caps).
``engine.step.fastpath`` runs the step over a ``Spec``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from engine.quant.linear import fuse

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

# per-layer weight slots (an empty tensor where a family has no such weight); the last four
# are the matrices' scales, empty for float weights (engine.quant: int8 and int4)
(IN_W, IN_B, QKV_W, QKV_B, QN_W, KN_W, O_W, O_B, PA_W, PA_B, PF_W, PF_B, PFF_W, PFF_B,
 UP_W, UP_B, DOWN_W, DOWN_B, QKV_S, O_S, UP_S, DOWN_S) = range(22)  # fmt: skip
N_SLOTS = 22


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


def _transposed(conv: torch.nn.Module, empty: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """GPT-2's Conv1D keeps its weight as [in, out]. Store it column-major instead (the model
    computes the same ``x @ w``) so that ``w.t()``, the [out, in] matrix this path multiplies
    by, is contiguous without a second copy of the weights. A quantised layer is [out, in]
    already."""
    if hasattr(conv, "qweight"):
        return _matrix(conv, empty)
    conv_weight = conv.weight
    if not conv_weight.data.t().is_contiguous():
        conv_weight.data = conv_weight.data.t().contiguous().t()
    return conv_weight.data.t(), empty


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
    lm_head_s: torch.Tensor  # the head's scales: empty for a float head
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
    SCALE_SLOTS = (QKV_S, O_S, UP_S, DOWN_S)  # each matrix's scales, in the same order

    @property
    def dtype(self) -> torch.dtype:
        return self.embed.dtype

    @property
    def device(self) -> torch.device:
        return self.embed.device

    def args(self, onednn: bool, lab_attention: bool = False) -> dict[str, Any]:
        """The step's keyword arguments that stay the same from call to call."""
        return dict(
            embed=self.embed, embed_scale=self.embed_scale, wpe=self.wpe, layers=self.layers,
            sliding=self.sliding, rope_of=self.rope_of, final_w=self.final_w,
            final_b=self.final_b, lm_head=self.lm_head, lm_head_s=self.lm_head_s,
            inv_freqs=self.inv_freqs,
            rope_scales=self.rope_scales, rot=self.rot, n_heads=self.n_heads, n_kv=self.n_kv,
            head_dim=self.head_dim, eps=self.eps, norm_kind=self.norm_kind,
            act_kind=self.act_kind, gated=self.gated, attn_scale=self.attn_scale,
            attn_softcap=self.attn_softcap, final_softcap=self.final_softcap,
            window=self.window, onednn=onednn, lab_attention=lab_attention,
        )  # fmt: skip


def _w(module: torch.nn.Module | None, name: str = "weight") -> torch.Tensor | None:
    t = getattr(module, name, None) if module is not None else None
    return t.data if isinstance(t, torch.Tensor) else None


def _matrix(module: torch.nn.Module, empty: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A linear layer's (weight [N, K], scales): a float weight with empty scales, or an
    int8 / int4 layer's integers and scales (engine.quant.linear.QuantLinear)."""
    if hasattr(module, "qweight"):
        return module.qweight, module.scales.contiguous()
    return module.weight.data, empty


def _fused_matrix(
    mods: list[torch.nn.Module], empty: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """One (weight, scales) for layers that multiply the same input, shared with them."""
    quantised = [hasattr(m, "qweight") for m in mods]
    if not any(quantised):
        return _fused(*(m.weight for m in mods)), empty
    pair = fuse(mods) if all(quantised) else None  # type: ignore[arg-type]
    if pair is None:
        raise FastPathUnsupported(
            "its quantised q/k/v (or gate/up) matrices cannot share one product (different"
            " formats, or int4 rows not in blocks of 64); model.forward runs them"
        )
    return pair


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


def _windows(cfg: Any, layer_types: list[str]) -> tuple[list[bool], int]:
    """Which layers attend through a sliding window, and its width (0: none does)."""
    window = int(getattr(cfg, "sliding_window", None) or 0)
    if cfg.model_type in ("mistral", "phi3"):  # one window for every layer, when set
        sliding = [window > 0] * len(layer_types)
    else:
        sliding = [t == "sliding_attention" for t in layer_types]
    return sliding, window if any(sliding) else 0


def _decoder_slots(layer: torch.nn.Module, empty: torch.Tensor) -> list[torch.Tensor]:
    """One Llama-shaped layer's weights in the step's slots (``empty`` where it has none)."""
    att, mlp = layer.self_attn, layer.mlp
    if hasattr(att, "qkv_proj"):  # Phi-3: already fused
        (qkv, qkv_s), qkv_b = _matrix(att.qkv_proj, empty), _w(att.qkv_proj, "bias")
    else:
        qkv, qkv_s = _fused_matrix([att.q_proj, att.k_proj, att.v_proj], empty)
        biases = [att.q_proj.bias, att.k_proj.bias, att.v_proj.bias]
        qkv_b = _fused(*biases) if all(b is not None for b in biases) else None
    if hasattr(mlp, "gate_up_proj"):
        up, up_s = _matrix(mlp.gate_up_proj, empty)
    else:
        up, up_s = _fused_matrix([mlp.gate_proj, mlp.up_proj], empty)
    o, o_s = _matrix(att.o_proj, empty)
    down, down_s = _matrix(mlp.down_proj, empty)
    gemma = hasattr(layer, "pre_feedforward_layernorm")
    pre_mlp = layer.pre_feedforward_layernorm if gemma else layer.post_attention_layernorm
    slots = [
        _w(layer.input_layernorm), None, qkv, qkv_b,
        _w(getattr(att, "q_norm", None)), _w(getattr(att, "k_norm", None)),
        o, _w(att.o_proj, "bias"),
        _w(layer.post_attention_layernorm) if gemma else None, None,
        _w(pre_mlp), None,
        _w(layer.post_feedforward_layernorm) if gemma else None, None,
        up, None, down, None, qkv_s, o_s, up_s, down_s,
    ]  # fmt: skip
    return [empty if t is None else t for t in slots]


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
    sliding, window = _windows(cfg, layer_types)
    layers = [_decoder_slots(layer, empty) for layer in inner.layers]
    freqs, scales, rope_of = _rope(inner, cfg, layer_types)
    rot = 2 * freqs[0].shape[0]
    embed_scale = getattr(inner.embed_tokens, "embed_scale", None)
    scalar = getattr(cfg, "query_pre_attn_scalar", None)
    lm_head, lm_head_s = _matrix(model.get_output_embeddings(), empty)
    return Spec(
        embed=embed,
        embed_scale=empty if embed_scale is None else embed_scale.to(embed.dtype).reshape(()),
        wpe=empty,
        layers=layers,
        sliding=sliding,
        rope_of=rope_of,
        final_w=inner.norm.weight.data,
        final_b=empty,
        lm_head=lm_head,
        lm_head_s=lm_head_s,
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
        (qkv, qkv_s), (o, o_s) = _transposed(att.c_attn, empty), _transposed(att.c_proj, empty)
        (up, up_s), (down, down_s) = _transposed(mlp.c_fc, empty), _transposed(mlp.c_proj, empty)
        slots = [
            block.ln_1.weight.data, block.ln_1.bias.data,
            qkv, att.c_attn.bias.data, empty, empty,
            o, att.c_proj.bias.data, empty, empty,
            block.ln_2.weight.data, block.ln_2.bias.data, empty, empty,
            up, mlp.c_fc.bias.data, down, mlp.c_proj.bias.data,
            qkv_s, o_s, up_s, down_s,
        ]  # fmt: skip
        layers.append(slots)
    n_heads = cfg.n_head
    head_dim = cfg.n_embd // n_heads
    lm_head, lm_head_s = _matrix(model.get_output_embeddings(), empty)
    return Spec(
        embed=embed, embed_scale=empty, wpe=tr.wpe.weight.data, layers=layers,
        sliding=[False] * len(layers), rope_of=[0] * len(layers), final_w=tr.ln_f.weight.data,
        final_b=tr.ln_f.bias.data, lm_head=lm_head, lm_head_s=lm_head_s, inv_freqs=[],
        rope_scales=[], rot=head_dim, n_heads=n_heads, n_kv=n_heads,
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
