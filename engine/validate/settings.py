"""Values read back from the window's settings store (QSettings): hostile like any file. Qt
hands back whatever the file holds (a string, a list, a number too big for an int); these
turn it into the expected type inside its bounds, or the default. No Qt here: the window
reads the raw value and passes it in."""

from __future__ import annotations

from typing import Any

from engine.validate.core import InputError
from engine.validate.jsonio import parse_json

MAX_SETTING_CHARS = 100_000  # a prompt kept between sessions; the window refuses 4 MB pastes


def whole(value: Any, default: int, least: int, most: int) -> int:
    """A whole number in [least, most]; the default for anything else."""
    try:
        number = int(str(value).strip())
    except (TypeError, ValueError):
        return default
    return number if least <= number <= most else default


def text(value: Any, default: str = "", choices: tuple[str, ...] | None = None) -> str:
    """A string (one of ``choices`` when given, at most MAX_SETTING_CHARS); else the default."""
    if not isinstance(value, str) or len(value) > MAX_SETTING_CHARS:
        return default
    if choices is not None and value not in choices:
        return default
    return value


def text_list(value: Any, most: int) -> list[str]:
    """A JSON list of strings (the recent models), at most ``most`` of them; [] for anything
    else."""
    if not isinstance(value, str) or len(value) > MAX_SETTING_CHARS:
        return []
    try:
        items = parse_json(value, "recents", MAX_SETTING_CHARS)
    except InputError:
        return []
    if not isinstance(items, list):
        return []
    return [i for i in items if isinstance(i, str) and len(i) < 4096][:most]


def json_object(value: Any) -> dict[str, Any]:
    """A JSON object kept as text in the settings (the sampler's settings, the user's presets);
    {} for anything else (not JSON, not an object, nested past the parser's bound)."""
    if not isinstance(value, str) or not value or len(value) > MAX_SETTING_CHARS:
        return {}
    try:
        data = parse_json(value, "settings", MAX_SETTING_CHARS)
    except InputError:
        return {}
    return data if isinstance(data, dict) else {}
