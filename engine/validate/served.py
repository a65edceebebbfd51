"""A served model's replies (OpenAI-compatible ``/v1``), checked before the lab uses them.

A server is a stranger: its numbers may be NaN, infinite or above 0 (a log-probability is at
most 0), its token ids negative or 10**12 (the explore session sizes a tensor by the largest
id), its lists objects and its numbers strings. Everything is checked against a pydantic model
and the bounds in ``limits``; a reply that fails raises ``InputError`` saying what was wrong,
which the client turns into ``RemoteError(BAD_RESPONSE)``. Credentials never travel in an
address, and text a server sends is scrubbed of the key before anyone shows it."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated, Any
from urllib.parse import urlsplit, urlunsplit

from pydantic import BaseModel, ConfigDict, Field

from engine.validate.core import InputError, parse_as
from engine.validate.limits import LOGPROB_TOLERANCE, MAX_SERVED_TOKEN_ID, MAX_TOP_N
from engine.validate.served_step import check_step

TOKEN_ID_PREFIX = "token_id:"  # vLLM's spelling of a token with return_tokens_as_token_ids
MAX_POSITIONS = 100_000  # tokens in one completion (the window's own run limit)
IMPOSSIBLE_LOGPROB = -9999.0  # vLLM sends -inf as this; it and anything below read as -inf
PROB_SUM_TOLERANCE = 1e-3  # float32 rounding of 20 log-probabilities stays far below this

# null is the OpenAI format's "impossible" (no -inf in JSON); NaN and Infinity are refused.
LogProb = Annotated[float, Field(allow_inf_nan=False)] | None
Word = Annotated[str, Field(max_length=200)]


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore")


class _LogprobBlock(_Strict):
    tokens: Annotated[list[Word], Field(max_length=MAX_POSITIONS)]
    token_logprobs: Annotated[list[LogProb], Field(max_length=MAX_POSITIONS)]
    top_logprobs: (
        Annotated[
            list[Annotated[dict[Word, LogProb], Field(max_length=MAX_TOP_N + 1)] | None],
            Field(max_length=MAX_POSITIONS),
        ]
        | None
    ) = None


class _Choice(_Strict):
    logprobs: _LogprobBlock | None = None
    finish_reason: Annotated[str, Field(max_length=64)] | None = None


class _Completion(_Strict):
    choices: Annotated[list[_Choice], Field(min_length=1, max_length=16)]


class _ModelEntry(_Strict):
    id: Annotated[str, Field(min_length=1, max_length=500)]
    max_model_len: Annotated[int, Field(ge=1, le=2**31)] | None = None


class _ModelList(_Strict):
    data: Annotated[list[_ModelEntry], Field(max_length=10_000)]


@dataclass(frozen=True)
class Position:
    """One checked position: the chosen id and logprob, the top candidates (id, logprob) best
    first, and why the answer stopped (on its last position only)."""

    token_id: int
    logprob: float
    top: tuple[tuple[int, float], ...]
    finish_reason: str | None


def token_id(key: str, id_limit: int = MAX_SERVED_TOKEN_ID) -> int:
    """``token_id:123`` -> 123, inside [0, id_limit)."""
    if not key.startswith(TOKEN_ID_PREFIX):
        raise InputError(
            f"the server sent the token {key[:40]!r} as text, not as an id: it does not support "
            "return_tokens_as_token_ids (vLLM does), so the lab cannot tell which token it is"
        )
    digits = key[len(TOKEN_ID_PREFIX) :]
    if not (digits.isascii() and digits.isdigit()) or len(digits) > 12:
        raise InputError(f"the server sent a token id that is not a whole number: {key[:40]!r}")
    value = int(digits)
    if value >= id_limit:
        raise InputError(
            f"the server sent token id {value}, beyond the vocabulary's bound of {id_limit}"
        )
    return value


def logprob(value: float | None, where: str) -> float:
    """A checked log-probability: null, or vLLM's -9999 (its spelling of -inf, serving.py's
    clamp), or below -> -inf (impossible); above 0 (beyond rounding) is an error naming the
    tolerance."""
    if value is None or value <= IMPOSSIBLE_LOGPROB:
        return -math.inf
    if value > LOGPROB_TOLERANCE:
        raise InputError(
            f"{where}: the server sent the log-probability {value:.4g}, above 0 (a probability "
            f"above 1; the tolerance is {LOGPROB_TOLERANCE})"
        )
    return min(0.0, float(value))


def check_mass(logprobs: list[float], where: str) -> None:
    """Listed probabilities of distinct tokens cannot add up to more than 1 (beyond rounding)."""
    total = math.fsum(math.exp(lp) for lp in logprobs)
    if total > 1.0 + PROB_SUM_TOLERANCE:
        raise InputError(
            f"{where}: the listed probabilities add up to {total:.4g}, more than 1 (the "
            f"tolerance is {PROB_SUM_TOLERANCE})"
        )


def check_rank(rank: int, lp: float, where: str) -> None:
    """A token at rank r has r - 1 tokens at least as likely: r times its probability is at
    most 1. (p = 1 at rank 40,000 would need 39,999 more tokens of probability 1.)"""
    if rank * math.exp(lp) > 1.0 + PROB_SUM_TOLERANCE:
        raise InputError(
            f"{where}: rank {rank:,} with probability {math.exp(lp):.4g} is impossible (the "
            f"{rank - 1:,} likelier tokens would need more than the whole probability)"
        )


def positions(data: Any, id_limit: int = MAX_SERVED_TOKEN_ID) -> list[Position]:
    """A completion (or one stream chunk) -> its checked positions. A chunk with no tokens
    gives an empty list."""
    completion = parse_as(_Completion, data, "the server's answer", "in the /v1 format")
    choice = completion.choices[0]
    block = choice.logprobs
    if block is None:
        raise InputError("the server sent no log-probabilities with the token")
    n = len(block.tokens)
    tops = block.top_logprobs if block.top_logprobs is not None else [None] * n
    if len(block.token_logprobs) != n or len(tops) != n:
        raise InputError(
            f"the server's logprobs lists differ in length ({n} tokens, "
            f"{len(block.token_logprobs)} logprobs, {len(tops)} top lists)"
        )
    out = []
    for i, (key, lp, top) in enumerate(zip(block.tokens, block.token_logprobs, tops, strict=True)):
        where = f"position {i + 1}"
        chosen, value = token_id(key, id_limit), logprob(lp, where)
        listed = [(token_id(k, id_limit), logprob(v, where)) for k, v in (top or {}).items()]
        ranked = check_step(chosen, value, listed, where, id_limit=id_limit)  # issue 56
        finish = choice.finish_reason if i == n - 1 else None
        out.append(Position(chosen, value, ranked, finish))
    return out


def has_tokens(data: Any) -> bool:
    """Whether a stream chunk carries positions (the first and last chunks may not)."""
    try:
        block = data["choices"][0]["logprobs"]
        return bool(block and block["tokens"])
    except (KeyError, IndexError, TypeError):
        return False


def models(data: Any) -> list[tuple[str, int | None]]:
    """``/v1/models`` -> (name, context length or None) for each served model."""
    listed = parse_as(_ModelList, data, "the model list", "in the /v1 format")
    return [(m.id, m.max_model_len) for m in listed.data]


def token_ids(data: Any, id_limit: int = MAX_SERVED_TOKEN_ID) -> list[int]:
    """``/tokenize`` -> its ids, each inside [0, id_limit)."""
    tokens = data.get("tokens") if isinstance(data, dict) else None
    if not isinstance(tokens, list) or not all(
        isinstance(t, int) and not isinstance(t, bool) and 0 <= t < id_limit for t in tokens
    ):
        raise InputError(f"the /tokenize answer has no list of token ids below {id_limit}")
    return tokens


def unknown_ids_notice(bundle: object) -> str:
    """A sentence for the status line when a served model's client saw token ids the local
    tokenizer does not know (they show as ``<id>``); "" otherwise."""
    client = getattr(bundle, "client", None)
    unknown = sorted(getattr(client, "unknown_ids", ()) or ())
    if not unknown:
        return ""
    shown = ", ".join(str(i) for i in unknown[:3]) + (", ..." if len(unknown) > 3 else "")
    return (
        f" Warning: the server sent {len(unknown)} token id(s) the local tokenizer does not "
        f"know ({shown}; it has {client.vocab_size} tokens): is it the served model's "
        "tokenizer?"
    )


# -- credentials ---------------------------------------------------------------------------


def has_credentials(url: str) -> bool:
    """Whether an address carries a user name or password (``http://user:secret@host``)."""
    try:
        parts = urlsplit(url if "://" in url else "http://" + url)
        return parts.username is not None or parts.password is not None
    except ValueError:
        return "@" in url


def redact_url(url: str) -> str:
    """The address with any user name and password replaced by ``***``: safe to show."""
    if not has_credentials(url):
        return url
    try:
        parts = urlsplit(url)
        host = parts.netloc.rpartition("@")[2]
        return urlunsplit((parts.scheme, f"***@{host}", parts.path, parts.query, ""))
    except ValueError:
        return "(an address with a password)"


CREDENTIALS_REFUSED = (
    "The server address holds a user name or password ({url}). The lab never keeps "
    "credentials in an address (they would end up in settings, autosaves and exports): remove "
    "them, and give the API key in DECODING_LAB_API_KEY or the system keychain."
)


# Characters a terminal acts on rather than shows: C0 and C1 controls and DEL (escape starts a
# title change or a screen clear, bell rings), and the bidirectional overrides that reorder
# what follows them.
_BIDI = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def printable(text: str, keep: str = "") -> str:
    """``text`` with every control character (and bidi override) written as an escape
    (``\\x1b``, ``\\u202e``) so that it is shown, never obeyed; ``keep``: controls to leave
    as they are (a token stream keeps its newlines)."""
    if text.isprintable() and not _BIDI.intersection(text):
        return text
    out = []
    for ch in text:
        code = ord(ch)
        if ch in keep or not (code < 0x20 or 0x7F <= code < 0xA0 or ch in _BIDI):
            out.append(ch)
        elif code < 0x100:
            out.append(f"\\x{code:02x}")
        else:
            out.append(f"\\u{code:04x}")
    return "".join(out)


def scrub(text: str, secrets: tuple[str, ...]) -> str:
    """``text`` with every secret (the API key, a password) replaced by ``[key removed]``."""
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, "[key removed]")
    return text
