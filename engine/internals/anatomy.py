"""Where the parts of a transformer live, family by family: its blocks, the points where the
residual stream is read (TransformerLens's ``resid_pre`` / ``resid_mid`` / ``resid_post``), its
attention modules, and the model's own output head (final norm, scale, unembedding, soft-cap).

Nothing here re-implements a layer: the lens applies the model's own final norm and unembedding
modules to a residual vector, so the lens at the last layer is the model's output, exactly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from engine.errors import InternalsUnavailable

# Decoder-only families whose blocks are ``model.layers`` with pre-norm attention and MLP; the
# module whose *input* is the residual after attention (resid_mid) is named per family.
PRE_NORM_MID = {
    "llama": "post_attention_layernorm",
    "mistral": "post_attention_layernorm",
    "qwen2": "post_attention_layernorm",
    "qwen3": "post_attention_layernorm",
    "phi3": "post_attention_layernorm",
    # Gemma 2/3 also normalise each block's output (post_*_layernorm) before adding it: the
    # residual after attention is the input of the norm in front of the MLP.
    "gemma": "post_attention_layernorm",
    "gemma2": "pre_feedforward_layernorm",
    "gemma3_text": "pre_feedforward_layernorm",
}
SUPPORTED = (*PRE_NORM_MID, "gpt2", "t5")


@dataclass
class Anatomy:
    """One model's parts, as its own modules."""

    model: nn.Module
    blocks: list[nn.Module]  # the decoder's blocks, in order
    # per block, the modules whose input is the residual after each sub-block but the last
    mids: list[list[nn.Module]]
    sublayers: tuple[str, ...]  # the sub-blocks' names ("attention", "MLP")
    attention: list[nn.Module]  # self-attention modules: the weights are their output's last item
    cross: list[nn.Module]  # encoder-decoder: the cross-attention modules
    final_norm: nn.Module
    head: nn.Module  # the unembedding (lm_head)
    embed: nn.Module  # the input embedding (its output is the first residual)
    out_scale: float  # T5 with tied embeddings scales the decoder's output by d_model ** -0.5
    softcap: float | None  # Gemma's final-logit soft-capping
    encoder_decoder: bool
    model_type: str

    @property
    def layers(self) -> int:
        return len(self.blocks)

    def raw_logits(self, resid: Tensor) -> Tensor:
        """The model's head on residual vectors ``resid`` [..., d], before any soft-cap."""
        x = self.final_norm(resid)
        if self.out_scale != 1.0:
            x = x * self.out_scale
        return self.head(x)

    def finish(self, raw: Tensor) -> Tensor:
        """Gemma's soft-cap, as the model applies it: cap * tanh(logits / cap)."""
        if self.softcap is None:
            return raw
        return torch.tanh(raw / self.softcap) * self.softcap

    def lens(self, resid: Tensor) -> Tensor:
        """Logits the model would give if its residual stream ended at ``resid``."""
        return self.finish(self.raw_logits(resid))


def _model_type(model: nn.Module) -> str:
    return str(getattr(model.config, "model_type", "?"))


def anatomy(model: nn.Module | None) -> Anatomy:
    """The parts of ``model``, or InternalsUnavailable saying why they cannot be read."""
    if model is None:
        raise InternalsUnavailable(
            "Inside the step needs the model's weights: open a local model (a served model "
            "sends only its top-N probabilities)."
        )
    kind = _model_type(model)
    if kind in PRE_NORM_MID:
        return _pre_norm(model, kind)
    if kind == "gpt2":
        return _gpt2(model)
    if kind == "t5":
        return _t5(model)
    raise InternalsUnavailable(
        f"Inside the step does not know the {kind} architecture yet; it reads "
        f"{', '.join(sorted(SUPPORTED))} models."
    )


def _pre_norm(model: nn.Module, kind: str) -> Anatomy:
    base: Any = model.model
    blocks = list(base.layers)
    mid = PRE_NORM_MID[kind]
    return Anatomy(
        model=model, blocks=blocks, mids=[[getattr(b, mid)] for b in blocks],
        sublayers=("attention", "MLP"), attention=[b.self_attn for b in blocks], cross=[],
        final_norm=base.norm, head=model.lm_head, embed=base.embed_tokens, out_scale=1.0,
        softcap=getattr(model.config, "final_logit_softcapping", None),
        encoder_decoder=False, model_type=kind,
    )  # fmt: skip


def _gpt2(model: nn.Module) -> Anatomy:
    base: Any = model.transformer
    blocks = list(base.h)
    return Anatomy(
        model=model, blocks=blocks, mids=[[b.ln_2] for b in blocks],
        sublayers=("attention", "MLP"), attention=[b.attn for b in blocks], cross=[],
        final_norm=base.ln_f, head=model.lm_head, embed=base.wte, out_scale=1.0, softcap=None,
        encoder_decoder=False, model_type="gpt2",
    )  # fmt: skip


def _t5(model: nn.Module) -> Anatomy:
    dec: Any = model.decoder
    blocks = list(dec.block)
    cfg = model.config
    scaled = getattr(cfg, "scale_decoder_outputs", getattr(cfg, "tie_word_embeddings", False))
    return Anatomy(
        model=model, blocks=blocks, mids=[[b.layer[1], b.layer[2]] for b in blocks],
        sublayers=("self-attention", "cross-attention", "MLP"),
        attention=[b.layer[0].SelfAttention for b in blocks],
        cross=[b.layer[1].EncDecAttention for b in blocks],
        final_norm=dec.final_layer_norm, head=model.lm_head, embed=dec.embed_tokens,
        out_scale=cfg.d_model**-0.5 if scaled else 1.0, softcap=None, encoder_decoder=True,
        model_type="t5",
    )  # fmt: skip
