"""The live round: the class answers the model's next token from their own phones. No Qt, no
torch (the model's side is ``live_model``, the network's ``live_server``).

One ``LiveRound`` holds the students and the questions. The teacher (the window) asks a
question in one of three modes, closes it and reveals it; the students (the server's thread)
join and answer. Every call takes the round's lock, so both threads may call it; none blocks
for longer than a dictionary update.

- **guess**: a student types the next word. At the reveal each guess is read as the model's
  tokenizer reads it (``live_model.guess_tokens``) and scored by the model's probability of
  that token, its surprisal in bits (the log score, lower is better) and its rank.
- **vote**: a student picks one of the model's top-N candidates (shown in alphabetical order,
  without probabilities until the reveal); scored the same way.
- **sampler**: as vote, and the class's choice becomes the token (the majority, ties to the
  model's more probable token, or a draw from the class's own votes).

Student input is hostile until validated: every message is a dict with known keys, text is
normalised (NFC), control and format characters are removed, lengths are bounded; a student
answers once per question (a new answer replaces the old one, so tallies count each student
once). The cap on students is ``MAX_STUDENTS``. Nothing here is written to disk; ``export``
returns nicknames and answers only, for the teacher to save if they choose.
"""

from __future__ import annotations

import math
import random
import secrets
import threading
import unicodedata
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engine.records import CLASS

MAX_STUDENTS = 250
NICK_MAX = 24  # characters
GUESS_MAX = 40
KEY_MAX = 64
CODE_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"  # no 0/O, 1/I
CODE_LENGTH = 5
GUESS, VOTE, SAMPLER = "guess", "vote", "sampler"
MODES = (GUESS, VOTE, SAMPLER)
MAJORITY, DRAW = "majority", "draw"
MAX_CHOICES = 10
BITS_FLOOR = 2.0**-149  # the smallest float32: a probability that rounded to 0


class LiveError(ValueError):
    """A message or a call the round refuses; the text is safe to show the student."""


def clean_text(value: Any, limit: int, what: str) -> str:
    """``value`` as shown text: a str, NFC, without control / format / private / unassigned
    characters (bidi overrides, zero-width joiners, NUL), runs of white space as one space,
    trimmed, 1..``limit`` characters. Markup is kept as text: whoever shows it escapes it."""
    if not isinstance(value, str):
        raise LiveError(f"the {what} must be text")
    if len(value) > 4 * limit:  # refuse early, before normalising a long string
        raise LiveError(f"the {what} is longer than {limit} characters")
    text = unicodedata.normalize("NFC", value)
    kept = "".join(
        " " if ch.isspace() else ch for ch in text if unicodedata.category(ch)[0] != "C"
        or ch.isspace()
    )  # fmt: skip
    text = " ".join(kept.split())
    if not text:
        raise LiveError(f"the {what} is empty")
    if len(text) > limit:
        raise LiveError(f"the {what} is longer than {limit} characters")
    return text


def new_code(rng: random.Random | None = None) -> str:
    pick = rng.choice if rng is not None else secrets.choice
    return "".join(pick(CODE_ALPHABET) for _ in range(CODE_LENGTH))


@dataclass(frozen=True)
class Choice:
    token_id: int
    text: str  # the token as the class reads it


class Distribution:
    """The model's raw next-token distribution at the question's step: probabilities over the
    whole vocabulary and the text of its top tokens. Ranks are 1-based, ties broken as argmax
    does (the lower id first)."""

    def __init__(self, probs: np.ndarray, texts: dict[int, str]) -> None:
        self.probs = np.asarray(probs, dtype=np.float32).reshape(-1)  # [vocab]
        self.texts = dict(texts)  # token id -> text, at least for the top tokens

    def prob(self, token_id: int) -> float:
        return float(self.probs[token_id])

    def rank(self, token_id: int) -> int:
        p = self.probs[token_id]
        above = int(np.count_nonzero(self.probs > p))
        ties_before = int(np.count_nonzero(self.probs[:token_id] == p))
        return above + ties_before + 1

    def bits(self, token_id: int) -> float:
        return -math.log2(max(self.prob(token_id), BITS_FLOOR))

    def entropy(self) -> float:
        """The model's expected surprisal (bits): its own mean log score at this step."""
        p = self.probs[self.probs > 0].astype(np.float64)
        return float(-(p * np.log2(p)).sum())

    def top(self, n: int) -> list[Choice]:
        order = np.lexsort((np.arange(self.probs.size), -self.probs))[:n]
        return [Choice(int(i), self.texts.get(int(i), f"#{int(i)}")) for i in order]


@dataclass(frozen=True)
class Question:
    number: int  # 1-based, over the round
    mode: str
    context: str  # the text so far, as the students see it
    choices: tuple[Choice, ...] = ()  # vote / sampler: in the order shown (alphabetical)
    step_index: int = 0  # the index of the step it asks for


@dataclass(frozen=True)
class Scored:
    """One answer against the model's distribution."""

    answer: str  # as the student typed or picked it
    token_id: int | None
    token_text: str
    prob: float | None
    bits: float | None  # surprisal, -log2(prob)
    rank: int | None
    picked: bool  # the token the run took
    note: str = ""


@dataclass
class Student:
    sid: int
    nick: str
    key: str  # a secret the page keeps, to rejoin after a dropped connection
    scores: list[Scored] = field(default_factory=list)
    connected: bool = True

    @property
    def mean_bits(self) -> float | None:
        bits = [s.bits for s in self.scores if s.bits is not None]
        return sum(bits) / len(bits) if bits else None


@dataclass(frozen=True)
class Reveal:
    question: Question
    token_id: int  # the token the run took
    token_text: str
    model_prob: float
    model_entropy: float  # bits: the model's own expected log score
    class_counts: dict[int, int]  # token id -> students
    results: dict[int, Scored]  # sid -> their answer's score
    top: tuple[tuple[str, float], ...]  # the model's top tokens and probabilities
    class_choice: int | None = None  # sampler: the token the class chose

    @property
    def class_mean_bits(self) -> float | None:
        bits = [r.bits for r in self.results.values() if r.bits is not None]
        return sum(bits) / len(bits) if bits else None


class LiveRound:
    def __init__(self, code: str | None = None, cap: int = MAX_STUDENTS) -> None:
        self.code = code or new_code()
        self.cap = cap
        self.lock = threading.RLock()
        self.students: dict[int, Student] = {}
        self._keys: dict[str, int] = {}
        self._removed: set[str] = set()
        self._next_sid = 1
        self.question: Question | None = None
        self.accepting = False
        self.answers: dict[int, str | int] = {}  # sid -> guess text or choice index
        self.reveals: list[Reveal] = []

    # -- students (the server's thread) --------------------------------------------------------

    def join(self, code: Any, nick: Any, key: Any = None) -> Student:
        """A student joins (or rejoins with the key the page kept)."""
        if not isinstance(code, str) or code.strip().upper() != self.code:
            raise LiveError("wrong code")
        with self.lock:
            if isinstance(key, str) and 0 < len(key) <= KEY_MAX:
                if key in self._removed:
                    raise LiveError("the teacher removed this nickname")
                sid = self._keys.get(key)
                if sid is not None:
                    self.students[sid].connected = True
                    return self.students[sid]
            name = clean_text(nick, NICK_MAX, "nickname")
            if len(self.students) >= self.cap:
                raise LiveError(f"the class is full ({self.cap} students)")
            taken = {s.nick.casefold() for s in self.students.values()}
            base, n = name, 2
            while name.casefold() in taken:  # two "Sam"s: "Sam 2"
                suffix = f" {n}"
                name, n = base[: NICK_MAX - len(suffix)] + suffix, n + 1
            student = Student(self._next_sid, name, secrets.token_urlsafe(16))
            self._next_sid += 1
            self.students[student.sid] = student
            self._keys[student.key] = student.sid
            return student

    def left(self, sid: int) -> None:
        with self.lock:
            if sid in self.students:
                self.students[sid].connected = False

    def answer(self, sid: int, message: dict) -> str | int:
        """A student's answer to the open question: ``{"guess": text}`` in guess mode,
        ``{"choice": index}`` otherwise. A later answer replaces the earlier one."""
        with self.lock:
            if sid not in self.students:
                raise LiveError("you are not in the class")
            q = self.question
            if q is None or not self.accepting:
                raise LiveError("no question is open")
            if q.mode == GUESS:
                value: str | int = clean_text(message.get("guess"), GUESS_MAX, "guess")
            else:
                choice = message.get("choice")
                if type(choice) is not int or not 0 <= choice < len(q.choices):
                    raise LiveError("that is not one of the choices")
                value = choice
            self.answers[sid] = value
            return value

    # -- the teacher (the window's thread) -----------------------------------------------------

    def remove(self, sid: int) -> Student | None:
        with self.lock:
            student = self.students.pop(sid, None)
            if student is not None:
                self._removed.add(student.key)
                self._keys.pop(student.key, None)
                self.answers.pop(sid, None)
            return student

    def ask(self, mode: str, context: str, choices: list[Choice] = (), step_index: int = 0
            ) -> Question:  # fmt: skip
        if mode not in MODES:
            raise ValueError(f"the mode must be one of {MODES}, got {mode!r}")
        if mode != GUESS and not 2 <= len(choices) <= MAX_CHOICES:
            raise ValueError(f"a vote needs 2..{MAX_CHOICES} choices, got {len(choices)}")
        shown = tuple(sorted(choices, key=lambda c: (c.text.strip().casefold(), c.token_id)))
        with self.lock:
            number = len(self.reveals) + 1
            self.question = Question(number, mode, context, shown if mode != GUESS else (),
                                     step_index)  # fmt: skip
            self.answers = {}
            self.accepting = True
            return self.question

    def close(self) -> dict[int, str | int]:
        """No more answers: the answers as they stand."""
        with self.lock:
            self.accepting = False
            return dict(self.answers)

    def answered(self) -> int:
        with self.lock:
            return len(self.answers)

    def tally(self) -> Counter:
        """The open question's answers: guess text (case folded) or choice -> students."""
        with self.lock:
            q = self.question
            if q is None:
                return Counter()
            if q.mode == GUESS:
                return Counter(str(a).casefold() for a in self.answers.values())
            return Counter(q.choices[int(a)] for a in self.answers.values())

    def guesses(self) -> list[str]:
        """The distinct guesses to tokenise (guess mode)."""
        with self.lock:
            return sorted({str(a) for a in self.answers.values() if isinstance(a, str)})

    def class_token(self, how: str, dist: Distribution, rng: random.Random) -> int | None:
        """Sampler mode: the class's token, by majority (a tie goes to the model's more
        probable token) or drawn from the class's votes."""
        with self.lock:
            q = self.question
            if q is None or not self.answers or q.mode == GUESS:
                return None
            counts = Counter(q.choices[int(a)].token_id for a in self.answers.values())
        if how == DRAW:
            ids = sorted(counts)
            return rng.choices(ids, weights=[counts[i] for i in ids])[0]
        return max(counts, key=lambda t: (counts[t], dist.prob(t), -t))

    def reveal(self, dist: Distribution, token_id: int, tokens: dict[str, int | None],
               class_choice: int | None = None) -> Reveal:  # fmt: skip
        """Score every answer against ``dist``; ``token_id`` is the token the run took;
        ``tokens`` maps each guess to its token (``live_model.guess_tokens``)."""
        with self.lock:
            q = self.question
            if q is None:
                raise ValueError("no question to reveal")
            self.accepting = False
            results: dict[int, Scored] = {}
            for sid, a in self.answers.items():
                if isinstance(a, str):
                    tid = tokens.get(a)
                    text = dist.texts.get(tid, "") if tid is not None else ""
                    results[sid] = _score(dist, a, tid, text, token_id)
                else:
                    c = q.choices[a]
                    results[sid] = _score(dist, c.text, c.token_id, c.text, token_id)
                if sid in self.students:
                    self.students[sid].scores.append(results[sid])
            counts = Counter(r.token_id for r in results.values() if r.token_id is not None)
            top = tuple((c.text, dist.prob(c.token_id)) for c in dist.top(10))
            reveal = Reveal(q, token_id, dist.texts.get(token_id, f"#{token_id}"),
                            dist.prob(token_id), dist.entropy(), dict(counts), results, top,
                            class_choice)  # fmt: skip
            self.reveals.append(reveal)
            self.question = None
            self.answers = {}
            return reveal

    # -- after the round ---------------------------------------------------------------------

    def leaderboard(self) -> list[tuple[str, float, int]]:
        """(nickname, mean surprisal in bits, questions answered), best (lowest) first;
        students with no scored answer last."""
        with self.lock:
            rows = [(s.nick, s.mean_bits, len(s.scores)) for s in self.students.values()]
        scored = sorted((r for r in rows if r[1] is not None), key=lambda r: (r[1], -r[2], r[0]))
        return [*scored, *sorted((r[0], math.inf, r[2]) for r in rows if r[1] is None)]

    def summary(self) -> tuple[float | None, float | None]:
        """The class's mean log score over every revealed answer, and the model's mean
        entropy over the same questions (its own expected log score), in bits."""
        with self.lock:
            bits = [r.bits for v in self.reveals for r in v.results.values() if r.bits is not None]
            ents = [v.model_entropy for v in self.reveals]
        mean = lambda xs: sum(xs) / len(xs) if xs else None  # noqa: E731
        return mean(bits), mean(ents)

    def export(self) -> list[dict[str, Any]]:
        """Nicknames and answers only, one row per answer, for CSV or JSON."""
        with self.lock:
            rows = []
            for v in self.reveals:
                for sid, r in v.results.items():
                    nick = self.students[sid].nick if sid in self.students else "(removed)"
                    rows.append({"question": v.question.number, "mode": v.question.mode,
                                 "nickname": nick, "answer": r.answer, "token": r.token_text,
                                 "probability": r.prob, "bits": r.bits, "rank": r.rank,
                                 "model_token": v.token_text})  # fmt: skip
            return rows


def class_span(steps: Sequence[Any]) -> tuple[int, int] | None:
    """(start, end) of the class's text in a run's steps (``engine.records.Step``): from the
    first token the class chose as the sampler (``source == CLASS``) to its last, end
    exclusive; None when the class chose none."""
    chosen = [s.index for s in steps if s.source == CLASS]
    return (chosen[0], chosen[-1] + 1) if chosen else None


def _score(dist: Distribution, answer: str, tid: int | None, text: str, taken: int) -> Scored:
    if tid is None or not 0 <= tid < dist.probs.size:
        return Scored(answer, None, "", None, None, None, False, "no token reads like this")
    return Scored(answer, tid, text or dist.texts.get(tid, ""), dist.prob(tid), dist.bits(tid),
                  dist.rank(tid), tid == taken)  # fmt: skip
