"""The sampler panel's controls laid out as data: one entry per slider, per number field and per
text field of the "Advanced" group (with how its text is read and written back), the choices of
the combo boxes, and the title of each stage in the order list. Every tooltip comes from
``engine.sampling.help``."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from engine.sampling.checks import check_grammar_spec
from engine.sampling.help import tooltip
from engine.sampling.settings import ORDER_TEMPERATURE_FIRST, ORDER_TEMPERATURE_LAST


@dataclass(frozen=True)
class Knob:
    """A number to set: its field of ``SamplerSettings``, range, step and decimals (0 = an
    integer)."""

    field: str
    label: str
    lo: float
    hi: float
    step: float
    decimals: int
    tooltip: str


def _knob(field: str, label: str, lo: float, hi: float, step: float, decimals: int) -> Knob:
    return Knob(field, label, lo, hi, step, decimals, tooltip(field))


# The sliders on top: (field, label, low, high, step, decimals).
KNOBS = (
    _knob("temperature", "Temperature", 0.0, 2.5, 0.01, 2),
    _knob("top_k", "Top-k", 0, 200, 1, 0),
    _knob("top_p", "Top-p", 0.0, 1.0, 0.01, 2),
    _knob("min_p", "Min-p", 0.0, 1.0, 0.01, 2),
    _knob("repetition_penalty", "Repetition penalty", 1.0, 2.0, 0.01, 2),
)

# The "Advanced" group's number fields, in the same layout.
NUMBERS = (
    _knob("typical_p", "Typical-p", 0.01, 1.0, 0.05, 2),
    _knob("penalty_last_n", "Penalty range (last N)", 0, 1_000_000, 1, 0),
    _knob("frequency_penalty", "Frequency penalty", -2.0, 2.0, 0.05, 2),
    _knob("presence_penalty", "Presence penalty", -2.0, 2.0, 0.05, 2),
    _knob("no_repeat_ngram_size", "No repeat n-gram", 0, 10, 1, 0),
    _knob("min_new_tokens", "Min new tokens", 0, 100_000, 1, 0),
    _knob("dry_multiplier", "DRY multiplier", 0.0, 5.0, 0.05, 2),
    _knob("dry_base", "DRY base", 1.0, 4.0, 0.05, 2),
    _knob("dry_allowed_length", "DRY allowed length", 1, 50, 1, 0),
    _knob("dry_penalty_last_n", "DRY range (last N)", 0, 1_000_000, 1, 0),
    _knob("top_n_sigma", "Top-nσ", 0.0, 5.0, 0.05, 2),
    _knob("epsilon_cutoff", "Epsilon cutoff", 0.0, 0.99, 0.0001, 4),
    _knob("eta_cutoff", "Eta cutoff", 0.0, 0.99, 0.0001, 4),
    _knob("top_a", "Top-a", 0.0, 5.0, 0.05, 2),
    _knob("xtc_threshold", "XTC threshold", 0.0, 1.0, 0.05, 2),
    _knob("xtc_probability", "XTC probability", 0.0, 1.0, 0.05, 2),
    _knob("dynatemp_range", "Dynamic temperature ±", 0.0, 5.0, 0.05, 2),
    _knob("dynatemp_exponent", "Dynamic temp. exponent", 0.01, 10.0, 0.05, 2),
    _knob("smoothing_factor", "Smoothing factor", 0.0, 10.0, 0.05, 2),
    _knob("smoothing_curve", "Smoothing curve", 1.0, 3.0, 0.05, 2),
    _knob("mirostat_tau", "Mirostat τ", 0.0, 20.0, 0.05, 2),
    _knob("mirostat_eta", "Mirostat η", 0.0, 1.0, 0.001, 3),
    _knob("adaptive_p_target", "Adaptive-p target (< 0 off)", -1.0, 1.0, 0.05, 2),
    _knob("adaptive_p_decay", "Adaptive-p decay", 0.0, 0.99, 0.05, 2),
)

# Combo boxes: (text shown, value stored).
ORDERS = (
    ("Temperature first (transformers)", ORDER_TEMPERATURE_FIRST),
    ("Temperature last (llama.cpp, seed)", ORDER_TEMPERATURE_LAST),
)
MIROSTAT_VERSIONS = (("off", 0), ("v1", 1), ("v2", 2))

# The buttons under the stage list that load a library's order: (object name, text, tooltip,
# order).
ORDER_BUTTONS = (
    ("order_llama_cpp", "llama.cpp",
     "llama.cpp's default chain (common/common.h), temperature last.", ORDER_TEMPERATURE_LAST),
    ("order_transformers", "transformers",
     "transformers' order (generation/utils.py), temperature first.", ORDER_TEMPERATURE_FIRST),
)  # fmt: skip

STAGE_TITLES = {
    "logit_bias": "Logit bias", "repetition_penalty": "Repetition penalty",
    "frequency_presence": "Frequency / presence", "dry": "DRY",
    "no_repeat_ngram_size": "No repeat n-gram", "banned_strings": "Banned words",
    "min_new_tokens": "Min new tokens", "suppress_tokens": "Suppressed tokens",
    "top_n_sigma": "Top-nσ", "smoothing_factor": "Smoothing", "temperature": "Temperature",
    "top_k": "Top-k", "top_p": "Top-p", "min_p": "Min-p", "typical_p": "Typical-p",
    "epsilon_cutoff": "Epsilon", "eta_cutoff": "Eta", "top_a": "Top-a", "xtc": "XTC",
    "mirostat": "Mirostat", "grammar": "Grammar", "adaptive_p": "Adaptive-p",
}  # fmt: skip


def format_bias(bias: tuple[tuple[str, float], ...]) -> str:
    return "; ".join(f"{k}: {v:g}" for k, v in bias)


def parse_bias(text: str) -> tuple[tuple[str, float], ...]:
    """``"word: 2; #13: -inf"`` -> (("word", 2.0), ("#13", -inf)); ValueError if malformed."""
    out = []
    for part in filter(None, (p.strip() for p in text.split(";"))):
        key, sep, value = part.rpartition(":")
        if not sep or not key.strip():
            raise ValueError(f"write word: bias, got {part!r}")
        out.append((key.strip(), float(value)))
    return tuple(out)


def parse_ids(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.replace(",", " ").split())


def parse_words(text: str) -> tuple[str, ...]:
    return tuple(p.strip() for p in text.split(";") if p.strip())


def parse_breakers(text: str) -> tuple[str, ...]:
    """A JSON list of strings (TypeError when it is not a list)."""
    return tuple(str(x) for x in json.loads(text or "[]"))


def parse_grammar(text: str) -> str:
    """The form is checked here; the text itself when the chain builds."""
    check_grammar_spec(text.strip())
    return text.strip()


@dataclass(frozen=True)
class TextField:
    """A setting typed as text: ``parse`` reads it (ValueError or TypeError when malformed),
    ``show`` writes the setting's value as text."""

    field: str
    label: str
    hint: str
    parse: Callable[[str], Any]
    show: Callable[[Any], str]


TEXT_FIELDS = (
    TextField("logit_bias", "Logit bias", "word: 2; #13: -inf", parse_bias, format_bias),
    TextField("banned_strings", "Banned words", "word; other words; #13", parse_words,
              "; ".join),
    TextField("suppress_tokens", "Suppressed ids", "0, 13", parse_ids,
              lambda ids: ", ".join(map(str, ids))),
    TextField("dry_sequence_breakers", "DRY breakers", '["\\n", ":"]', parse_breakers,
              lambda breakers: json.dumps(list(breakers))),
    TextField("grammar", "Grammar", "choice:yes|no, regex:..., json:{...}", parse_grammar, str),
)  # fmt: skip
