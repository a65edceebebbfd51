"""Sampler settings: one frozen dataclass that builds the processor chain, and the presets."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields, replace
from typing import TYPE_CHECKING, Any

from engine.checks import RULES, check_setting

if TYPE_CHECKING:  # the processors need torch; the window reads settings before it loads
    from engine.processors import LogitsProcessor

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

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def build_chain(
        self, prompt_length: int, eos_token_ids: Sequence[int]
    ) -> list[LogitsProcessor]:
        """Penalties always come first; then temperature before the filters (transformers) or
        after them (the seed, llama.cpp). Stages that are off are left out."""
        from engine.processors import MinNewTokens, NoRepeatNGram, RepetitionPenalty, Temperature

        chain: list[LogitsProcessor] = []
        if self.repetition_penalty != 1.0:
            chain.append(RepetitionPenalty(self.repetition_penalty))
        if self.no_repeat_ngram_size:
            chain.append(NoRepeatNGram(self.no_repeat_ngram_size))
        if self.min_new_tokens:
            chain.append(MinNewTokens(self.min_new_tokens, prompt_length, eos_token_ids))
        temperature = Temperature(self.temperature)
        if self.order == ORDER_TEMPERATURE_FIRST:
            filters: list[LogitsProcessor] = [temperature]
            filters += self._filters(("top_k", "top_p", "min_p", "typical_p"))
        else:
            filters = self._filters(("top_k", "typical_p", "top_p", "min_p")) + [temperature]
        return chain + [f for f in filters if not _is_noop(f)]

    def _filters(self, names: Sequence[str]) -> list[LogitsProcessor]:
        from engine.processors import MinP, TopK, TopP, TypicalP

        make = {
            "top_k": lambda: TopK(self.top_k),
            "top_p": lambda: TopP(self.top_p),
            "min_p": lambda: MinP(self.min_p),
            "typical_p": lambda: TypicalP(self.typical_p),
        }
        return [make[name]() for name in names]

    def with_(self, **changes: Any) -> SamplerSettings:
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SamplerSettings:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


def _is_noop(p: LogitsProcessor) -> bool:
    from engine.processors import MinP, Temperature, TopK, TopP, TypicalP

    return (
        (isinstance(p, Temperature) and p.temperature == 1.0)
        or (isinstance(p, TopK) and p.top_k == 0)
        or (isinstance(p, TopP) and p.top_p >= 1.0)
        or (isinstance(p, MinP) and p.min_p <= 0.0)
        or (isinstance(p, TypicalP) and p.mass >= 1.0)
    )


# The one place presets live. The GUI adds user-saved presets on top of these.
PRESETS: dict[str, SamplerSettings] = {
    "Greedy": SamplerSettings(temperature=0.0),
    "Balanced": SamplerSettings(temperature=0.7, top_k=40, top_p=0.9),
    "Creative": SamplerSettings(temperature=1.1, top_p=0.98, min_p=0.02),
    "Precise": SamplerSettings(temperature=0.3, top_k=20, top_p=0.8, repetition_penalty=1.1),
    "Pure sampling": SamplerSettings(temperature=1.0),
}
DEFAULT_SETTINGS = PRESETS["Balanced"]
