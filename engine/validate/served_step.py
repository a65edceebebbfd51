"""One served step checked as probabilities, whatever the server (vLLM, llama-server, Ollama,
SGLang) and whatever its reply's shape: every backend's parser turns its reply into (chosen,
its log-probability, the listed candidates) and hands them here before anything is drawn,
written or sampled from (issue 56).

A reply passes only if it could be a distribution's top-N:

* every key (a token id, or Ollama's piece before it is mapped to one) listed once: a
  duplicate is refused, never merged (two bars for one token, and their mass counted twice);
* every probability finite and in [0, 1] (log-probabilities at most 0, beyond rounding);
* ids inside the bound (the tokenizer's vocabulary where it is known);
* the listed mass, plus the chosen token's where it is not listed, at most 1 + ``PROB_TOLERANCE``;
* the chosen token's probability the same as its own entry where it is listed, and, where it
  is not, no higher than the least likely listed one (a top-N leaves out no likelier token);
* a rank, where the server gives one, consistent with the list (not better than the listed
  tokens likelier than it) and possible (r tokens at p or more: r * p <= 1);
* something with a probability above 0: a chosen token at probability 0 (one no one offered)
  is refused for a generated token; a scored prompt token may be impossible, its list may not.

A refusal is an ``InputError`` naming the position and what was sent, which the client turns
into ``RemoteError(BAD_RESPONSE)`` with the server's address.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable
from typing import TypeVar

from engine.validate.core import InputError
from engine.validate.limits import LOGPROB_TOLERANCE

PROB_TOLERANCE = 1e-3  # float32 rounding of 20 log-probabilities stays far below this

K = TypeVar("K", bound=Hashable)


def _shown(key: Hashable) -> str:
    return f"token id {key}" if isinstance(key, int) else f"the token {str(key)[:40]!r}"


def _p(lp: float) -> str:
    return f"p={math.exp(lp):.4g}"


def _value(key: Hashable, lp: float, where: str) -> float:
    if not isinstance(lp, (int, float)) or isinstance(lp, bool) or math.isnan(lp):
        raise InputError(f"{where}: {_shown(key)} has no probability (it sent {lp!r})")
    if lp > LOGPROB_TOLERANCE:
        raise InputError(
            f"{where}: {_shown(key)} has the log-probability {lp:.4g}, a probability above 1"
        )
    return min(0.0, float(lp))


def _bounded(key: Hashable, id_limit: int | None, where: str) -> None:
    if isinstance(key, bool) or not isinstance(key, (int, str)):
        raise InputError(f"{where}: a candidate is neither a token id nor a token's text")
    if isinstance(key, int) and (key < 0 or (id_limit is not None and key >= id_limit)):
        raise InputError(f"{where}: token id {key} is outside the vocabulary ({id_limit} tokens)")


def check_step(
    chosen: K,
    chosen_lp: float | None,
    listed: Iterable[tuple[K, float]],
    where: str,
    *,
    id_limit: int | None = None,
    rank: int | None = None,
    generated: bool = True,
) -> tuple[tuple[K, float], ...]:
    """The checked step: the listed (key, log-probability) best first (ties by key where the
    keys are ids). ``chosen_lp`` None: the position has no value (a prompt's first token),
    only its list is checked. ``generated``: the server chose the token (so it cannot have
    probability 0); False for a scored prompt token. Raises ``InputError`` saying what is
    wrong."""
    _bounded(chosen, id_limit, where)
    seen: dict[K, float] = {}
    for key, lp in listed:
        _bounded(key, id_limit, where)
        if key in seen:
            raise InputError(
                f"{where}: {_shown(key)} is listed twice ({_p(seen[key])} and "
                f"{_p(_value(key, lp, where))}): a token has one probability"
            )
        seen[key] = _value(key, lp, where)
    ranked = tuple(sorted(seen.items(), key=_best_first))
    if chosen_lp is None:
        _check_mass(seen.values(), where)
        _something_possible(ranked, None, where, generated)
        return ranked
    mine = _value(chosen, chosen_lp, where)
    if chosen in seen:
        theirs = seen[chosen]
        if abs(math.exp(theirs) - math.exp(mine)) > PROB_TOLERANCE:
            raise InputError(
                f"{where}: the chosen {_shown(chosen)} has {_p(mine)} but its own entry in the "
                f"list says {_p(theirs)}"
            )
        _check_mass(seen.values(), where)
    else:
        _check_mass([*seen.values(), mine], where, unlisted=chosen)
        if ranked and math.exp(mine) > math.exp(ranked[-1][1]) + PROB_TOLERANCE:
            raise InputError(
                f"{where}: the chosen {_shown(chosen)} has {_p(mine)} but is not listed, though "
                f"{_shown(ranked[-1][0])} at {_p(ranked[-1][1])} is: a top list leaves out no "
                "likelier token"
            )
    if rank is not None:
        _check_rank(rank, mine, ranked, where)
    _something_possible(ranked, mine, where, generated)
    return ranked


def _best_first(item: tuple[Hashable, float]) -> tuple[float, int]:
    key, lp = item
    return -lp, key if isinstance(key, int) else 0


def _check_mass(values: Iterable[float], where: str, unlisted: Hashable | None = None) -> None:
    total = math.fsum(math.exp(lp) for lp in values)
    if total > 1.0 + PROB_TOLERANCE:
        plus = f" with the chosen {_shown(unlisted)}" if unlisted is not None else ""
        raise InputError(
            f"{where}: the listed probabilities{plus} add up to {total:.4g}, more than 1 (the "
            f"tolerance is {PROB_TOLERANCE})"
        )


def _check_rank(rank: int, lp: float, ranked: tuple[tuple[K, float], ...], where: str) -> None:
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
        raise InputError(f"{where}: the rank {rank!r} is not a whole number from 1")
    likelier = sum(1 for _k, v in ranked if v > lp + LOGPROB_TOLERANCE)
    if rank <= likelier:
        raise InputError(f"{where}: rank {rank} but {likelier} listed tokens are likelier")
    if rank * math.exp(lp) > 1.0 + PROB_TOLERANCE:
        raise InputError(
            f"{where}: rank {rank:,} with probability {math.exp(lp):.4g} is impossible (the "
            f"{rank - 1:,} likelier tokens would need more than the whole probability)"
        )


def _something_possible(
    ranked: tuple[tuple[K, float], ...], mine: float | None, where: str, generated: bool
) -> None:
    if ranked and all(v == -math.inf for _k, v in ranked) and (mine is None or mine == -math.inf):
        raise InputError(
            f"{where}: every candidate the server listed has probability 0: that is no distribution"
        )
    if generated and mine == -math.inf:
        raise InputError(
            f"{where}: the server chose a token it gives probability 0 (a token it could not "
            "have drawn)"
        )
