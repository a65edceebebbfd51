"""Bench section 11: the pipelined session (``engine.decode.pipeline``: the host one token
behind, the whole token from one CUDA graph) against today's session and transformers.generate,
alternated, same tokens.

* CPU (``cpu_pipeline_section``): pipelined vs today's on the bundled SmolLM2-135M, greedy and a
  seeded chain; the figure that decides ``ON_BY_DEFAULT["cpu"]``.
* GPU (``gpu_pipeline_section``): the SmolLM2-135M shape in bf16 and fp32 with top-20, against
  generate, today's session and the captured step alone; the profiler's kernels, GPU busy share
  and host idle per token before (today's) and after (pipelined); the Qwen2.5-0.5B and Gemma-3
  shapes against generate; speculative decoding (n-gram, draft model) and beam search per
  accepted token against plain decoding. First run on an H100 at stop 42
  (resources/notes/pipeline-gpu.md).
"""

from __future__ import annotations

import os
import traceback
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import torch

from engine.decode.beam import BeamSession
from engine.decode.pipeline import PipelinedSession
from engine.decode.session import GenerationSession
from engine.decode.speculative import ModelDrafter, NGramDrafter, SpeculativeSession
from engine.drivers.bench_common import alternate, line
from engine.drivers.bench_families import _generate_rate, family_model
from engine.drivers.bench_profile import token_profile
from engine.drivers.compare import ready
from engine.models.device import model_device, timed
from engine.records import Step
from engine.sampling.settings import SamplerSettings

Say = Callable[[str], None]
GREEDY = SamplerSettings(temperature=0)
SEEDED = SamplerSettings(temperature=0.8, top_k=40, top_p=0.95, repetition_penalty=1.1)


def graph_line(session: GenerationSession) -> str:
    """Whether a pipelined session's tokens ran from the whole-token graph, in words."""
    graph = getattr(session, "_graph", None)
    if getattr(session, "fallback", None):
        return f"today's step ({session.fallback})"  # type: ignore[attr-defined]
    if graph is None:
        return "no whole-token graph (the step is not captured here)"
    if graph.broken is not None:
        return graph.broken
    return f"whole-token graph: {graph.captures} capture(s), {graph.launches} tokens replayed"


def _session_rate(
    model: torch.nn.Module, ids: list[int], n: int, settings: SamplerSettings, piped: bool
) -> tuple[float, list[int], str]:
    """One session's rate over ``n`` tokens (top-20, seed 3), after two tokens off the clock
    (the GPU step and the whole-token graph are captured then), its tokens, and what they ran
    on (``graph_line``)."""
    s = settings.with_(max_new_tokens=n + 2, min_new_tokens=n + 2)
    options: dict[str, Any] = dict(eos_token_ids=[], top_n=20, fast=True, seed=3)
    if piped:
        session: GenerationSession = PipelinedSession(model, ids, s, pipeline=True, **options)
    else:
        session = GenerationSession(model, ids, s, **options)
    ready(session, n + 2)
    list(session.stream(2))
    records, secs = timed(model_device(model), lambda: list(session.stream(n)))
    rate = sum(isinstance(r, Step) for r in records) / secs
    return rate, session.generated_ids, graph_line(session)


def pipeline_vs_today(
    model: torch.nn.Module,
    ids: list[int],
    n: int,
    settings: SamplerSettings,
    with_hf: bool = False,
) -> tuple[dict[str, float], bool, str]:
    """Best rates of today's session, the pipelined one (and generate), warmed up and
    alternated; whether the two sessions made the same tokens; what the pipelined session's
    tokens ran on (``graph_line``)."""
    tokens: dict[str, list[int]] = {}
    ran: dict[str, str] = {}
    runs: dict[str, Callable[[int], tuple[float, list[int], str]]] = {
        "today": lambda k: _session_rate(model, ids, k, settings, piped=False),
        "pipelined": lambda k: _session_rate(model, ids, k, settings, piped=True),
        **({"hf": lambda k: (*_generate_rate(model, ids, k), "")} if with_hf else {}),
    }
    for run in runs.values():  # warm-up: packing, compile, capture
        run(4)

    def measured(kind: str) -> float:
        rate, tokens[kind], ran[kind] = runs[kind](n)
        return rate

    best = alternate({k: (lambda k=k: measured(k)) for k in runs}, rounds=3)
    return best, tokens["today"] == tokens["pipelined"], ran["pipelined"]


def cpu_pipeline_section(bundle: Any, say: Say, n: int = 64) -> dict[str, Any]:
    """11. CPU: pipelined vs today's session on the bundled model, greedy and seeded."""
    ids = bundle.encode_prompt("Write a short poem about the sea.")
    out: dict[str, Any] = {}
    for name, settings in (("greedy", GREEDY), ("seeded top-k/top-p/penalty", SEEDED)):
        best, same, ran = pipeline_vs_today(bundle.model, ids, n, settings)
        say(line(f"11. pipelined vs today's session, CPU, {name}", best["pipelined"],
                 best["today"], "tok/s", "piped", "today"))  # fmt: skip
        say(f"   same tokens: {'yes' if same else 'NO'}; {ran}; load {os.getloadavg()[0]:.2f}")
        out[name] = {**best, "identical": same}
    return out


def smollm2_shape(dtype: torch.dtype, layers: int = 30) -> torch.nn.Module:
    """SmolLM2-135M's architecture with random weights on CUDA (``layers`` fewer: a draft)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=layers,
        num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=8192,
        rope_theta=100000.0, rms_norm_eps=1e-5, tie_word_embeddings=True,
    )  # fmt: skip
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).to("cuda", dtype).eval()
    model.generation_config.pad_token_id = 0
    return model


def _smollm2_rows(say: Say, dtype: torch.dtype, ids: list[int], n: int) -> dict[str, Any]:
    model = smollm2_shape(dtype)
    name = str(dtype).removeprefix("torch.")
    best, same, ran = pipeline_vs_today(model, ids, n, GREEDY, with_hf=True)
    before = token_profile(model, ids)
    after = token_profile(model, ids, session_cls=PipelinedSession, pipeline=True)
    # tok/s of the captured step with a greedy pick, nothing else (the better of two timings)
    alone = 1e3 / min(before.step_ms, after.step_ms)
    say("   " + line(f"11. SmolLM2 shape, {name}, top-20, pipelined", best["pipelined"],
                     best["hf"], "tok/s", "piped", "HF"))  # fmt: skip
    say("   " + line("    vs today's session", best["pipelined"], best["today"], "tok/s",
                     "piped", "today"))  # fmt: skip
    say("   " + line("    vs the captured step alone", best["pipelined"], alone, "tok/s",
                     "piped", "step"))  # fmt: skip
    say(f"   same tokens as today's session: {'yes' if same else 'NO'}; {ran}")
    say(f"   before (today's): {before.describe()}")
    say(f"   after (pipelined): {after.describe()}")
    return {**best, "step_alone": alone, "identical": same,
            "profile_before": asdict(before), "profile_after": asdict(after)}  # fmt: skip


def _per_accepted(say: Say, ids: list[int], n: int, plain_rate: float) -> dict[str, Any]:
    """Speculative decoding (n-gram, a 4-layer draft of the same shape) and beam search (4),
    seconds per accepted token against the pipelined plain session."""
    model = smollm2_shape(torch.bfloat16)
    out: dict[str, Any] = {}
    grounded = (ids * 8)[:256]  # repeats: the n-gram drafter finds continuations
    drafters = {"n-gram": NGramDrafter(), "draft model": None}
    for name, drafter in drafters.items():
        if drafter is None:
            drafter = ModelDrafter(smollm2_shape(torch.bfloat16, layers=4), fast=True)
        spec = SpeculativeSession(
            model, grounded, drafter, GREEDY.with_(max_new_tokens=n), eos_token_ids=[],
            gamma=5, top_n=20, fast=True,
        )  # fmt: skip
        ready(spec, n)
        made, secs = timed(model.device, lambda spec=spec: spec.run(n))
        rate = len(made) / secs
        say("   " + line(f"11. speculative ({name}) per accepted token", rate, plain_rate,
                         "tok/s", "spec", "plain"))  # fmt: skip
        say(f"   acceptance {spec.stats.acceptance_rate:.0%}, {spec.stats.target_passes} "
            f"target passes for {len(made)} tokens")  # fmt: skip
        out[name] = {"rate": rate, "acceptance": spec.stats.acceptance_rate}
    beam = BeamSession(model, ids, GREEDY.with_(max_new_tokens=n), num_beams=4, top_n=20)
    found, secs = timed(model.device, beam.run)
    rate = len(found.token_ids) / secs
    say("   " + line("11. beam search (4) per token", rate, plain_rate, "tok/s", "beam", "plain"))
    out["beam"] = {"rate": rate}
    return out


def gpu_pipeline_section(say: Say, n: int = 128) -> dict[str, Any] | None:
    """11. GPU: the pipelined session's rows (the module's docstring lists them)."""
    if not torch.cuda.is_available():
        say("11. GPU pipeline: skipped, no CUDA device on this machine")
        return None
    say(f"11. GPU pipeline: {torch.cuda.get_device_name()}")
    ids = [(37 * i + 11) % 5000 + 100 for i in range(16)]
    out: dict[str, Any] = {}
    for dtype in (torch.bfloat16, torch.float32):
        name = str(dtype).removeprefix("torch.")
        out[name] = _reported(say, f"SmolLM2 shape, {name}", _smollm2_rows, say, dtype, ids, n)
    for name in ("Qwen2.5-0.5B", "Gemma-3-270m"):
        out[name] = _reported(say, name, _family_rows, say, name, ids, n)
    plain = (out.get("bfloat16") or {}).get("pipelined")
    if plain:
        spec = _reported(say, "per accepted token", _per_accepted, say, ids, n, plain)
        out["per_accepted"] = spec
    return out


def _family_rows(say: Say, name: str, ids: list[int], n: int) -> dict[str, Any]:
    model = family_model(name, torch.bfloat16).to("cuda")
    best, same, ran = pipeline_vs_today(model, ids, n, GREEDY, with_hf=True)
    say("   " + line(f"11. {name} shape, bf16, pipelined", best["pipelined"], best["hf"],
                     "tok/s", "piped", "HF"))  # fmt: skip
    say(f"   vs today's {best['today']:.1f} tok/s; same tokens: {'yes' if same else 'NO'}; {ran}")
    return {**best, "identical": same}


def _reported(say: Say, what: str, rows: Callable[..., Any], *args: Any) -> Any:
    """``rows(*args)``, or None with the failure in one line: one row's error does not lose
    the rows after it (a GPU lease is short)."""
    try:
        return rows(*args)
    except Exception as exc:  # noqa: BLE001 - report and go on
        where = traceback.extract_tb(exc.__traceback__)[-1]
        first = (str(exc).splitlines() or [""])[0][:300]  # a bare assert has no message
        say(f"   11. {what}: failed, {type(exc).__name__}: {first} "
            f"({where.filename.rsplit('/', 1)[-1]}:{where.lineno})")  # fmt: skip
        return None
