"""Reading JSON that may be hostile: the size is bounded before parsing, and so is the nesting
depth (Python's parser recurses once per level, so a file of 100,000 '[' would otherwise end in
RecursionError instead of a message)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from engine.validate.core import InputError
from engine.validate.limits import MAX_JSON_DEPTH, MIB

# A JSON string, escapes included (the unrolled form: no backtracking per character).
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_BRACKET = re.compile(r"[\[\]{}]")


def json_depth(text: str) -> int:
    """The deepest nesting of arrays and objects in ``text``, counted without a parser. Text
    inside strings does not count; in text that is not JSON the figure is an upper bound."""
    depth = deepest = 0
    for match in _BRACKET.finditer(_STRING.sub('""', text)):
        if match.group() in "[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


def parse_json(text: str, source: str, max_bytes: int, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """``json.loads`` inside the bounds; ``InputError`` naming ``source`` otherwise."""
    if len(text) > max_bytes:
        raise InputError(
            f"it is {len(text) / MIB:.1f} MB, over the {max_bytes / MIB:.0f} MB limit", source
        )
    depth = json_depth(text)
    if depth > max_depth:
        raise InputError(f"it is nested {depth} levels deep, over the limit of {max_depth}", source)
    try:
        return json.loads(text)
    except ValueError as exc:  # JSONDecodeError; a lone surrogate escape decodes fine
        raise InputError(f"not valid JSON ({exc})", source) from None


def read_json(path: str | Path, max_bytes: int, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """Read and parse a JSON file inside the bounds (the size is checked before reading)."""
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > max_bytes:
            raise InputError(
                f"it is {size / MIB:.1f} MB, over the {max_bytes / MIB:.0f} MB limit", str(path)
            )
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text (byte {exc.start})", str(path)) from None
    except OSError as exc:
        raise InputError(f"cannot be read ({exc.strerror or exc})", str(path)) from None
    return parse_json(text, str(path), max_bytes, max_depth)
