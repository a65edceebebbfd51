"""Ollama's replies, checked before the lab uses them.

Ollama (>= 0.12.11) answers ``POST /api/generate`` with ``"logprobs": true, "top_logprobs": N``
(N at most 20: server/routes.go refuses more) by adding ``logprobs``: one entry per generated
token, ``{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}``
(docs/openapi.yaml, schemas Logprob and TokenLogprob). Tokens are TEXT, never ids: the lab maps
each piece back to an id with the local tokenizer (``engine.serve.ollama.PieceMap``), and a
piece it cannot name is said, not guessed. A stream is one JSON object per line, the last with
``"done": true`` and ``done_reason``. ``/api/tags`` lists the models (``{"models": [{"name"}]}``),
``/api/version`` says the version.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from engine.validate.core import InputError, parse_as
from engine.validate.served import MAX_POSITIONS, check_mass, logprob

MAX_OLLAMA_TOP = 20  # server/routes.go: "top_logprobs must be between 0 and 20"
Piece = Annotated[str, Field(max_length=4096)]
Number = Annotated[float, Field(allow_inf_nan=False)]


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore")


class _Token(_Strict):
    token: Piece
    logprob: Number
    bytes: Annotated[list[Annotated[int, Field(ge=0, le=255)]], Field(max_length=4096)] | None = (
        None
    )


class _Logprob(_Token):
    top_logprobs: Annotated[list[_Token], Field(max_length=MAX_OLLAMA_TOP)] | None = None


class _Generate(_Strict):
    model: Annotated[str, Field(max_length=500)] | None = None
    response: Annotated[str, Field(max_length=4 * 1024 * 1024)] = ""
    done: bool = False
    done_reason: Annotated[str, Field(max_length=64)] | None = None
    logprobs: Annotated[list[_Logprob], Field(max_length=MAX_POSITIONS)] | None = None


class _Tag(_Strict):
    name: Annotated[str, Field(min_length=1, max_length=500)]


class _Tags(_Strict):
    models: Annotated[list[_Tag], Field(max_length=10_000)]


@dataclass(frozen=True)
class OllamaPosition:
    """One checked position: the chosen piece and its log-probability, the candidates
    (piece, log-probability) best first, and why it stopped (its last only)."""

    piece: str
    logprob: float
    top: tuple[tuple[str, float], ...]
    finish_reason: str | None
    model: str | None = None  # the model the reply says answered (None: it did not say)


def _piece(t: _Token) -> str:
    """The token's text: its bytes when given (exact), else its text."""
    if t.bytes:
        return bytes(t.bytes).decode("utf-8", "replace")
    return t.token


def positions(data: Any, want_top: bool = True) -> list[OllamaPosition]:
    """An ``/api/generate`` answer (or one line of its stream) -> checked positions. A line
    with no tokens (the last of a stream) gives an empty list; an answer with text but no
    ``logprobs`` is refused: the server ignored ``logprobs`` (Ollama older than 0.12.11)."""
    reply = parse_as(_Generate, data, "the answer", "Ollama's format")
    rows = reply.logprobs
    if rows is None:
        if reply.response:
            raise InputError(
                "Ollama sent text but no log-probabilities: it is older than 0.12.11 or "
                "ignored logprobs"
            )
        return []
    out = []
    for k, row in enumerate(rows):
        where = f"position {k + 1}"
        if want_top and not row.top_logprobs:
            raise InputError(f"{where}: Ollama sent no top_logprobs")
        top = [(_piece(t), logprob(t.logprob, where)) for t in row.top_logprobs or ()]
        top.sort(key=lambda t: -t[1])
        check_mass([lp for _p, lp in top], where)
        finish = reply.done_reason if reply.done and k == len(rows) - 1 else None
        value = logprob(row.logprob, where)
        out.append(OllamaPosition(_piece(row), value, tuple(top), finish, reply.model))
    return out


def same_model(answered: str | None, asked: str) -> bool:
    """Whether a reply's ``model`` is the one asked for (Ollama adds ":latest" to a bare
    name); a reply that does not say is taken as the one asked for."""
    if answered is None:
        return True
    bare = asked.removesuffix(":latest")
    return answered.removesuffix(":latest") == bare


def done(data: Any) -> str | None:
    """A stream line's reason to stop (``done_reason``, or "stop"), None while it goes on."""
    if isinstance(data, dict) and data.get("done") is True:
        reason = data.get("done_reason")
        return reason if isinstance(reason, str) and len(reason) <= 64 else "stop"
    return None


def model_names(data: Any) -> list[str]:
    """``/api/tags`` -> the model names."""
    return [m.name for m in parse_as(_Tags, data, "the model list", "Ollama's format").models]
