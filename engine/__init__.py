"""Decoding Lab engine: pure PyTorch + transformers. Never imports Qt."""

from engine.generate import (
    EmptyPromptError,
    GenerationSession,
    IncrementalDetokenizer,
    ModelStepper,
    NonFiniteLogitsError,
    autoregressive_generate,
    autoregressive_generate_encoder_decoder,
    stream_generate,
)
from engine.models import ModelBundle, ModelLoadError, load_model, make_bundle
from engine.processors import (
    GreedyProcessor,
    MinNewTokens,
    MinP,
    MultinomialProcessor,
    NoRepeatNGram,
    NucleusProcessor,
    RepetitionPenalty,
    Temperature,
    TopK,
    TopKNucleusProcessor,
    TopKProcessor,
    TopP,
    TypicalP,
)
from engine.records import Candidate, RunSummary, Step
from engine.settings import DEFAULT_SETTINGS, PRESETS, SamplerSettings

__all__ = [
    "Candidate",
    "DEFAULT_SETTINGS",
    "EmptyPromptError",
    "GenerationSession",
    "GreedyProcessor",
    "IncrementalDetokenizer",
    "MinNewTokens",
    "MinP",
    "ModelBundle",
    "ModelLoadError",
    "ModelStepper",
    "MultinomialProcessor",
    "NoRepeatNGram",
    "NonFiniteLogitsError",
    "NucleusProcessor",
    "PRESETS",
    "RepetitionPenalty",
    "RunSummary",
    "SamplerSettings",
    "Step",
    "Temperature",
    "TopK",
    "TopKNucleusProcessor",
    "TopKProcessor",
    "TopP",
    "TypicalP",
    "autoregressive_generate",
    "autoregressive_generate_encoder_decoder",
    "load_model",
    "make_bundle",
    "stream_generate",
]
