"""A lean decoder step for T5 encoder-decoder models (t5 v1.0, t5 v1.1 / flan-t5, mt5).

Decoding a T5 model spends each token in the decoder: per layer a self-attention over the
tokens so far, a cross-attention over the encoder's output and a feed-forward block. Through
``model.forward`` each step also rebuilds masks and the relative position bias and re-reads the
cached cross-attention keys through transformers' cache objects. Here the encoder runs once
(with the model's own encoder, as ``ModelStepper`` does), each decoder layer's cross-attention
keys and values are projected once, and the decoder step is one TorchScript function that
fuses q/k/v into one matrix product, writes self-attention keys and values in place into a
``StaticKV`` and calls scaled_dot_product_attention with the position bias as its float mask.

The relative position bias of T5's decoder depends only on how far back a key is (the decoder
is causal: ``bidirectional=False``), so it is tabulated once per distance with the model's own
``_relative_position_bucket`` and bias embedding, then gathered per call. Distances past
``relative_attention_max_distance`` share the last bucket, so a short table covers any length.

Norms follow ``T5LayerNorm`` (float32 mean of squares, no mean subtraction, no bias), there is
no attention scaling, and the decoder output is scaled by ``d_model ** -0.5`` before the head
exactly when transformers does (``config.scale_decoder_outputs`` for t5; never for mt5).
Matrix products use the decoder-only fast path's ``linear`` (oneDNN on CPU where it is
available), so both paths share one kernel choice.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Any

import torch

from engine.errors import EmptyPromptError
from engine.step.fastpath import (
    _LINEAR_SOURCE,
    FastPathUnsupported,
    _fused,
    has_onednn_linear,
    prepared,
)
from engine.step.kvcache import StaticKV

log = logging.getLogger(__name__)

T5_TYPES = ("t5", "mt5")
ACT_RELU, ACT_GELU_TANH, ACT_GELU, ACT_SILU = 0, 1, 2, 3
_ACTIVATIONS = {
    "relu": ACT_RELU,
    "gelu_new": ACT_GELU_TANH,
    "gelu_pytorch_tanh": ACT_GELU_TANH,
    "gelu_fast": ACT_GELU_TANH,
    "gelu": ACT_GELU,
    "silu": ACT_SILU,
    "swish": ACT_SILU,
}
DEFAULT_MAX_LEN = 1 << 16  # relative positions: no limit of the model's own

# per-layer weight slots
(SA_NORM, QKV_W, SA_O, CA_NORM, CA_Q, CA_O, FF_NORM, WI_W, WO_W) = range(9)  # fmt: skip
MATRIX_SLOTS = (QKV_W, SA_O, CA_Q, CA_O, WI_W, WO_W)

_T5_SOURCE = """
def t5_norm(x: Tensor, w: Tensor, eps: float) -> Tensor:
    # T5LayerNorm: float32 mean of squares, no mean, no bias; scale in the weight's dtype
    return w * torch.rms_norm(x.float(), [x.shape[-1]], None, eps).to(w.dtype)


def t5_act(x: Tensor, kind: int) -> Tensor:
    if kind == 0:
        return torch.relu(x)
    if kind == 1:
        return torch.ops.aten.gelu(x, approximate="tanh")
    if kind == 2:
        return torch.ops.aten.gelu(x)
    return torch.ops.aten.silu(x)


def t5_forward(
    ids: Tensor, pos: Tensor, attn_len: int, embed: Tensor, layers: List[List[Tensor]],
    bias_table: Tensor, cross_k: Tensor, cross_v: Tensor, final_w: Tensor, lm_head: Tensor,
    out_scale: float, k_all: Tensor, v_all: Tensor, n_heads: int, head_dim: int, eps: float,
    act_kind: int, gated: bool, keep: int, onednn: bool,
) -> Tensor:
    # ids, pos: [n]; self-attention keys and values go to k_all/v_all[layer, :, pos] and
    # attention reads positions [0, attn_len); cross_k, cross_v: [layers, H, S, D].
    n = ids.shape[0]
    inner = n_heads * head_dim
    x = embed.index_select(0, ids)  # [n, d_model]
    # position bias + causal mask as one float mask [1, H, n, attn_len]: the key at j is
    # pos - j back; keys ahead of the row are -inf
    j = torch.arange(attn_len, device=x.device)
    back = pos.unsqueeze(1) - j.unsqueeze(0)  # [n, attn_len]
    far = bias_table.shape[1] - 1
    bias = bias_table.index_select(1, back.clamp(0, far).reshape(-1))
    bias = bias.view(n_heads, n, attn_len).masked_fill((back < 0).unsqueeze(0), float("-inf"))
    mask = bias.unsqueeze(0)
    layer_ids = torch.arange(len(layers), device=x.device)
    i = 0
    for w in layers:
        h = t5_norm(x, w[0], eps)
        qkv = linear(h, w[1], onednn).view(n, 3 * n_heads, head_dim)  # [n, 3H, D]
        at: List[Optional[Tensor]] = [layer_ids[i : i + 1], None, pos]
        torch.ops.aten.index_put_(k_all, at, qkv[:, n_heads : 2 * n_heads])
        torch.ops.aten.index_put_(v_all, at, qkv[:, 2 * n_heads :])
        q = qkv[:, :n_heads].transpose(0, 1)
        att = torch.ops.aten.scaled_dot_product_attention(
            q.unsqueeze(0), k_all[i, :, :attn_len].unsqueeze(0),
            v_all[i, :, :attn_len].unsqueeze(0), attn_mask=mask, scale=1.0,
        )[0]
        x = x + linear(att.transpose(0, 1).reshape(n, inner), w[2], onednn)
        h = t5_norm(x, w[3], eps)
        q = linear(h, w[4], onednn).view(n, n_heads, head_dim).transpose(0, 1)
        att = torch.ops.aten.scaled_dot_product_attention(
            q.unsqueeze(0), cross_k[i].unsqueeze(0), cross_v[i].unsqueeze(0), scale=1.0
        )[0]
        x = x + linear(att.transpose(0, 1).reshape(n, inner), w[5], onednn)
        h = t5_norm(x, w[6], eps)
        u = linear(h, w[7], onednn)
        if gated:
            gate, up = u.chunk(2, -1)
            u = t5_act(gate, act_kind) * up
        else:
            u = t5_act(u, act_kind)
        x = x + linear(u, w[8], onednn)
        i += 1
    x = t5_norm(x[n - keep :], final_w, eps)
    if out_scale != 1.0:
        x = x * out_scale
    return linear(x, lm_head, onednn).float()  # [keep, vocab]
"""
_compiled: Any = None
_compile_lock = threading.Lock()


def _script() -> Any:
    """The compiled T5 step for this torch, built on first use."""
    global _compiled
    with _compile_lock:
        if _compiled is None:
            try:
                source = _LINEAR_SOURCE[has_onednn_linear()] + _T5_SOURCE
                _compiled = torch.jit.CompilationUnit(source)
            except Exception as exc:  # noqa: BLE001 - no TorchScript: use model.forward
                raise FastPathUnsupported(f"TorchScript is not available: {exc}") from exc
    return _compiled


def _act_name(cfg: Any) -> str:
    return str(getattr(cfg, "dense_act_fn", None) or "relu")


def supports_t5(model: torch.nn.Module) -> str | None:
    """None if the T5 step can run ``model``, else the reason it cannot (one line)."""
    cfg = model.config
    kind = getattr(cfg, "model_type", None)
    if kind not in T5_TYPES:
        return f"model type {kind!r} (T5 fast path: {', '.join(T5_TYPES)})"
    decoder = getattr(model, "decoder", None)
    blocks = getattr(decoder, "block", None)
    if not getattr(cfg, "is_encoder_decoder", False) or not blocks:
        return "T5 without a decoder (encoder-only)"
    if _act_name(cfg) not in _ACTIVATIONS:
        return f"activation {_act_name(cfg)}"
    first = blocks[0].layer[0].SelfAttention
    if not getattr(first, "has_relative_attention_bias", False):
        return "decoder without a relative position bias in its first layer"
    if any(b.layer[0].SelfAttention.has_relative_attention_bias for b in blocks[1:]):
        return "a relative position bias in every layer"
    head = model.get_output_embeddings()
    if head is None:
        return "no language-model head"
    dtypes = {p.dtype for p in decoder.parameters()} | {head.weight.dtype}
    if len(dtypes) > 1:  # e.g. wo kept in float32 by from_pretrained (_keep_in_fp32_modules)
        return f"mixed weight dtypes {sorted(str(d) for d in dtypes)}"
    if torch.float16 in dtypes:  # transformers clamps T5's float16 hidden states; this does not
        return "float16 (T5's overflow clamping)"
    return None


def _scales_output(model: torch.nn.Module) -> bool:
    """Whether transformers multiplies the decoder output by d_model ** -0.5 before the head:
    t5 when ``scale_decoder_outputs`` (v5: unless the config said tie_word_embeddings=False,
    as t5 v1.1 and flan-t5 do); mt5 never."""
    cfg = model.config
    if cfg.model_type != "t5":
        return False
    return bool(getattr(cfg, "scale_decoder_outputs", getattr(cfg, "tie_word_embeddings", True)))


def _bias_table(attn: torch.nn.Module) -> torch.Tensor:
    """The decoder's relative position bias per distance back, [heads, distances]: the model's
    own bucketing (causal) and bias embedding. Twice the max distance is tabulated; from the
    max distance on every bucket is the last one, so clamping to the table's end is exact."""
    far = 2 * int(attn.relative_attention_max_distance)
    back = torch.arange(far + 1, device=attn.relative_attention_bias.weight.device)
    buckets = attn._relative_position_bucket(
        -back,  # memory position - query position
        bidirectional=False,
        num_buckets=attn.relative_attention_num_buckets,
        max_distance=attn.relative_attention_max_distance,
    )
    return attn.relative_attention_bias(buckets).t().contiguous()  # [H, far + 1]


class T5FastStepper:
    """The TorchScript decoder step of a T5 model over a ``StaticKV``; the encoder runs once,
    here, and each layer's cross-attention keys and values are computed once from it."""

    is_encoder_decoder = True

    def __init__(
        self,
        model: torch.nn.Module,
        encoder_input_ids: Sequence[int] | None,
        max_len: int | None = None,
    ) -> None:
        reason = supports_t5(model)
        if reason is not None:
            raise FastPathUnsupported(f"The T5 fast path does not support this model: {reason}")
        if encoder_input_ids is None or len(encoder_input_ids) == 0:
            raise EmptyPromptError("The encoder input is empty: type a prompt first.")
        cfg = model.config
        self.model = model
        self.family = str(cfg.model_type)
        decoder = model.decoder
        embed = decoder.embed_tokens.weight
        self.device, self.dtype = embed.device, embed.dtype
        self.n_heads, self.head_dim = int(cfg.num_heads), int(cfg.d_kv)
        self.max_len = max_len or DEFAULT_MAX_LEN
        self._forward = _script().t5_forward
        with torch.inference_mode():
            enc = torch.tensor([list(encoder_input_ids)], dtype=torch.long, device=self.device)
            out = model.get_encoder()(
                input_ids=enc, attention_mask=torch.ones_like(enc), return_dict=True
            )
            hidden = out.last_hidden_state  # [1, S, d_model]
            ck, cv = [], []
            for block in decoder.block:
                cross = block.layer[1].EncDecAttention
                shape = (hidden.shape[1], self.n_heads, self.head_dim)
                ck.append(cross.k(hidden)[0].view(shape).transpose(0, 1))
                cv.append(cross.v(hidden)[0].view(shape).transpose(0, 1))
            self.cross_k = torch.stack(ck).contiguous()  # [layers, H, S, D]
            self.cross_v = torch.stack(cv).contiguous()
            self.bias_table = _bias_table(decoder.block[0].layer[0].SelfAttention)
        with torch.no_grad():
            layers = []
            for block in decoder.block:
                sa, ca, ff = block.layer[0], block.layer[1], block.layer[2]
                dense = ff.DenseReluDense
                att = sa.SelfAttention
                gated = hasattr(dense, "wi_0")
                wi = _fused(dense.wi_0.weight, dense.wi_1.weight) if gated else dense.wi.weight.data
                layers.append([
                    sa.layer_norm.weight.data,
                    _fused(att.q.weight, att.k.weight, att.v.weight),
                    att.o.weight.data,
                    ca.layer_norm.weight.data,
                    ca.EncDecAttention.q.weight.data,
                    ca.EncDecAttention.o.weight.data,
                    ff.layer_norm.weight.data,
                    wi,
                    dense.wo.weight.data,
                ])  # fmt: skip
            lm_head = model.get_output_embeddings().weight.data
            ready = prepared(model, layers, lm_head, MATRIX_SLOTS)
            self.onednn, self.lm_head = ready.onednn, ready.lm_head
            self.layers = [list(layer) for layer in ready.layers]  # shared tensors, own lists
        self._args: dict[str, Any] = dict(
            embed=embed.data, layers=self.layers, bias_table=self.bias_table,
            cross_k=self.cross_k, cross_v=self.cross_v,
            final_w=decoder.final_layer_norm.weight.data, lm_head=self.lm_head,
            out_scale=float(cfg.d_model) ** -0.5 if _scales_output(model) else 1.0,
            n_heads=self.n_heads, head_dim=self.head_dim, eps=float(cfg.layer_norm_epsilon),
            act_kind=_ACTIVATIONS[_act_name(cfg)], gated=gated, onednn=self.onednn,
        )  # fmt: skip
        self.forward_passes = 0
        self.cache = StaticKV(
            len(layers), self.n_heads, self.head_dim, self.dtype, self.device, self.max_len
        )

    def truncate(self, length: int) -> None:
        # The cache is a preallocated buffer: forgetting positions is just moving the end.
        self.cache.crop(length)

    @torch.inference_mode()
    def logits(self, ids: Sequence[int], keep: int = 1) -> torch.Tensor:
        """Same contract as ModelStepper.logits: ``ids`` is the decoder sequence (start id
        first) -> [keep, vocab] float32."""
        start, new = self.cache.take(ids, keep, self.max_len, "the fast path's limit")
        end = start + len(new)
        k_all, v_all = self.cache.ensure(end)
        logits = self._forward(
            ids=torch.tensor(new, device=self.device),
            pos=torch.arange(start, end, device=self.device),
            attn_len=end,
            k_all=k_all,
            v_all=v_all,
            keep=keep,
            **self._args,
        )
        self.forward_passes += 1
        self.cache.extend(new)
        return logits


def t5_stepper_or_none(
    model: torch.nn.Module, encoder_input_ids: Sequence[int], max_len: int | None = None
) -> T5FastStepper | None:
    """The T5 step when the model is a T5 it knows, else None (use ModelStepper); the reason
    is logged in one line."""
    reason = supports_t5(model)
    if reason is None:
        try:
            return T5FastStepper(model, encoder_input_ids, max_len=max_len)
        except FastPathUnsupported as exc:
            reason = str(exc)
    log.info("fast path off: %s; using model.forward", reason)
    return None
