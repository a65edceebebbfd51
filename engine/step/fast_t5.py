"""A lean decoder step for T5 encoder-decoder models (t5 v1.0, t5 v1.1 / flan-t5, mt5).

Decoding a T5 model spends each token in the decoder: per layer a self-attention over the
tokens so far, a cross-attention over the encoder's output and a feed-forward block. Through
``model.forward`` each step also rebuilds masks and the relative position bias and re-reads the
cached cross-attention keys through transformers' cache objects. Here the encoder runs once
(with the model's own encoder, as ``ModelStepper`` does), each decoder layer's cross-attention
keys and values are projected once, and the decoder step (``engine.step.forward.t5_forward``,
plain Python; on CPU compiled by TorchScript from it, ``engine.step.scripted``) fuses q/k/v
into one matrix product, writes self-attention keys and values in place into a ``StaticKV``
and calls scaled_dot_product_attention with the position bias as its float mask.

The relative position bias of T5's decoder depends only on how far back a key is (the decoder
is causal: ``bidirectional=False``), so it is tabulated once per distance with the model's own
``_relative_position_bucket`` and bias embedding, then gathered per call. Distances past
``relative_attention_max_distance`` share the last bucket, so a short table covers any length.

Norms follow ``T5LayerNorm`` (float32 mean of squares, no mean subtraction, no bias), there is
no attention scaling, and the decoder output is scaled by ``d_model ** -0.5`` before the head
exactly when transformers does (``config.scale_decoder_outputs`` for t5; never for mt5).
Matrix products use the decoder-only fast path's ``linear`` and ``prepared`` (oneDNN on CPU
where it is available), so both paths share one kernel choice.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import torch

from engine.errors import EmptyPromptError
from engine.runtime.threads import governed_step
from engine.step.fastpath import FastPathUnsupported, _fused, prepared
from engine.step.forward import (
    CA_O,
    CA_Q,
    SA_O,
    T5_GELU,
    T5_GELU_TANH,
    T5_QKV,
    T5_RELU,
    T5_SILU,
    WI_W,
    WO_W,
)  # fmt: skip
from engine.step.kvcache import StaticKV
from engine.step.scripted import cpu_step

log = logging.getLogger(__name__)

T5_TYPES = ("t5", "mt5")
ACT_RELU, ACT_GELU_TANH, ACT_GELU, ACT_SILU = T5_RELU, T5_GELU_TANH, T5_GELU, T5_SILU
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

MATRIX_SLOTS = (T5_QKV, SA_O, CA_Q, CA_O, WI_W, WO_W)  # engine.step.forward's T5 slots


def _act_name(cfg: Any) -> str:
    return str(getattr(cfg, "dense_act_fn", None) or "relu")


def supports_t5(model: torch.nn.Module) -> str | None:
    """None if the T5 step can run ``model``, else the reason it cannot (one line)."""
    cfg = model.config
    kind = getattr(cfg, "model_type", None)
    if kind not in T5_TYPES:
        return f"model type {kind!r} (T5 fast path: {', '.join(T5_TYPES)})"
    quant = getattr(model, "decoding_lab_quant", None)
    if quant is not None:  # the T5 step takes float weights; model.forward runs the kernels
        return f"{quant.kind} weights (the T5 step is written for float weights)"
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


def _cross_kv(
    model: torch.nn.Module, encoder_input_ids: Sequence[int], n_heads: int, head_dim: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The encoder's output, run once with the model's own encoder, projected to every decoder
    layer's cross-attention keys and values: two [layers, H, S, D] tensors."""
    device = model.decoder.embed_tokens.weight.device
    with torch.inference_mode():
        enc = torch.tensor([list(encoder_input_ids)], dtype=torch.long, device=device)
        out = model.get_encoder()(
            input_ids=enc, attention_mask=torch.ones_like(enc), return_dict=True
        )
        hidden = out.last_hidden_state  # [1, S, d_model]
        shape = (hidden.shape[1], n_heads, head_dim)
        ck, cv = [], []
        for block in model.decoder.block:
            cross = block.layer[1].EncDecAttention
            ck.append(cross.k(hidden)[0].view(shape).transpose(0, 1))
            cv.append(cross.v(hidden)[0].view(shape).transpose(0, 1))
        return torch.stack(ck).contiguous(), torch.stack(cv).contiguous()


def _gated(decoder: torch.nn.Module) -> bool:
    """Whether the feed-forward is gated (t5 v1.1, flan-t5, mt5: wi_0 and wi_1)."""
    return hasattr(decoder.block[0].layer[2].DenseReluDense, "wi_0")


def _layer_slots(block: torch.nn.Module) -> list[torch.Tensor]:
    """One decoder block's weights in the step's slots (q/k/v and a gated wi fused)."""
    sa, ca, ff = block.layer[0], block.layer[1], block.layer[2]
    dense, att = ff.DenseReluDense, sa.SelfAttention
    gated = hasattr(dense, "wi_0")
    wi = _fused(dense.wi_0.weight, dense.wi_1.weight) if gated else dense.wi.weight.data
    return [
        sa.layer_norm.weight.data, _fused(att.q.weight, att.k.weight, att.v.weight),
        att.o.weight.data, ca.layer_norm.weight.data, ca.EncDecAttention.q.weight.data,
        ca.EncDecAttention.o.weight.data, ff.layer_norm.weight.data, wi, dense.wo.weight.data,
    ]  # fmt: skip


class T5FastStepper:
    """The decoder step of a T5 model (``engine.step.forward.t5_forward``) over a
    ``StaticKV``; the encoder runs once, here, and each layer's cross-attention keys and values
    are computed once from it."""

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
        cfg, decoder = model.config, model.decoder
        self.model = model
        self.family = str(cfg.model_type)
        embed = decoder.embed_tokens.weight
        self.device, self.dtype = embed.device, embed.dtype
        self.n_heads, self.head_dim = int(cfg.num_heads), int(cfg.d_kv)
        self.max_len = max_len or DEFAULT_MAX_LEN
        self.cross_k, self.cross_v = _cross_kv(
            model, encoder_input_ids, self.n_heads, self.head_dim
        )
        with torch.no_grad():
            self.bias_table = _bias_table(decoder.block[0].layer[0].SelfAttention)
            layers = [_layer_slots(block) for block in decoder.block]
            ready = prepared(model, layers, model.get_output_embeddings().weight.data, MATRIX_SLOTS)
        self.onednn, self.lm_head = ready.onednn, ready.lm_head
        self.layers = [list(layer) for layer in ready.layers]  # shared tensors, own lists
        self._args: dict[str, Any] = dict(
            embed=embed.data, layers=self.layers, bias_table=self.bias_table,
            cross_k=self.cross_k, cross_v=self.cross_v,
            final_w=decoder.final_layer_norm.weight.data, lm_head=self.lm_head,
            out_scale=float(cfg.d_model) ** -0.5 if _scales_output(model) else 1.0,
            n_heads=self.n_heads, head_dim=self.head_dim, eps=float(cfg.layer_norm_epsilon),
            act_kind=_ACTIVATIONS[_act_name(cfg)], gated=_gated(decoder), onednn=self.onednn,
        )  # fmt: skip
        self._forward = cpu_step(self.device, "t5_forward")  # TorchScript on CPU
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
        with governed_step(self.model, self.device, len(new)):
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
