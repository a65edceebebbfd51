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

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from engine.records import RUN_METHODS, SAMPLING, Step
from engine.sampling.settings import SamplerSettings
from engine.validate.core import InputError, describe
from engine.validate.jsonio import parse_json, read_json
from engine.validate.limits import (
    MAX_RUN_FILE_BYTES,
    MAX_SESSION_TREES,
    MAX_STEPS,
    MAX_TEXT_CHARS,
)
from engine.validate.steps import read_steps

AUTOSAVE_FORMAT = "decoding-lab-autosave/1"

Text = Annotated[str, Field(max_length=MAX_TEXT_CHARS)]


class _KeptTree(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore")

    chat_template: bool = False
    used_at: float = 0.0
    cleared: bool = False
    tree: dict[str, Any]


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
    # the run's tree (engine.tree, "decoding-lab-tree/1"), checked by its own reader
    tree: dict[str, Any] | None = None
    tree_left_out: Annotated[int, Field(ge=0)] = 0  # nodes of a tree too large to be kept
    # the session's other trees (the window's Trees list), each a tree file's object
    trees: Annotated[list[_KeptTree], Field(max_length=MAX_SESSION_TREES)] = Field(
        default_factory=list
    )


@dataclass(frozen=True)
class SavedTree:
    """One of the session's other trees, checked (``tree``: an ``engine.tree.RunTree``)."""

    tree: Any
    chat_template: bool
    used_at: float
    cleared: bool


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
    tree: Any = None  # engine.tree.RunTree | None: every branch of the run
    tree_left_out: int = 0  # a tree this large was left out (past the tree file's bound)
    trees: tuple[SavedTree, ...] = ()  # the session's other trees, oldest first


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
        steps = read_steps(saved.steps)
    except InputError as exc:
        raise InputError(exc.message, source) from None
    try:
        settings = SamplerSettings.from_dict(saved.settings)
    except (ValueError, TypeError) as exc:  # the settings' own checks (check_setting)
        raise InputError(f"settings: {exc}", source) from None
    trees = tuple(
        SavedTree(_tree(k.tree, source, f"trees[{i}]: the "), k.chat_template, k.used_at,
                  k.cleared)
        for i, k in enumerate(saved.trees)
    )  # fmt: skip
    return SavedRun(
        saved.editor_prompt, saved.model, settings, saved.method, saved.prompt,
        saved.chat_template, steps, _tree(saved.tree, source), saved.tree_left_out, trees,
    )  # fmt: skip


def _tree(data: dict[str, Any] | None, source: str, where: str = "the run's ") -> Any:
    if data is None:
        return None
    from engine.tree import RunTree, TreeFormatError

    try:
        return RunTree.from_json(data)
    except TreeFormatError as exc:
        raise InputError(f"{where}{exc}", source) from None


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
