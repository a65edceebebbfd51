"""Sampler settings: one plain frozen record of what the sliders set, and the presets. No torch:
the window builds these before the engine loads; ``engine.sampling.build.build_chain``
turns one into the chain of stages."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from engine.sampling.checks import RULES, check_grammar_spec, check_setting

ORDER_TEMPERATURE_FIRST = "temperature_first"  # transformers' order
ORDER_TEMPERATURE_LAST = "temperature_last"  # llama.cpp's default chain (and the seed's)
ORDER_TRANSFORMERS, ORDER_LLAMA_CPP = ORDER_TEMPERATURE_FIRST, ORDER_TEMPERATURE_LAST
ORDERS = (ORDER_TEMPERATURE_FIRST, ORDER_TEMPERATURE_LAST)

# Every stage a chain can hold, by the settings name that switches it on. The order presets
# are below (ORDER_OF, with their sources); ``stage_order`` may list any of these.
STAGE_NAMES = (
    "logit_bias", "repetition_penalty", "frequency_presence", "dry", "no_repeat_ngram_size",
    "banned_strings", "min_new_tokens", "suppress_tokens", "top_n_sigma", "smoothing_factor",
    "temperature", "top_k", "top_p", "min_p", "typical_p", "epsilon_cutoff", "eta_cutoff",
    "top_a", "xtc", "mirostat", "grammar", "adaptive_p",
)  # fmt: skip
DRY_BREAKERS = ("\n", ":", '"', "*")  # llama.cpp's default dry_sequence_breakers


@dataclass(frozen=True)
class SamplerSettings:
    """What the sliders set. Neutral values switch a stage off (top_k 0, top_p 1, min_p 0, ...)."""

    temperature: float = 1.0  # 0 = greedy
    top_k: int = 0  # 0 = off
    top_p: float = 1.0  # 1 = off
    min_p: float = 0.0  # 0 = off
    typical_p: float = 1.0  # 1 = off
    repetition_penalty: float = 1.0  # 1 = off
    no_repeat_ngram_size: int = 0  # 0 = off
    min_new_tokens: int = 0
    max_new_tokens: int = 128
    order: str = ORDER_TEMPERATURE_FIRST  # a preset order: transformers' or llama.cpp's
    seed: int = 0
    # Penalties (repetition, frequency, presence) look at the last N ids; 0 = all of them.
    penalty_last_n: int = 0
    frequency_penalty: float = 0.0  # 0 = off; subtracted once per earlier occurrence
    presence_penalty: float = 0.0  # 0 = off; subtracted once if the token occurred
    dry_multiplier: float = 0.0  # 0 = off
    dry_base: float = 1.75
    dry_allowed_length: int = 2
    dry_penalty_last_n: int = 0  # 0 = the whole sequence
    dry_sequence_breakers: tuple[str, ...] = DRY_BREAKERS
    # (word or "#id", bias added to the logit); a word's last token is biased after its prefix
    logit_bias: tuple[tuple[str, float], ...] = ()
    banned_strings: tuple[str, ...] = ()  # words or "#id" never generated
    suppress_tokens: tuple[int, ...] = ()  # token ids never generated
    top_n_sigma: float = 0.0  # 0 = off
    epsilon_cutoff: float = 0.0  # 0 = off
    eta_cutoff: float = 0.0  # 0 = off
    xtc_threshold: float = 0.1
    xtc_probability: float = 0.0  # 0 = off
    top_a: float = 0.0  # 0 = off
    dynatemp_range: float = 0.0  # 0 = plain temperature
    dynatemp_exponent: float = 1.0
    smoothing_factor: float = 0.0  # 0 = off
    smoothing_curve: float = 1.0
    mirostat: int = 0  # 0 = off, 1 or 2
    mirostat_tau: float = 5.0
    mirostat_eta: float = 0.1
    # Constrained decoding (engine.sampling.grammar): "json:SCHEMA", "regex:RE",
    # "choice:a|b|c" or "lark:GRAMMAR"; "" = off.
    grammar: str = ""
    # Adaptive-p (engine.sampling.adaptive_p, llama.cpp): a target probability; < 0 = off.
    adaptive_p_target: float = -1.0
    adaptive_p_decay: float = 0.9
    # The user's stage order (names from STAGE_NAMES); () = the preset ``order``. Stages it
    # leaves out follow in the preset's order.
    stage_order: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        # Lists from JSON or QSettings become tuples, so the record stays hashable and frozen.
        for name in ("dry_sequence_breakers", "banned_strings", "stage_order"):
            object.__setattr__(self, name, tuple(str(x) for x in getattr(self, name)))
        object.__setattr__(
            self, "suppress_tokens", tuple(_token_id(x) for x in self.suppress_tokens)
        )
        object.__setattr__(
            self, "logit_bias", tuple((str(k), _bias(v)) for k, v in self.logit_bias)
        )
        if self.order not in ORDERS:
            raise ValueError(f"order must be one of {ORDERS}, got {self.order!r}")
        unknown = [n for n in self.stage_order if n not in STAGE_NAMES]
        if unknown or len(set(self.stage_order)) != len(self.stage_order):
            raise ValueError(
                f"stage_order must list distinct stages of {STAGE_NAMES}, got {self.stage_order!r}"
            )
        if not isinstance(self.max_new_tokens, int) or self.max_new_tokens < 0:
            raise ValueError(f"max_new_tokens must be an integer >= 0, got {self.max_new_tokens!r}")
        if not isinstance(self.seed, int):
            raise ValueError(f"seed must be an integer, got {self.seed!r}")
        check_grammar_spec(self.grammar)
        for name in RULES:  # the limits the processors check, without loading torch
            check_setting(name, getattr(self, name))

    def with_(self, **changes: Any) -> SamplerSettings:
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SamplerSettings:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


# The settings a sweep can vary (engine.experiments.sweep, lessons): the numeric ones; the
# seed is held (a variation run varies it).
SWEEPABLE = tuple(
    f.name for f in fields(SamplerSettings) if f.type in ("float", "int") and f.name != "seed"
)


def _token_id(x: Any) -> int:
    if isinstance(x, bool) or not isinstance(x, (int, str)) or not str(x).isdigit():
        raise ValueError(f"suppress_tokens takes token ids >= 0, got {x!r}")
    return int(x)


def _bias(v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v or v == float("inf"):
        raise ValueError(f"a logit bias must be a number below +inf (-inf bans), got {v!r}")
    return float(v)


# transformers' order, from transformers/generation/utils.py ``_get_logits_processor`` (5.x):
# sequence_bias, repetition_penalty, no_repeat_ngram_size, bad_words_ids, min_new_tokens,
# suppress_tokens; then, when sampling: temperature, top_k, top_p, min_p, typical_p,
# epsilon_cutoff, eta_cutoff. Stages transformers lacks sit where their kin sit (frequency /
# presence and DRY with the penalties, smoothing with temperature, the other filters after the
# last of its filters, mirostat last, where it picks the token). The grammar masks right after
# the bans (structured-output engines mask the logits before the sampling parameters act; a
# truncation before it could leave only forbidden tokens, and the chain then skips a stage that
# would empty the distribution), and adaptive-p, which ends llama.cpp's chain in place of the
# final draw, comes last.
TRANSFORMERS_ORDER = (
    "logit_bias", "repetition_penalty", "frequency_presence", "dry", "no_repeat_ngram_size",
    "banned_strings", "min_new_tokens", "suppress_tokens", "grammar", "temperature",
    "smoothing_factor", "top_k", "top_p", "min_p", "typical_p", "epsilon_cutoff", "eta_cutoff",
    "top_n_sigma", "top_a", "xtc", "mirostat", "adaptive_p",
)  # fmt: skip
# llama.cpp's default chain, from common/common.h ``common_params_sampling::samplers`` and
# common/sampling.cpp ``common_sampler_init``: logit_bias first, then penalties (repeat,
# frequency, presence over penalty_last_n), dry, top_n_sigma, top_k, typical_p, top_p, min_p,
# xtc, temperature (temp_ext: dynamic temperature); with mirostat on, temperature then mirostat.
# Stages llama.cpp lacks follow their kin (bans with the penalties; epsilon, eta, top-a after
# min-p; smoothing just before temperature). The grammar and adaptive-p sit as in the other
# order.
LLAMA_CPP_ORDER = (
    "logit_bias", "repetition_penalty", "frequency_presence", "dry", "no_repeat_ngram_size",
    "banned_strings", "min_new_tokens", "suppress_tokens", "grammar", "top_n_sigma", "top_k",
    "typical_p", "top_p", "min_p", "epsilon_cutoff", "eta_cutoff", "top_a", "xtc",
    "smoothing_factor", "temperature", "mirostat", "adaptive_p",
)  # fmt: skip
ORDER_OF = {ORDER_TEMPERATURE_FIRST: TRANSFORMERS_ORDER, ORDER_TEMPERATURE_LAST: LLAMA_CPP_ORDER}


def stage_order(settings: SamplerSettings) -> tuple[str, ...]:
    """The user's order (``settings.stage_order``), the stages it leaves out following in the
    preset's order; the preset alone when it is empty."""
    preset = ORDER_OF[settings.order]
    return (*settings.stage_order, *(n for n in preset if n not in settings.stage_order))


# The one place presets live. The GUI adds user-saved presets on top of these.
PRESETS: dict[str, SamplerSettings] = {
    "Greedy": SamplerSettings(temperature=0.0),
    "Balanced": SamplerSettings(temperature=0.7, top_k=40, top_p=0.9),
    "Creative": SamplerSettings(temperature=1.1, top_p=0.98, min_p=0.02),
    "Precise": SamplerSettings(temperature=0.3, top_k=20, top_p=0.8, repetition_penalty=1.1),
    "Pure sampling": SamplerSettings(temperature=1.0),
    # Presets for the newer samplers, with the values their authors suggest as a start.
    "Mirostat 2": SamplerSettings(mirostat=2, mirostat_tau=5.0, mirostat_eta=0.1),
    "DRY + min-p": SamplerSettings(
        temperature=1.0, min_p=0.05, dry_multiplier=0.8, order=ORDER_TEMPERATURE_LAST
    ),
    "XTC": SamplerSettings(
        temperature=1.0,
        min_p=0.02,
        xtc_threshold=0.1,
        xtc_probability=0.5,
        order=ORDER_TEMPERATURE_LAST,
    ),  # fmt: skip
    "Top-n-sigma": SamplerSettings(temperature=1.5, top_n_sigma=1.0),
    "Dynamic temperature": SamplerSettings(
        temperature=1.0, dynatemp_range=0.5, min_p=0.05, order=ORDER_TEMPERATURE_LAST
    ),
}
DEFAULT_SETTINGS = PRESETS["Balanced"]
