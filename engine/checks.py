"""The limits of every sampler setting, in one place and without torch: the processors check
their arguments with these, and so do ``SamplerSettings`` (which the window builds before the
engine has loaded)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any


def is_number(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _is_count(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def _is_fraction(x: Any) -> bool:
    return is_number(x) and 0 <= x <= 1


RULES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "temperature": (lambda v: is_number(v) and v >= 0, "must be >= 0"),
    "top_k": (_is_count, "must be an integer >= 0"),
    "top_p": (_is_fraction, "must be in [0, 1]"),
    "min_p": (_is_fraction, "must be in [0, 1]"),
    "typical_p": (lambda v: _is_fraction(v) and v > 0, "must be in (0, 1]"),
    "repetition_penalty": (lambda v: is_number(v) and v > 0, "must be > 0"),
    "no_repeat_ngram_size": (_is_count, "must be an integer >= 0"),
    "min_new_tokens": (_is_count, "must be an integer >= 0"),
}


def check_setting(name: str, value: object) -> None:
    """ValueError with the setting's limits if ``value`` is outside them."""
    ok, limits = RULES[name]
    if not ok(value):
        raise ValueError(f"{name} {limits}, got {value!r}")
