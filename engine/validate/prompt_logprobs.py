"""A served model's prompt log-probabilities (vLLM's ``prompt_logprobs`` on ``/v1/completions``),
checked before a text is scored with them (issue 25).

vLLM 0.32 answers ``choices[0].prompt_logprobs``: one entry per prompt token, ``null`` for the
first (it has no context), else an object ``{"<token id>": {"logprob", "rank",
"decoded_token"}}`` holding the prompt's own token (with its rank over the whole vocabulary)
and the top-N (vllm/entrypoints/openai/completion/protocol.py, CompletionResponseChoice; an
impossible token's -inf is sent as -9999.0, serving.py's clamp_prompt_logprobs, read back as
-inf).

A server is a stranger: every number is checked (finite, a log-probability at most 0 beyond
rounding, a rank from 1), every id is a whole number below the local vocabulary's bound, the
lists are bounded and must have one entry per token sent, the token sent must be in its own
entry, its rank must not claim better than the likelier tokens listed beside it, the listed
probabilities cannot add up to more than 1, and a rank r cannot carry a probability above 1/r."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from engine.validate.core import InputError, describe
from engine.validate.limits import MAX_SERVED_TOKEN_ID, MAX_TOP_N
from engine.validate.served import MAX_POSITIONS, logprob
from engine.validate.served_step import check_step

MAX_RANK = 2**31 - 1


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore")


class _Entry(_Strict):
    logprob: Annotated[float, Field(allow_inf_nan=False)]
    rank: Annotated[int, Field(ge=1, le=MAX_RANK)] | None = None
    decoded_token: Annotated[str, Field(max_length=200)] | None = None


Key = Annotated[str, Field(min_length=1, max_length=12)]
_Position = Annotated[dict[Key, _Entry], Field(max_length=MAX_TOP_N + 1)] | None


class _Choice(_Strict):
    prompt_logprobs: Annotated[list[_Position], Field(max_length=MAX_POSITIONS)] | None = None


class _Completion(_Strict):
    choices: Annotated[list[_Choice], Field(min_length=1, max_length=16)]


@dataclass(frozen=True)
class PromptPosition:
    """One checked prompt position: the token sent, its log-probability and rank over the
    vocabulary, and the listed candidates (id, log-probability, text or None) best first."""

    token_id: int
    logprob: float
    rank: int
    top: tuple[tuple[int, float, str | None], ...]


def _id(key: str, id_limit: int, where: str) -> int:
    if not (key.isascii() and key.isdigit()):
        raise InputError(f"{where}: the token id {key[:20]!r} is not a whole number")
    value = int(key)
    if value >= id_limit:
        raise InputError(f"{where}: token id {value} is beyond the vocabulary ({id_limit} tokens)")
    return value


def prompt_positions(
    data: Any, ids: list[int], id_limit: int = MAX_SERVED_TOKEN_ID
) -> list[PromptPosition | None]:
    """A completion answered with ``prompt_logprobs`` for the prompt ``ids`` -> one checked
    position per token (None for the first, which has no context)."""
    try:
        completion = _Completion.model_validate(data)
    except ValidationError as exc:
        raise InputError(f"the server's answer is not in vLLM's format ({describe(exc)})") from None
    rows = completion.choices[0].prompt_logprobs
    if rows is None:
        raise InputError("the server sent no prompt log-probabilities (vLLM's prompt_logprobs)")
    if len(rows) != len(ids):
        raise InputError(f"the server sent {len(rows)} prompt positions for {len(ids)} tokens")
    out: list[PromptPosition | None] = [None]
    for i in range(1, len(ids)):
        where = f"prompt position {i + 1}"
        row = rows[i]
        if row is None:
            raise InputError(f"{where}: the server sent no log-probabilities")
        entries = [(_id(k, id_limit, where), e) for k, e in row.items()]
        mine = next((e for t, e in entries if t == ids[i]), None)
        if mine is None:
            raise InputError(f"{where}: the token sent ({ids[i]}) is not among those listed")
        if mine.rank is None:
            raise InputError(f"{where}: the server sent no rank for the token")
        value = logprob(mine.logprob, where)
        listed = [(t, logprob(e.logprob, where)) for t, e in entries]
        # issue 56: the same check as every server's step, with the rank (SGLang's too)
        ranked = check_step(
            ids[i], value, listed, where, id_limit=id_limit, rank=mine.rank, generated=False
        )
        words = {t: e.decoded_token for t, e in entries}
        top = tuple((t, lp, words[t]) for t, lp in ranked)
        out.append(PromptPosition(ids[i], value, mine.rank, top))
    return out
