"""The autosave read back: its size bounded, its JSON parsed with a depth bound, its head
checked by a strict pydantic model and its steps validated by pydantic straight into the
engine's records, then their value ranges checked in one pass. A file that fails is never
half-applied: ``parse_autosave`` returns a whole ``SavedRun`` or raises ``InputError`` naming
the field."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from engine.records import RUN_METHODS, SAMPLING, Step
from engine.sampling.settings import SamplerSettings
from engine.validate.core import InputError, describe
from engine.validate.jsonio import parse_json, read_json
from engine.validate.limits import (
    MAX_CANDIDATES,
    MAX_RUN_FILE_BYTES,
    MAX_STEPS,
    MAX_TEXT_CHARS,
    MAX_TOKEN_ID,
)

AUTOSAVE_FORMAT = "decoding-lab-autosave/1"

Text = Annotated[str, Field(max_length=MAX_TEXT_CHARS)]


class _Autosave(BaseModel):
    # strict: a number where text belongs is an error, not a silent conversion; unknown
    # fields (a newer version's) are ignored.
    model_config = ConfigDict(strict=True, extra="ignore")

    format: Literal["decoding-lab-autosave/1"]
    editor_prompt: Text = ""
    model: Text = ""
    settings: dict[str, Any] = Field(default_factory=dict)
    saved_at: float = 0.0
    method: Literal[tuple(RUN_METHODS)] = SAMPLING  # type: ignore[valid-type]
    prompt: Text = ""
    chat_template: bool = False
    steps: Annotated[list[Any], Field(max_length=MAX_STEPS)] = Field(default_factory=list)


# The steps are validated straight into the engine's own records (types from Step's fields:
# a string where a rank belongs, a null probability, a list where a record belongs all fail),
# which is three times faster on a long run than a parallel model converted afterwards; the
# value ranges pydantic cannot read from those fields are checked in one pass after.
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


def _check_ranges(steps: list[Step]) -> None:
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
            if not (_probability(c.raw_prob) and _probability(c.prob)):
                raise _bad(i, "candidates.prob", "a probability in [0, 1]", c.prob)


@dataclass(frozen=True)
class SavedRun:
    """A checked autosave: what the window restores."""

    editor_prompt: str
    model: str
    settings: SamplerSettings
    method: str
    prompt: str
    chat_template: bool
    steps: list[Step]


def parse_autosave(text: str | bytes, source: str = "the autosave") -> SavedRun:
    """Check an autosave's text completely; ``InputError`` names the field that is wrong."""
    return saved_run(parse_json(text, source, MAX_RUN_FILE_BYTES), source)


def saved_run(data: Any, source: str = "the autosave") -> SavedRun:
    """Check an autosave already parsed from JSON (bounded by ``parse_json``)."""
    if not isinstance(data, dict) or data.get("format") != AUTOSAVE_FORMAT:
        raise InputError(f"not a Decoding Lab autosave (no format {AUTOSAVE_FORMAT!r})", source)
    try:
        saved = _Autosave.model_validate(data)
    except ValidationError as exc:
        raise InputError(describe(exc), source) from None
    try:
        steps = _STEPS.validate_python(_note_dicts(saved.steps))
        _check_ranges(steps)
    except ValidationError as exc:
        raise InputError(describe(exc, prefix="steps"), source) from None
    except InputError as exc:
        raise InputError(exc.message, source) from None
    try:
        settings = SamplerSettings.from_dict(saved.settings)
    except (ValueError, TypeError) as exc:  # the settings' own checks (check_setting)
        raise InputError(f"settings: {exc}", source) from None
    return SavedRun(
        saved.editor_prompt, saved.model, settings, saved.method, saved.prompt,
        saved.chat_template, steps,
    )  # fmt: skip


def read_autosave(path: str | Path) -> SavedRun | None:
    """The autosave at ``path``; None when there is none. ``InputError`` when it is damaged."""
    path = Path(path)
    if not path.exists():
        return None
    return saved_run(read_json(path, MAX_RUN_FILE_BYTES), str(path))


def move_aside(path: str | Path) -> Path:
    """Rename a damaged file to ``<name>.broken-<time>`` (kept for the user, never
    overwritten); returns the new path. OSError when it cannot be renamed."""
    path = Path(path)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    target = path.with_name(f"{path.name}.broken-{stamp}")
    n = 1
    while target.exists():
        n += 1
        target = path.with_name(f"{path.name}.broken-{stamp}-{n}")
    path.rename(target)
    return target
