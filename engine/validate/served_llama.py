"""llama.cpp's ``llama-server`` replies, checked before the lab uses them.

``POST /completion`` (tools/server/README.md, "POST /completion"; server-task.cpp
``probs_vector_to_json``) answers, per generated token, ``completion_probabilities``:
``{"id", "token", "bytes", "logprob", "top_logprobs": [{"id", "token", "bytes", "logprob"}]}``,
the top-N of the softmax of the raw logits; with ``post_sampling_probs`` the same with ``prob``
and ``top_probs``: the probabilities after the server's sampler chain, only the tokens that
survived it (so fewer than N when the chain cut the rest). A probability of 0 is sent as the
float's lowest value (-3.4e38), read back as -inf. ``stop_type`` says why it stopped ("eos",
"limit", "word"). A stream sends one such object per token as a server-sent event.

A server is a stranger: every id is a whole number below the bound, every log-probability
finite and at most 0 (beyond rounding), every probability in [0, 1], the lists bounded, the
listed probabilities of distinct tokens no more than 1 in total.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from engine.validate.core import InputError, parse_as
from engine.validate.limits import MAX_SERVED_TOKEN_ID, MAX_TOP_N
from engine.validate.served import MAX_POSITIONS, PROB_SUM_TOLERANCE, logprob
from engine.validate.served_step import check_step

TokenId = Annotated[int, Field(ge=0, le=MAX_SERVED_TOKEN_ID)]
Number = Annotated[float, Field(allow_inf_nan=False)]
Text = Annotated[str, Field(max_length=4096)]
FINISH = {"eos": "stop", "word": "stop", "limit": "length"}  # OpenAI's names for the session


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore")


class _Candidate(_Strict):
    id: TokenId
    token: Text = ""
    logprob: Number | None = None
    prob: Annotated[float, Field(ge=0.0, le=1.0 + PROB_SUM_TOLERANCE)] | None = None


class _Position(_Candidate):
    top_logprobs: Annotated[list[_Candidate], Field(max_length=MAX_TOP_N)] | None = None
    top_probs: Annotated[list[_Candidate], Field(max_length=MAX_TOP_N)] | None = None


class _Completion(_Strict):
    completion_probabilities: Annotated[list[_Position], Field(max_length=MAX_POSITIONS)] | None = (
        None
    )
    tokens: Annotated[list[TokenId], Field(max_length=MAX_POSITIONS)] | None = None
    stop: bool = False
    stop_type: Annotated[str, Field(max_length=16)] | None = None


class _Meta(_Strict):
    n_ctx: Annotated[int, Field(ge=1, le=2**31)] | None = None
    n_vocab: Annotated[int, Field(ge=1, le=MAX_SERVED_TOKEN_ID)] | None = None


class _Model(_Strict):
    id: Annotated[str, Field(min_length=1, max_length=4096)]
    owned_by: Annotated[str, Field(max_length=200)] | None = None
    meta: _Meta | None = None


class _Models(_Strict):
    data: Annotated[list[_Model], Field(min_length=1, max_length=1000)]


@dataclass(frozen=True)
class LlamaPosition:
    """One checked position: the chosen id, its log-probability (raw) or probability (after the
    sampler), the candidates (id, value) best first, and why it stopped (its last only)."""

    token_id: int
    value: float  # logprob (raw view) or prob (post-sampling view)
    top: tuple[tuple[int, float], ...]
    finish_reason: str | None


def _bounded(i: int, limit: int, where: str) -> int:
    if i >= limit:
        raise InputError(f"{where}: token id {i} is beyond the vocabulary's bound of {limit}")
    return i


def positions(
    data: Any, post: bool = False, id_limit: int = MAX_SERVED_TOKEN_ID
) -> list[LlamaPosition]:
    """A ``/completion`` answer (or one stream event) -> its checked positions; ``post``: the
    request asked for ``post_sampling_probs`` (probabilities, not log-probabilities). An event
    without probabilities gives an empty list."""
    reply = parse_as(_Completion, data, "the server's answer", "llama-server's format")
    rows = reply.completion_probabilities or []
    out = []
    for k, row in enumerate(rows):
        where = f"position {k + 1}"
        top = row.top_probs if post else row.top_logprobs
        if top is None or (row.prob if post else row.logprob) is None:
            field = "prob/top_probs" if post else "logprob/top_logprobs"
            raise InputError(f"{where}: the server sent no {field} (it ignored n_probs?)")
        listed = [(_bounded(c.id, id_limit, where), _value(c, post, where)) for c in top]
        value = _value(row, post, where)
        chosen = _bounded(row.id, id_limit, where)
        ranked = check_step(  # issue 56: the same check as every server's, on log-probabilities
            chosen, _log(value, post), [(i, _log(v, post)) for i, v in listed], where,
            id_limit=id_limit,
        )  # fmt: skip
        given = dict(listed)  # no id twice (checked): each id's value as the server sent it
        top_out = tuple((i, given[i]) for i, _lp in ranked)
        finish = FINISH.get(reply.stop_type or "") if k == len(rows) - 1 else None
        out.append(LlamaPosition(chosen, value, top_out, finish))
    return out


def _log(value: float, post: bool) -> float:
    """A post-sampling probability as a log-probability (0 -> -inf); a logprob as it is."""
    if not post:
        return value
    return math.log(value) if value > 0 else -math.inf


def _value(c: _Candidate, post: bool, where: str) -> float:
    if post:
        if c.prob is None:
            raise InputError(f"{where}: a candidate has no prob")
        return min(1.0, c.prob)
    return logprob(c.logprob, where)  # null or the float's lowest -> -inf; above 0 refused


def finished(data: Any) -> str | None:
    """A stream event's reason to stop (the last event), None while it goes on."""
    reply = parse_as(_Completion, data, "the server's answer", "llama-server's format")
    return FINISH.get(reply.stop_type or "", "stop") if reply.stop else None


def models(data: Any) -> list[tuple[str, int | None, int | None, str]]:
    """``/v1/models`` -> (name, context length, vocabulary size, owner) per model."""
    listed = parse_as(_Models, data, "the model list", "llama-server's format").data
    return [
        (m.id, m.meta.n_ctx if m.meta else None, m.meta.n_vocab if m.meta else None,
         m.owned_by or "")
        for m in listed
    ]  # fmt: skip


def token_ids(data: Any, id_limit: int = MAX_SERVED_TOKEN_ID) -> list[int]:
    """``/tokenize`` -> its ids (``{"tokens": [...]}``), each inside [0, id_limit)."""
    tokens = data.get("tokens") if isinstance(data, dict) else None
    if (
        not isinstance(tokens, list)
        or len(tokens) > MAX_POSITIONS
        or not all(
            isinstance(t, int) and not isinstance(t, bool) and 0 <= t < id_limit for t in tokens
        )
    ):
        raise InputError(f"the /tokenize answer has no list of token ids below {id_limit}")
    return tokens


def text(data: Any, field: str = "content") -> str:
    """``/detokenize`` -> its text (``{"content": "..."}``)."""
    value = data.get(field) if isinstance(data, dict) else None
    if not isinstance(value, str):
        raise InputError(f"the answer has no text in {field!r}")
    return value
