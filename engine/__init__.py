"""Decoding Lab engine: pure PyTorch + transformers. Never imports Qt.

The names below load on first use (PEP 562), so ``import engine.records`` or
``engine.settings`` does not pull in torch and transformers: the window opens first and the
engine loads with the first model.
"""

from __future__ import annotations

import importlib
from typing import Any

_HOME = {
    "autoregressive_generate": "engine.generate",
    "autoregressive_generate_encoder_decoder": "engine.generate",
    "Candidate": "engine.records",
    "DEFAULT_SETTINGS": "engine.settings",
    "EmptyPromptError": "engine.errors",
    "GenerationSession": "engine.generate",
    "GreedyProcessor": "engine.processors",
    "IncrementalDetokenizer": "engine.generate",
    "load_model": "engine.models",
    "make_bundle": "engine.models",
    "MinNewTokens": "engine.processors",
    "MinP": "engine.processors",
    "ModelBundle": "engine.models",
    "ModelLoadError": "engine.errors",
    "ModelStepper": "engine.generate",
    "MultinomialProcessor": "engine.processors",
    "NonFiniteLogitsError": "engine.errors",
    "NoRepeatNGram": "engine.processors",
    "NucleusProcessor": "engine.processors",
    "PRESETS": "engine.settings",
    "RepetitionPenalty": "engine.processors",
    "RunSummary": "engine.records",
    "SamplerSettings": "engine.settings",
    "Step": "engine.records",
    "stream_generate": "engine.generate",
    "Temperature": "engine.processors",
    "TopK": "engine.processors",
    "TopKNucleusProcessor": "engine.processors",
    "TopKProcessor": "engine.processors",
    "TopP": "engine.processors",
    "TypicalP": "engine.processors",
}


def __getattr__(name: str) -> Any:
    module = _HOME.get(name)
    if module is None:
        raise AttributeError(f"module 'engine' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOME))


__all__ = sorted(_HOME)
