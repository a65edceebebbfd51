"""Files a lesson stage opens beside its YAML: a prepared tree (``decoding-lab-tree/1``).

A lesson names the file by a path relative to ``resources/`` (``trees/once-upon-a-time.json``),
so shipped lessons find their files wherever the app is installed (the frozen app's bundle
included). The path must stay inside ``resources/``: a lesson from a stranger cannot make the
app read any other file. The file is hostile like any other: its size is bounded before it is
read, its nesting while it is parsed (engine.validate.jsonio), and every field after that
(engine.tree's ``RunTree.from_json``). No Qt, no torch.
"""

from __future__ import annotations

import sys
from pathlib import Path, PurePosixPath

from engine.tree import RunTree, TreeFormatError
from engine.validate import InputError
from engine.validate.jsonio import read_json
from engine.validate.limits import MIB

_BASE = Path(getattr(sys, "_MEIPASS", Path(__file__).resolve().parents[2]))
RESOURCES_DIR = _BASE / "resources"
MAX_TREE_FILE_BYTES = 4 * MIB  # a prepared tree for a class: thousands of nodes, not millions
MAX_PATH_CHARS = 200


class LessonFileError(ValueError):
    """A file a stage names that cannot be used; the message says which and why."""


def resource_path(name: str, resources: Path | None = None) -> Path:
    """``name`` (relative, ``/``-separated) under ``resources/``; refused if it leaves it."""
    root = (resources or RESOURCES_DIR).resolve()
    rel = PurePosixPath(name)
    if len(name) > MAX_PATH_CHARS or "\\" in name or "\x00" in name:
        raise LessonFileError(f"not a usable path (at most {MAX_PATH_CHARS} characters, '/')")
    if rel.is_absolute() or ".." in rel.parts or not rel.parts:
        raise LessonFileError("must be a path inside resources/, like trees/name.json")
    path = (root / rel).resolve()  # a symbolic link out of resources/ is refused too
    if not path.is_relative_to(root):
        raise LessonFileError("must stay inside resources/")
    return path


def read_tree_file(name: str, resources: Path | None = None) -> RunTree:
    """The tree in ``resources/<name>``, checked; ``LessonFileError`` naming the file (and the
    first bad field) otherwise."""
    path = resource_path(name, resources)
    try:
        data = read_json(path, MAX_TREE_FILE_BYTES)
    except InputError as exc:
        raise LessonFileError(f"{name}: {exc.message}") from None
    try:
        return RunTree.from_json(data)
    except TreeFormatError as exc:  # its message names the field, e.g. nodes[3].raw_prob
        raise LessonFileError(f"{name}: {exc}") from None
