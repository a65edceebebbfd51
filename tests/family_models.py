"""Tiny random models of each family the fast path knows, built from their transformers config
classes (attribute names as the installed transformers 5 spells them). Small sizes keep CI
fast; windows and soft-caps are set so that a few dozen tokens exercise them."""

from __future__ import annotations

from collections.abc import Callable

import torch
from transformers import (
    AutoModelForCausalLM,
    Gemma2Config,
    Gemma3TextConfig,
    GPT2Config,
    LlamaConfig,
    MistralConfig,
    Phi3Config,
    PretrainedConfig,
    Qwen2Config,
    Qwen3Config,
)

VOCAB = 384
INIT = 0.4  # wide, so greedy output varies instead of repeating one token
COMMON = dict(
    vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
    bos_token_id=2, eos_token_id=1, pad_token_id=0, initializer_range=INIT,
)  # fmt: skip


def configs() -> dict[str, Callable[[], PretrainedConfig]]:
    return {
        "llama": lambda: LlamaConfig(**COMMON),
        "mistral": lambda: MistralConfig(**COMMON, sliding_window=8, head_dim=8),
        "qwen2": lambda: Qwen2Config(**COMMON),  # q/k/v bias
        "qwen2-sliding": lambda: Qwen2Config(
            **COMMON, use_sliding_window=True, sliding_window=8, max_window_layers=1
        ),
        "qwen3": lambda: Qwen3Config(**COMMON, head_dim=8),  # q/k norm
        "gemma2": lambda: Gemma2Config(
            **COMMON,
            head_dim=8,
            sliding_window=8,
            query_pre_attn_scalar=16,
            attn_logit_softcapping=5.0,
            final_logit_softcapping=3.0,
        ),  # fmt: skip
        "gemma3": lambda: Gemma3TextConfig(
            **COMMON,
            head_dim=8,
            sliding_window=8,
            query_pre_attn_scalar=16,
            layer_types=["sliding_attention", "full_attention"],
            final_logit_softcapping=3.0,
        ),  # fmt: skip
        "llama3-rope": lambda: LlamaConfig(
            **COMMON,
            rope_parameters={
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 64,
                "rope_theta": 500000.0,
            },
        ),  # fmt: skip
        "phi3": lambda: Phi3Config(**COMMON, sliding_window=8),
        "phi3-partial-rotary": lambda: Phi3Config(**COMMON, partial_rotary_factor=0.5),
        "gpt2": lambda: GPT2Config(
            vocab_size=VOCAB,
            n_embd=32,
            n_layer=2,
            n_head=4,
            n_positions=256,
            bos_token_id=2,
            eos_token_id=1,
            initializer_range=INIT,
        ),  # fmt: skip
    }


FAMILIES = list(configs())


def tiny(family: str, seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(configs()[family]())
    with torch.no_grad():  # Gemma's norms start at zero ((1 + w) scaling): give them some spread
        for name, p in model.named_parameters():
            if "norm" in name and p.dim() == 1:
                p.add_(torch.randn_like(p) * 0.3)
    model.generation_config.pad_token_id = 0
    return model.eval()
