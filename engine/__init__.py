"""Decoding Lab engine: pure PyTorch + transformers. Never imports Qt.

The names below load on first use (PEP 562), so ``import engine.records`` or
``engine.settings`` does not pull in torch and transformers: the window opens first and the
engine loads with the first model.
"""

from __future__ import annotations

import importlib
from typing import Any

_HOME = {
    "autoregressive_generate": "engine.compat",
    "autoregressive_generate_encoder_decoder": "engine.compat",
    "BeamSession": "engine.beam",
    "ContrastiveSession": "engine.search",
    "DRY": "engine.processors",
    "GroupBeamSession": "engine.search",
    "Mirostat": "engine.processors",
    "SampledBeamSession": "engine.search",
    "XTC": "engine.processors",
    "build_chain": "engine.processors",
    "Candidate": "engine.records",
    "DEFAULT_SETTINGS": "engine.settings",
    "EmptyPromptError": "engine.errors",
    "GenerationSession": "engine.session",
    "GreedyProcessor": "engine.compat",
    "IncrementalDetokenizer": "engine.text",
    "load_model": "engine.models",
    "make_bundle": "engine.models",
    "MinNewTokens": "engine.processors",
    "MinP": "engine.processors",
    "ModelBundle": "engine.models",
    "ModelLoadError": "engine.errors",
    "ModelStepper": "engine.stepper",
    "MultinomialProcessor": "engine.compat",
    "ngram_assisted_speculative_generate": "engine.compat",
    "NonFiniteLogitsError": "engine.errors",
    "NoRepeatNGram": "engine.processors",
    "NucleusProcessor": "engine.compat",
    "PRESETS": "engine.settings",
    "RepetitionPenalty": "engine.processors",
    "RunSummary": "engine.records",
    "SamplerSettings": "engine.settings",
    "speculative_generate": "engine.compat",
    "speculative_generate_encoder_decoder": "engine.compat",
    "SpeculativeSession": "engine.speculative",
    "Step": "engine.records",
    "stream_generate": "engine.session",
    "Temperature": "engine.processors",
    "TopK": "engine.processors",
    "TopKNucleusProcessor": "engine.compat",
    "TopKProcessor": "engine.compat",
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
