"""Sampler settings: one plain frozen record of what the sliders set, and the presets. No torch:
the window builds these before the engine loads; ``engine.processors.build_chain`` turns one
into the chain of stages."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from engine.checks import RULES, check_setting

ORDER_TEMPERATURE_FIRST = "temperature_first"  # transformers
ORDER_TEMPERATURE_LAST = "temperature_last"  # the seed, llama.cpp
ORDERS = (ORDER_TEMPERATURE_FIRST, ORDER_TEMPERATURE_LAST)


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
    order: str = ORDER_TEMPERATURE_FIRST
    seed: int = 0

    def __post_init__(self) -> None:
        if self.order not in ORDERS:
            raise ValueError(f"order must be one of {ORDERS}, got {self.order!r}")
        if not isinstance(self.max_new_tokens, int) or self.max_new_tokens < 0:
            raise ValueError(f"max_new_tokens must be an integer >= 0, got {self.max_new_tokens!r}")
        if not isinstance(self.seed, int):
            raise ValueError(f"seed must be an integer, got {self.seed!r}")
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


# The one place presets live. The GUI adds user-saved presets on top of these.
PRESETS: dict[str, SamplerSettings] = {
    "Greedy": SamplerSettings(temperature=0.0),
    "Balanced": SamplerSettings(temperature=0.7, top_k=40, top_p=0.9),
    "Creative": SamplerSettings(temperature=1.1, top_p=0.98, min_p=0.02),
    "Precise": SamplerSettings(temperature=0.3, top_k=20, top_p=0.8, repetition_penalty=1.1),
    "Pure sampling": SamplerSettings(temperature=1.0),
}
DEFAULT_SETTINGS = PRESETS["Balanced"]
