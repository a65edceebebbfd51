"""The limits of every sampler setting, in one place and without torch: the processors check
their arguments with these, and so do ``SamplerSettings`` (which the window builds before the
engine has loaded)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

MIN_TEMPERATURE = 1e-6  # the least the tests show sampling finite at; engine.validate.limits


def is_number(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _is_count(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def _is_fraction(x: Any) -> bool:
    return is_number(x) and 0 <= x <= 1


RULES: dict[str, tuple[Callable[[Any], bool], str]] = {
    # Just above 0 (greedy: 1e-320), logits / T overflow to inf and sampling gets NaN.
    "temperature": (
        lambda v: is_number(v) and (v == 0 or v >= MIN_TEMPERATURE),
        f"must be 0 (greedy) or >= {MIN_TEMPERATURE}",
    ),
    "top_k": (_is_count, "must be an integer >= 0"),
    "top_p": (_is_fraction, "must be in [0, 1]"),
    "min_p": (_is_fraction, "must be in [0, 1]"),
    "typical_p": (lambda v: _is_fraction(v) and v > 0, "must be in (0, 1]"),
    "repetition_penalty": (lambda v: is_number(v) and v > 0, "must be > 0"),
    "no_repeat_ngram_size": (_is_count, "must be an integer >= 0"),
    "min_new_tokens": (_is_count, "must be an integer >= 0"),
    "penalty_last_n": (_is_count, "must be an integer >= 0 (0 = the whole sequence)"),
    "frequency_penalty": (is_number, "must be a finite number"),
    "presence_penalty": (is_number, "must be a finite number"),
    "dry_multiplier": (lambda v: is_number(v) and v >= 0, "must be >= 0"),
    "dry_base": (lambda v: is_number(v) and v >= 1, "must be >= 1"),
    "dry_allowed_length": (lambda v: _is_count(v) and v >= 1, "must be an integer >= 1"),
    "dry_penalty_last_n": (_is_count, "must be an integer >= 0 (0 = the whole sequence)"),
    "top_n_sigma": (lambda v: is_number(v) and v >= 0, "must be >= 0"),
    "epsilon_cutoff": (lambda v: is_number(v) and 0 <= v < 1, "must be in [0, 1)"),
    "eta_cutoff": (lambda v: is_number(v) and 0 <= v < 1, "must be in [0, 1)"),
    "xtc_threshold": (_is_fraction, "must be in [0, 1]"),
    "xtc_probability": (_is_fraction, "must be in [0, 1]"),
    "top_a": (lambda v: is_number(v) and v >= 0, "must be >= 0"),
    "dynatemp_range": (lambda v: is_number(v) and v >= 0, "must be >= 0"),
    "dynatemp_exponent": (lambda v: is_number(v) and v > 0, "must be > 0"),
    "smoothing_factor": (lambda v: is_number(v) and v >= 0, "must be >= 0"),
    "smoothing_curve": (lambda v: is_number(v) and 1 <= v <= 3, "must be in [1, 3]"),
    "mirostat": (lambda v: v in (0, 1, 2) and not isinstance(v, bool), "must be 0, 1 or 2"),
    "mirostat_tau": (lambda v: is_number(v) and v >= 0, "must be >= 0"),
    "mirostat_eta": (lambda v: is_number(v) and v >= 0, "must be >= 0"),
    "adaptive_p_target": (lambda v: is_number(v) and v <= 1, "must be <= 1 (below 0: off)"),
    "adaptive_p_decay": (lambda v: is_number(v) and 0 <= v <= 0.99, "must be in [0, 0.99]"),
}

# Constrained decoding: "KIND:TEXT" (engine.sampling.grammar compiles it).
GRAMMAR_KINDS = ("json", "regex", "choice", "lark")
MAX_GRAMMAR_CHARS = 100_000


def check_grammar_spec(spec: object) -> None:
    """ValueError unless ``spec`` is "" or "KIND:TEXT" with a known kind (the text itself is
    checked when the grammar compiles)."""
    if spec == "":
        return
    if not isinstance(spec, str) or len(spec) > MAX_GRAMMAR_CHARS:
        raise ValueError(f"grammar must be a text of at most {MAX_GRAMMAR_CHARS:,} characters")
    kind, sep, text = spec.partition(":")
    if not sep or kind.strip() not in GRAMMAR_KINDS or not text.strip():
        raise ValueError(
            f"grammar must read KIND:TEXT with KIND one of {', '.join(GRAMMAR_KINDS)} "
            f"(e.g. 'choice:yes|no'), got {spec[:40]!r}"
        )


def check_setting(name: str, value: object) -> None:
    """ValueError with the setting's limits if ``value`` is outside them."""
    ok, limits = RULES[name]
    if not ok(value):
        raise ValueError(f"{name} {limits}, got {value!r}")
