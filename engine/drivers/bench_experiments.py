"""The experiments' figures for ``main.py bench`` (issue 26): the step sampler at N = 100,000
on the model's real vocabulary (target: under a second after the forward pass), the grammar
stage's cost per token beside the same run without it (measured alternately in one process),
and fp32 against bf16 of one model in lockstep."""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable
from typing import Any

import torch

from engine.decode.session import GenerationSession
from engine.experiments.lockstep import Lockstep
from engine.experiments.step_sample import MAX_SAMPLES, sample_step
from engine.models.loading import ModelBundle
from engine.sampling.settings import SamplerSettings

PROMPT = "Once upon a time, there was a"
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 24},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "hobbies": {"type": "array", "items": {"type": "string", "maxLength": 16}, "maxItems": 3},
    },
    "required": ["name", "age", "hobbies"],
    "additionalProperties": False,
}


def _session(bundle: ModelBundle, ids: list[int], settings: SamplerSettings) -> GenerationSession:
    return GenerationSession.over(bundle, ids, settings, top_n=1, fast=True)


def step_sampler_section(bundle: ModelBundle, say: Callable[[str], None]) -> dict[str, Any]:
    """N = 100,000 draws of one step: the best of three, the forward pass timed apart."""
    ids = bundle.encode_prompt(PROMPT, use_chat_template=False)
    session = _session(bundle, ids, SamplerSettings(temperature=1.0))
    runs = [sample_step(session, MAX_SAMPLES, seed=k) for k in range(3)]
    best = min(runs, key=lambda r: r.sample_s)
    say(f"E1. step sampler, N = {MAX_SAMPLES:,} on {best.survivors:,} tokens: "
        f"{best.sample_s * 1000:.0f} ms after the forward pass ({best.forward_s * 1000:.0f} ms; "
        f"target < 1000 ms); TV {best.tv:.4f}, chi-square {best.chi2:.0f} on {best.dof} dof, "
        f"p = {best.p_value:.2f}")  # fmt: skip
    return {"n": best.n, "sample_s": best.sample_s, "forward_s": best.forward_s,
            "tv": best.tv, "chi2": best.chi2, "dof": best.dof, "p_value": best.p_value}  # fmt: skip


def grammar_section(bundle: ModelBundle, say: Callable[[str], None], n: int = 48) -> dict[str, Any]:
    """Tokens/s with a JSON-schema grammar and without, alternated (A B A B) on a shared CPU."""
    ids = bundle.encode_prompt("Describe a person as JSON.")
    plain = SamplerSettings(temperature=0.7, max_new_tokens=n, seed=1)
    constrained = plain.with_(grammar="json:" + json.dumps(SCHEMA))
    rates: dict[str, float] = {"plain": 0.0, "grammar": 0.0}
    text = ""
    for _ in range(2):
        for name, settings in (("plain", plain), ("grammar", constrained)):
            session = _session(bundle, ids, settings)
            start = time.perf_counter()
            steps = list(session.stream())
            rates[name] = max(rates[name], len(steps) / (time.perf_counter() - start))
            if name == "grammar":
                text = bundle.decode(session.generated_ids)
    try:
        valid = isinstance(json.loads(text), dict)
    except ValueError:
        valid = False
    say(f"E2. grammar (JSON schema) vs none: {rates['grammar']:.1f} vs {rates['plain']:.1f} "
        f"tok/s ({rates['grammar'] / rates['plain']:.2f}x); output parses: "
        f"{'yes' if valid else 'NO'}")  # fmt: skip
    return {**rates, "json_parses": valid}


def lockstep_section(
    bundle: ModelBundle, say: Callable[[str], None], n: int = 32
) -> dict[str, Any]:
    """fp32 decides, a bf16 copy of the same weights scores: how far apart they are."""
    ids = bundle.encode_prompt(PROMPT, use_chat_template=False)
    b = copy.deepcopy(bundle.model).to(torch.bfloat16)
    settings = SamplerSettings(temperature=0.0, max_new_tokens=n)
    session = GenerationSession.over(bundle, ids, settings, top_n=1)
    lock = Lockstep(session, b, bundle.tokenizer, top_n=10)
    start = time.perf_counter()
    list(lock.stream())
    seconds = time.perf_counter() - start
    s = lock.summary()
    say(f"E3. lockstep fp32 vs bf16, {s.tokens} tokens in {seconds:.1f} s: mean KL "
        f"{s.mean_kl:.4f} nats (max {s.max_kl:.4f} at step {s.max_kl_step}), top-10 Jaccard "
        f"{s.mean_jaccard:.2f}, greedy agreement {s.greedy_agreement:.0%}")  # fmt: skip
    return {"tokens": s.tokens, "seconds": seconds, "mean_kl": s.mean_kl, "max_kl": s.max_kl,
            "mean_jaccard": s.mean_jaccard, "greedy_agreement": s.greedy_agreement}  # fmt: skip


def experiments_section(bundle: ModelBundle, say: Callable[[str], None]) -> dict[str, Any]:
    """All three, on the bench's model (SmolLM2-135M)."""
    bundle.model.to(torch.float32)
    return {
        "step_sampler": step_sampler_section(bundle, say),
        "grammar": grammar_section(bundle, say),
        "lockstep": lockstep_section(bundle, say),
    }
