"""The autosave (and a run exported as JSON) read back: bounded, then checked field by field
with pydantic, then turned into the engine's records. A file that fails is never half-applied:
``parse_autosave`` returns a whole ``SavedRun`` or raises ``InputError``."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from engine.records import RUN_METHODS, SAMPLING, Candidate, StageNote, Step
from engine.sampling.settings import SamplerSettings
from engine.validate.core import InputError, describe
from engine.validate.jsonio import parse_json
from engine.validate.limits import (
    MAX_CANDIDATES,
    MAX_RUN_FILE_BYTES,
    MAX_STEPS,
    MAX_TEXT_CHARS,
    MAX_TOKEN_ID,
)

AUTOSAVE_FORMAT = "decoding-lab-autosave/1"

Text = Annotated[str, Field(max_length=MAX_TEXT_CHARS)]
Prob = Annotated[float, Field(ge=0.0, le=1.0 + 1e-6)]  # NaN fails both bounds
TokenId = Annotated[int, Field(ge=0, le=MAX_TOKEN_ID)]


class _Strict(BaseModel):
    # strict: a number where text belongs (or "3" where a rank belongs) is an error, not a
    # silent conversion; unknown fields (a newer version's) are ignored.
    model_config = ConfigDict(strict=True, extra="ignore")


class _Candidate(_Strict):
    token_id: TokenId
    text: Text
    raw_prob: Prob
    prob: Prob
    cut_by: Text = ""
    penalised_by: Text = ""
    before_p: Prob | None = None
    after_p: Prob | None = None


class _Step(_Strict):
    index: Annotated[int, Field(ge=0, le=MAX_STEPS)]
    token_id: TokenId
    text: Text
    token_str: Text
    raw_prob: Prob
    prob: Prob
    rank: Annotated[int, Field(ge=1, le=MAX_TOKEN_ID)]
    candidates: Annotated[list[_Candidate], Field(max_length=MAX_CANDIDATES)] = []
    survivors: Annotated[int, Field(ge=0, le=MAX_TOKEN_ID)]
    entropy_raw: float
    entropy: float
    step_time: float
    tokens_per_s: float
    forced: bool = False
    is_eos: bool = False
    source: Annotated[str, Field(max_length=40)] = "sample"
    prefill: bool = False
    special: bool = False
    other_p: Prob | None = None
    entropy_lower_bound: bool = False
    stage_notes: list[Annotated[list[Text], Field(min_length=2, max_length=2)]] = []
    mu: float | None = None


class _Autosave(_Strict):
    format: Literal["decoding-lab-autosave/1"]
    editor_prompt: Text = ""
    model: Text = ""
    settings: dict[str, Any] = {}
    saved_at: float = 0.0
    method: Literal[tuple(RUN_METHODS)] = SAMPLING  # type: ignore[valid-type]
    prompt: Text = ""
    chat_template: bool = False
    steps: Annotated[list[_Step], Field(max_length=MAX_STEPS)] = []


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


def _step(s: _Step) -> Step:
    fields = dict(s.__dict__)  # the validated values, without a model_dump per step
    fields["candidates"] = tuple(Candidate(**c.__dict__) for c in s.candidates)
    fields["stage_notes"] = tuple(StageNote(a, b) for a, b in s.stage_notes)
    return Step(**fields)


def parse_autosave(text: str, source: str = "the autosave") -> SavedRun:
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
        settings = SamplerSettings.from_dict(saved.settings)
    except (ValueError, TypeError) as exc:  # the settings' own checks (check_setting)
        raise InputError(f"settings: {exc}", source) from None
    return SavedRun(
        saved.editor_prompt, saved.model, settings, saved.method, saved.prompt,
        saved.chat_template, [_step(s) for s in saved.steps],
    )  # fmt: skip


def read_autosave(path: str | Path) -> SavedRun | None:
    """The autosave at ``path``; None when there is none. ``InputError`` when it is damaged."""
    path = Path(path)
    if not path.exists():
        return None
    try:
        size = path.stat().st_size
        if size > MAX_RUN_FILE_BYTES:
            raise InputError(f"it is {size >> 20} MB, over the limit of "
                             f"{MAX_RUN_FILE_BYTES >> 20} MB", str(path))  # fmt: skip
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text (byte {exc.start})", str(path)) from None
    except OSError as exc:
        raise InputError(f"cannot be read ({exc.strerror or exc})", str(path)) from None
    return parse_autosave(text, str(path))


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
