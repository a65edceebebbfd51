"""What a served session knows of one position from N candidates, and where a served run
starts; shared by explore mode (``remote_session``) and stream mode (``remote_stream``)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from engine.errors import EmptyPromptError
from engine.models.prompt import DecodeStart, as_id_list

LN2 = math.log(2.0)


@dataclass(frozen=True)
class TopNMath:
    """What explore mode knows of one position from N candidates."""

    raw: tuple[float, ...]  # exp(logprob): true probabilities, not renormalised
    other: float  # raw mass outside the N candidates
    entropy_raw: float  # bits; a lower bound (the tail counted as one outcome)


def top_n_math(logprobs: Sequence[float]) -> TopNMath:
    raw = tuple(math.exp(lp) for lp in logprobs)
    other = max(0.0, 1.0 - math.fsum(raw))
    h = -math.fsum(p * math.log(p) for p in (*raw, other) if p > 0)
    return TopNMath(raw, other, max(0.0, h / LN2))


def served_start(
    prompt_ids: Sequence[int], eos_token_ids: int | Iterable[int] | None, max_context: int | None
) -> DecodeStart:
    """Where a served run starts: the prompt checked against the served context."""
    prompt = [int(i) for i in prompt_ids]
    if not prompt:
        raise EmptyPromptError("The prompt is empty: type something for the model to continue.")
    if max_context is not None and len(prompt) >= max_context:
        raise ValueError(
            f"The prompt has {len(prompt)} tokens but the served model's context holds "
            f"{max_context}: shorten the prompt."
        )
    return DecodeStart(False, tuple(as_id_list(eos_token_ids)), [], prompt, max_context)
