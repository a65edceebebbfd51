"""Where a run starts: the decoder sequence for a prompt (the prompt itself, or the decoder
start id of an encoder-decoder model whose encoder reads the prompt), the EOS ids, and the
context limit, with a clear error for an empty or too long prompt."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch

from engine.errors import EmptyPromptError
from engine.models.device import context_length


def as_id_list(ids: int | Iterable[int] | None) -> list[int]:
    if ids is None:
        return []
    if isinstance(ids, int):
        return [ids]
    return [int(i) for i in ids]


@dataclass(frozen=True)
class DecodeStart:
    """Where a run starts: the decoder sequence, the encoder input (encoder-decoder only), the
    EOS ids and the context limit."""

    is_encoder_decoder: bool
    eos_token_ids: tuple[int, ...]
    encoder_ids: list[int]
    ids: list[int]
    max_context: int | None


def decode_start(
    model: torch.nn.Module,
    prompt_ids: Sequence[int],
    eos_token_ids: int | Iterable[int] | None,
    max_context: int | None,
) -> DecodeStart:
    prompt = [int(i) for i in prompt_ids]
    if not prompt:
        raise EmptyPromptError("The prompt is empty: type something for the model to continue.")
    if eos_token_ids is None:
        eos_token_ids = getattr(model.config, "eos_token_id", None)
    eos = tuple(as_id_list(eos_token_ids))
    if getattr(model.config, "is_encoder_decoder", False):
        start = model.config.decoder_start_token_id
        if start is None:
            raise ValueError(
                "This encoder-decoder model has no decoder_start_token_id in its config."
            )
        return DecodeStart(True, eos, prompt, [int(start)], max_context)
    limit = max_context or context_length(model)
    if limit is not None and len(prompt) >= limit:
        raise ValueError(
            f"The prompt has {len(prompt)} tokens but the model's context holds {limit}: "
            "shorten the prompt."
        )
    return DecodeStart(False, eos, [], prompt, limit)
