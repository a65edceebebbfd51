"""The guess round: the class guesses the next token before its distribution is shown. No Qt.

The teacher types the class's guesses (separated by commas or new lines, several allowed).
Each guess is matched to a token the way a person would read it: the leading space of a token
is optional (" Paris" matches "Paris"), an exact-case match is preferred and a match ignoring
case is taken when there is none, and a guess that matches several tokens takes the best
ranked. Ranks and probabilities are the model's own (the raw distribution, before the sampler).

Scoring rule: 3 points when the guess is the token that was picked, otherwise 2 points when it
is in the model's top 3, 1 point in its top 10, and 0 beyond (or when it is no single token's
text). A guess for a word that the tokenizer splits into pieces is judged by its first piece,
since that is the token the model would write first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from engine.records import Step

POINTS_CHOSEN, POINTS_TOP3, POINTS_TOP10 = 3, 2, 1


def points_for(rank: int | None, chosen: bool) -> int:
    """The scoring rule above."""
    if chosen:
        return POINTS_CHOSEN
    if rank is None:
        return 0
    if rank <= 3:
        return POINTS_TOP3
    if rank <= 10:
        return POINTS_TOP10
    return 0


def split_guesses(text: str) -> list[str]:
    """Guesses from what the teacher typed: comma- or line-separated, trimmed, blanks and
    repeats dropped, in the order typed. A guess in double quotes is kept as typed, commas and
    spaces included: ``","`` guesses the comma, ``" the"`` the token with its space."""
    out: list[str] = []
    for quoted, plain in re.findall(r'[ \t]*"([^"\n]+)"[ \t]*|([^,\n]+)', text):
        guess = quoted or plain.strip()
        if guess and guess not in out:
            out.append(guess)
    return out


@dataclass(frozen=True)
class GuessResult:
    guess: str  # as typed
    token_id: int | None  # the token it was matched to; None: no token
    token_text: str  # that token's text ("" when none)
    rank: int | None  # 1-based rank in the model's distribution; None: beyond the top N
    raw_prob: float | None  # the model's probability; None when not known (beyond the top N)
    prob: float | None  # after the sampler chain
    chosen: bool  # the token that was picked
    points: int
    note: str = ""  # for the class: "not in the top 50", "judged by its first piece 'eleph'"

    def describe(self) -> str:
        if self.token_id is None:
            return f"{self.guess!r}: {self.note}"
        where = f"rank {self.rank}" if self.rank is not None else self.note
        prob = f", {self.raw_prob:.1%}" if self.raw_prob is not None else ""
        picked = ", picked!" if self.chosen else ""
        return f"{self.guess!r}: {where}{prob}{picked} ({self.points} pt)"


@dataclass(frozen=True)
class GuessRound:
    step_index: int
    chosen_text: str  # the token that was picked
    top_n: int  # how many ranks are known
    results: tuple[GuessResult, ...]

    @property
    def points(self) -> int:
        return sum(r.points for r in self.results)

    @property
    def found(self) -> bool:
        """Someone guessed the token that was picked."""
        return any(r.chosen for r in self.results)

    def marks(self) -> dict[int, str]:
        """token id -> the guess that named it (the first one), for marking the guessed bars
        of the distribution plot; guesses that matched no token are left out."""
        out: dict[int, str] = {}
        for r in self.results:
            if r.token_id is not None:
                out.setdefault(r.token_id, r.guess)
        return out


@dataclass
class Scoreboard:
    """The running score of a class over several rounds."""

    rounds: list[GuessRound] = field(default_factory=list)

    def add(self, round_: GuessRound) -> int:
        self.rounds.append(round_)
        return self.total

    @property
    def total(self) -> int:
        return sum(r.points for r in self.rounds)

    @property
    def found(self) -> int:
        """Rounds in which the picked token was guessed."""
        return sum(r.found for r in self.rounds)

    def reset(self) -> None:
        self.rounds.clear()

    def describe(self) -> str:
        n = len(self.rounds)
        return f"{self.total} points in {n} round{'s' if n != 1 else ''} ({self.found} found)"


def _matches(token: str, guess: str, fold: bool) -> bool:
    if fold:
        token, guess = token.casefold(), guess.casefold()
    return token == guess or token == " " + guess


def _encodings(tokenizer: Any, guess: str) -> list[list[int]]:
    """The guess as the tokenizer writes it after a space (as a word in running text) and on
    its own. An encoding whose first piece is only a space (byte-level tokenizers) is left
    out: the class guessed a word, not a space."""
    out = []
    for variant in (" " + guess, guess):
        ids = list(tokenizer(variant, add_special_tokens=False)["input_ids"])
        if ids and tokenizer.decode(ids[:1]).strip() and ids not in out:
            out.append(ids)
    return out


def match_guess(guess: str, step: Step, tokenizer: Any = None) -> GuessResult:
    """Match one guess to the step's tokens (see the module's rules) and score it."""
    candidates = step.candidates
    # The picked token is known even when it ranks beyond the stored top N.
    known = list(candidates)
    if all(c.token_id != step.token_id for c in candidates):
        known.append(None)  # stands for the picked token, placed after the top N
    for fold in (False, True):
        for c in known:
            text = step.token_str if c is None else c.text
            if _matches(text, guess, fold):
                return _result(guess, step, c, len(candidates))
    # Not among the known tokens: ask the tokenizer which token the guess would be.
    if tokenizer is not None:
        encodings = _encodings(tokenizer, guess)
        for ids in encodings:
            for c in candidates:
                if c.token_id == ids[0]:
                    note = "" if len(ids) == 1 else f"judged by its first piece {c.text!r}"
                    return _result(guess, step, c, len(candidates), note)
            if ids[0] == step.token_id:
                return _result(guess, step, None, len(candidates))
        if encodings:
            ids = encodings[0]
            text = tokenizer.decode(ids[:1])
            piece = "" if len(ids) == 1 else f" (its first piece {text!r})"
            return GuessResult(
                guess, ids[0], text, None, None, None, chosen=False, points=0,
                note=f"not in the top {len(candidates)}{piece}",
            )  # fmt: skip
    return GuessResult(
        guess, None, "", None, None, None, chosen=False, points=0,
        note=f"not in the top {len(candidates)}",
    )  # fmt: skip


def _result(guess: str, step: Step, c: Any, top_n: int, note: str = "") -> GuessResult:
    if c is None:  # the picked token, ranked beyond the top N: the step knows its rank
        chosen = True
        token_id, text, rank, raw, prob = (
            step.token_id, step.token_str, step.rank, step.raw_prob, step.prob
        )  # fmt: skip
    else:
        chosen = c.token_id == step.token_id
        token_id, text, raw, prob = c.token_id, c.text, c.raw_prob, c.prob
        rank = step.candidates.index(c) + 1
    return GuessResult(
        guess, token_id, text, rank, raw, prob, chosen, points_for(rank, chosen), note
    )


def score_round(guesses: str | list[str], step: Step, tokenizer: Any = None) -> GuessRound:
    """Score the class's guesses (the typed text, or a list) for the hidden ``step``. Two
    guesses that land on the same token score it once (the first one typed)."""
    items = split_guesses(guesses) if isinstance(guesses, str) else list(guesses)
    results: list[GuessResult] = []
    seen: set[int] = set()
    for g in items:
        r = match_guess(g, step, tokenizer)
        if r.token_id is not None and r.token_id in seen and r.points:
            r = GuessResult(
                r.guess, r.token_id, r.token_text, r.rank, r.raw_prob, r.prob, r.chosen, 0,
                "same token as an earlier guess",
            )  # fmt: skip
        if r.token_id is not None:
            seen.add(r.token_id)
        results.append(r)
    return GuessRound(step.index, step.token_str, len(step.candidates), tuple(results))
