"""Step records read back from a file (the autosave, a tree file): validated by pydantic
straight into the engine's records (types from Step's fields: a string where a rank belongs, a
null probability, a list where a record belongs all fail), which is three times faster on a long
run than a parallel model converted afterwards; the value ranges pydantic cannot read from those
fields are checked in one pass after."""

from __future__ import annotations

from typing import Any

from pydantic import TypeAdapter, ValidationError

from engine.records import Step
from engine.validate.core import InputError, describe
from engine.validate.limits import MAX_CANDIDATES, MAX_TEXT_CHARS, MAX_TOKEN_ID

_STEPS = TypeAdapter(list[Step])


def _note_dicts(raw_steps: list[Any]) -> list[Any]:
    """Stage notes are written as [stage, text] pairs; the record takes {stage, text}."""
    out = raw_steps
    for i, raw in enumerate(raw_steps):
        if isinstance(raw, dict) and isinstance(raw.get("stage_notes"), list):
            if out is raw_steps:
                out = list(raw_steps)
            notes = [
                {"stage": n[0], "text": n[1]} if isinstance(n, list) and len(n) == 2 else n
                for n in raw["stage_notes"]
            ]
            out[i] = {**raw, "stage_notes": notes}
    return out


def _bad(i: int, field: str, expected: str, value: Any) -> InputError:
    return InputError(f"steps[{i}].{field}: expected {expected}, got {str(value)[:40]}")


def _probability(x: float | None) -> bool:
    return x is None or 0.0 <= x <= 1.0 + 1e-6  # NaN fails both


def check_ranges(steps: list[Step]) -> None:
    """The bounds of each step's values (one pass; the first failure is named)."""
    for i, s in enumerate(steps):
        if not 0 <= s.token_id <= MAX_TOKEN_ID:
            raise _bad(i, "token_id", f"an id in [0, {MAX_TOKEN_ID}]", s.token_id)
        if not 1 <= s.rank <= MAX_TOKEN_ID or not 0 <= s.survivors <= MAX_TOKEN_ID:
            raise _bad(i, "rank", "a rank >= 1 and survivors >= 0", (s.rank, s.survivors))
        for name in ("raw_prob", "prob", "other_p"):
            if not _probability(getattr(s, name)):
                raise _bad(i, name, "a probability in [0, 1]", getattr(s, name))
        if len(s.candidates) > MAX_CANDIDATES:
            raise _bad(i, "candidates", f"at most {MAX_CANDIDATES}", len(s.candidates))
        if len(s.text) > MAX_TEXT_CHARS or len(s.token_str) > MAX_TEXT_CHARS:
            raise _bad(i, "text", f"at most {MAX_TEXT_CHARS} characters", len(s.text))
        for c in s.candidates:
            if not 0 <= c.token_id <= MAX_TOKEN_ID:
                raise _bad(i, "candidates.token_id", "an id >= 0", c.token_id)
            if not (_probability(c.raw_prob) and _probability(c.prob)) or not _probability(
                c.server_prob
            ):
                raise _bad(i, "candidates.prob", "a probability in [0, 1]", c.prob)


def read_steps(raw_steps: list[Any], prefix: str = "steps") -> list[Step]:
    """``raw_steps`` (parsed JSON) as checked records; ``InputError`` names the first bad one
    (``ValidationError`` is turned into it too)."""
    try:
        steps = _STEPS.validate_python(_note_dicts(raw_steps))
    except ValidationError as exc:
        raise InputError(describe(exc, prefix=prefix)) from None
    check_ranges(steps)
    return steps
