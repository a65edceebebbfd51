"""SGLang's native ``/generate`` replies, checked before the lab uses them.

With ``return_logprob`` and ``top_logprobs_num`` (docs/basic_usage/sampling_params.md,
"/generate Endpoint"), ``meta_info`` holds ``output_token_logprobs``: one
``[logprob, token_id, text or null]`` per generated token, and ``output_top_logprobs``: per
token a list of such triples (null where none); with ``logprob_start_len`` 0 the same for the
prompt in ``input_token_logprobs`` / ``input_top_logprobs`` (the first prompt token has a null
log-probability: it has no context). The triples are built in
python/sglang/srt/managers/tokenizer_manager.py ``detokenize_logprob_tokens``.
``finish_reason`` is ``{"type": "length" | "stop" | "abort", ...}``. The log-probabilities are
SGLang's sampler's: after its temperature and before its top-k / top-p / min-p filters, raw
at temperature 0 or 1 or when the server runs with SGLANG_RETURN_ORIGINAL_LOGPROB=1. A stream
sends ``data: {...}`` events whose lists are the whole answer so far (or, with incremental
streaming, the new part only); ``completion_tokens`` says how many tokens there are.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from engine.validate.core import InputError, parse_as
from engine.validate.limits import MAX_SERVED_TOKEN_ID, MAX_TOP_N
from engine.validate.served import MAX_POSITIONS, logprob
from engine.validate.served_step import check_step

# Scalars strict (a string is not a number, true is not an id); the triples are JSON arrays
# read as tuples, which only the lax mode allows.
TokenId = Annotated[int, Field(strict=True, ge=0, le=MAX_SERVED_TOKEN_ID)]
Number = Annotated[float, Field(strict=True, allow_inf_nan=False)]
Text = Annotated[str, Field(strict=True, max_length=4096)]
Triple = tuple[Number | None, TokenId, Text | None]
TopRow = Annotated[list[Triple], Field(max_length=MAX_TOP_N)] | None


class _Strict(BaseModel):
    model_config = ConfigDict(extra="ignore")


class _Finish(_Strict):
    type: Annotated[str, Field(strict=True, max_length=32)]
    message: Annotated[str, Field(strict=True, max_length=2000)] | None = None


class _Meta(_Strict):
    finish_reason: _Finish | None = None
    completion_tokens: Annotated[int, Field(strict=True, ge=0, le=MAX_POSITIONS)] | None = None
    output_token_logprobs: Annotated[list[Triple], Field(max_length=MAX_POSITIONS)] | None = None
    output_top_logprobs: Annotated[list[TopRow], Field(max_length=MAX_POSITIONS)] | None = None
    input_token_logprobs: Annotated[list[Triple], Field(max_length=MAX_POSITIONS)] | None = None
    input_top_logprobs: Annotated[list[TopRow], Field(max_length=MAX_POSITIONS)] | None = None


class _Generate(_Strict):
    meta_info: _Meta


@dataclass(frozen=True)
class SGLangPosition:
    """One checked position: the token, its log-probability (None: the first prompt token),
    the candidates (id, log-probability, text or None) best first, why it stopped."""

    token_id: int
    logprob: float | None
    top: tuple[tuple[int, float, str | None], ...]
    finish_reason: str | None = None


def _meta(data: Any) -> _Meta:
    return parse_as(_Generate, data, "the answer", "SGLang's format").meta_info


def _rows(
    tokens: list[Triple], tops: list[TopRow] | None, id_limit: int, what: str, first_null: bool
) -> list[SGLangPosition]:
    tops = tops if tops is not None else [None] * len(tokens)
    if len(tops) != len(tokens):
        raise InputError(f"{what}: {len(tokens)} tokens but {len(tops)} top lists")
    out = []
    for k, ((lp, tid, _text), top) in enumerate(zip(tokens, tops, strict=True)):
        where = f"{what} {k + 1}"
        if tid >= id_limit:
            raise InputError(f"{where}: token id {tid} is beyond the vocabulary ({id_limit})")
        if lp is None and not (first_null and k == 0):
            raise InputError(f"{where}: the server sent no log-probability")
        listed = [(t, logprob(v, where)) for v, t, _w in top or ()]
        value = None if lp is None else logprob(lp, where)
        # issue 56: the same check as every server's (a prompt token may be impossible)
        ranked = check_step(tid, value, listed, where, id_limit=id_limit, generated=not first_null)
        words = {t: w for _v, t, w in top or ()}  # no id twice (checked)
        out.append(SGLangPosition(tid, value, tuple((t, v, words[t]) for t, v in ranked)))
    return out


def finish_reason(data: Any) -> str | None:
    """Why the answer stopped ("length", "stop"), None while it goes on; an aborted request
    raises with the server's message."""
    meta = _meta(data)
    reason = meta.finish_reason
    if reason is None:
        return None
    if reason.type == "abort":
        raise InputError(f"SGLang aborted the request: {reason.message or 'no reason given'}")
    return "length" if reason.type == "length" else "stop"


def output_positions(data: Any, id_limit: int = MAX_SERVED_TOKEN_ID) -> list[SGLangPosition]:
    """The generated tokens of an answer (a stream event: the list it carries), checked."""
    meta = _meta(data)
    if meta.output_token_logprobs is None:
        raise InputError("SGLang sent no output_token_logprobs (return_logprob was ignored?)")
    return _rows(meta.output_token_logprobs, meta.output_top_logprobs, id_limit, "position", False)


def completion_tokens(data: Any) -> int | None:
    return _meta(data).completion_tokens


def prompt_positions(
    data: Any, ids: list[int], id_limit: int = MAX_SERVED_TOKEN_ID
) -> list[SGLangPosition]:
    """The prompt's positions of an answer asked with ``logprob_start_len`` 0: one per id
    sent, each the id sent (the first with no log-probability)."""
    meta = _meta(data)
    if meta.input_token_logprobs is None:
        raise InputError("the server sent no prompt log-probabilities (input_token_logprobs)")
    rows = _rows(meta.input_token_logprobs, meta.input_top_logprobs, id_limit, "prompt", True)
    if [r.token_id for r in rows] != list(ids):
        raise InputError(f"the server scored {len(rows)} prompt tokens, not the {len(ids)} sent")
    return rows
