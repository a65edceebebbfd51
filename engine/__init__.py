"""Decoding Lab engine: pure PyTorch + transformers. Never imports Qt.

The parts, one folder each::

    models/      loading a model, its device and dtype, prompt ids, token text
    step/        decode back-ends: ids -> next logits (model.forward, the fast paths, KV caches)
    quant/       int8 and int4 weights on the CPU kernels, a GGUF's own 4-bit blocks (issue 36)
    sampling/    settings and the sampler chain: logits -> probabilities -> a token
    decode/      decoding methods: sessions that turn logits into Step records
    tree/        the multiverse: every branch as a RunTree, expansion by probability, scoring
    experiments/ sample one step N times, sweeps, two models in lockstep
    internals/   inside a step: logit lens and decision layers, attention, logit attribution,
                 integrated gradients (issue 33), from one hooked forward pass
    serve/       served models (vLLM, llama-server, Ollama, SGLang) as sessions
    classroom/   lessons, guess rounds, exports and the shared web page
    drivers/     the window's actions, method comparison, the seed API, the benchmark
    validate/    bounded readers of every file and server reply (sizes, depth, types, values)
    runtime/     how the process runs its threads: a thread count that drops when the machine
                 is busy and comes back when it is quiet (threads, issue 57)
    records.py   the plain records that leave the engine;  errors.py  its exceptions

The data path from prompt to step record:

    1. drivers.workbench.Workbench.start(RunRequest)    the window's "Generate", on the worker
    2. models.loading.ModelBundle.encode_prompt(text)     prompt (+ chat template) -> ids
    3. drivers.workbench.make_session(...)                 the method's session over those ids
    4. sampling.build.build_chain(settings)                stages that are not neutral -> Chain
    5. decode.base.SessionBase.stream()                    the one loop: _advance() per token
    6. step.stepper.Stepper.logits(ids)                    ids -> [1, vocab] logits (KV cached)
    7. Chain.probs(ids, logits) -> probs, cut              every stage, recording who cut what
    8. Chain.pick(probs, generator)                        argmax (greedy) or a seeded draw
    9. decode.measure.measure(...)                         top-N, ranks, entropies: one host copy
    10. SessionBase._append(...) -> records.Step           Chain.accept (mirostat), then the
                                                           frozen record -> worker -> run store
    (7-9 on the common chains, in decode.pipeline.PipelinedSession: decode.device_stats
    .token_stats, one tensor function into a fixed buffer, read back one token behind; on CUDA
    replayed with the forward pass from one graph, decode.token_graph)

The names below load on first use (PEP 562), so ``import engine.records`` or
``engine.sampling.settings`` does not pull in torch and transformers: the window opens first and
the engine loads with the first model.
"""

from __future__ import annotations

import importlib
from typing import Any

_HOME = {
    "autoregressive_generate": "engine.drivers.compat",
    "autoregressive_generate_encoder_decoder": "engine.drivers.compat",
    "BeamSession": "engine.decode.beam",
    "ContrastiveSession": "engine.decode.contrastive",
    "DRY": "engine.sampling.penalties",
    "GroupBeamSession": "engine.decode.search",
    "Mirostat": "engine.sampling.mirostat",
    "SampledBeamSession": "engine.decode.search",
    "XTC": "engine.sampling.truncation",
    "build_chain": "engine.sampling.build",
    "Candidate": "engine.records",
    "DEFAULT_SETTINGS": "engine.sampling.settings",
    "EmptyPromptError": "engine.errors",
    "GenerationSession": "engine.decode.session",
    "GreedyProcessor": "engine.drivers.compat",
    "IncrementalDetokenizer": "engine.models.text",
    "load_model": "engine.models.loading",
    "make_bundle": "engine.models.loading",
    "MinNewTokens": "engine.sampling.penalties",
    "MinP": "engine.sampling.truncation",
    "ModelBundle": "engine.models.loading",
    "ModelLoadError": "engine.errors",
    "ModelStepper": "engine.step.stepper",
    "MultinomialProcessor": "engine.drivers.compat",
    "ngram_assisted_speculative_generate": "engine.drivers.compat",
    "NonFiniteLogitsError": "engine.errors",
    "NoRepeatNGram": "engine.sampling.penalties",
    "NucleusProcessor": "engine.drivers.compat",
    "PRESETS": "engine.sampling.settings",
    "RepetitionPenalty": "engine.sampling.penalties",
    "RunSummary": "engine.records",
    "SamplerSettings": "engine.sampling.settings",
    "speculative_generate": "engine.drivers.compat",
    "speculative_generate_encoder_decoder": "engine.drivers.compat",
    "SpeculativeSession": "engine.decode.speculative",
    "Step": "engine.records",
    "stream_generate": "engine.decode.session",
    "Temperature": "engine.sampling.temperature",
    "TopK": "engine.sampling.truncation",
    "TopKNucleusProcessor": "engine.drivers.compat",
    "TopKProcessor": "engine.drivers.compat",
    "TopP": "engine.sampling.truncation",
    "TypicalP": "engine.sampling.truncation",
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
