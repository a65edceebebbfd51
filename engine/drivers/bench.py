"""Engine benchmarks, measured side by side in one process: ours vs transformers.generate,
n-gram speculative vs plain, and the memory-bandwidth limit. Prints ratios with both absolute
numbers. The device is synchronised before every clock read.

The parts by module: this one the bundled SmolLM2-135M (1, 4, 5); ``bench_families`` the
families and T5 at real shapes, the static step on CPU and the GPU (7-10); ``bench_llama_cpp``
llama-cpp-python; ``bench_common`` the header, ratio lines and alternated runs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from engine.decode.pipeline import PipelinedSession
from engine.decode.session import GenerationSession
from engine.decode.speculative import NGramDrafter, SpeculativeSession
from engine.drivers.bench_common import (  # noqa: F401 - the bench's names, as before the split
    alternate,
    cpu_info,
    header,
    line,
    matrix_products_alone,
)
from engine.drivers.bench_experiments import experiments_section
from engine.drivers.bench_families import (  # noqa: F401 - as above
    FAMILY_CONFIGS,
    family_section,
    gpu_section,
    side_by_side,
    static_cpu_section,
    t5_section,
)
from engine.drivers.bench_llama_cpp import llama_cpp_in_subprocess, llama_cpp_section  # noqa: F401
from engine.drivers.compare import ready
from engine.models.device import timed
from engine.models.loading import ModelBundle
from engine.sampling.settings import SamplerSettings
from engine.step.forward import linear

GROUNDED_PROMPT = (
    "Repeat the following paragraph exactly, word for word: The lighthouse keeper climbed the "
    "narrow stairs every evening at dusk. He polished the great lens, trimmed the wick, and "
    "watched the ships pass safely beyond the rocks. In the morning he wrote the weather in a "
    "small leather book and went to sleep while the gulls circled the tower."
)


def hf_generate_rate(bundle: ModelBundle, ids: list[int], n: int) -> tuple[float, list[int]]:
    model = bundle.model
    x = torch.tensor([ids], device=bundle.device)
    model.generate(x, max_new_tokens=4, min_new_tokens=4, do_sample=False)  # warm-up
    out, secs = timed(
        bundle.device,
        lambda: model.generate(x, max_new_tokens=n, min_new_tokens=n, do_sample=False),
    )
    generated = out[0, len(ids) :].tolist()
    return len(generated) / secs, generated


def ours_rate(
    bundle: ModelBundle, ids: list[int], n: int, fast: bool, top_n: int = 20
) -> tuple[float, GenerationSession]:
    settings = SamplerSettings(temperature=0, max_new_tokens=n, min_new_tokens=n)

    def make() -> GenerationSession:  # the window's session: pipelined where that pays
        # n tokens by the end ids' absence, not by min-new-tokens holding them back (a stage
        # the device path does not run: the session would take today's step on CUDA); on
        # CUDA the whole-token graph is captured at the run's first token, inside the clock,
        # as in the window
        return PipelinedSession.over(
            bundle, ids, settings, top_n=top_n, fast=fast, eos_token_ids=()
        )

    list(make().stream(4))  # warm-up
    session = ready(make(), n)  # on CUDA: this session's own capture, before the clock
    _, secs = timed(bundle.device, lambda: list(session.stream()))
    return n / secs, session


def top20_drift(
    reference: GenerationSession, bundle: ModelBundle, ids: list[int], fast: bool
) -> float:
    """Max |p - p_ref| over the top-20 candidates of every step, following the reference's
    tokens so that both runs see the same text."""
    tokens = reference.generated_ids
    settings = SamplerSettings(temperature=0, max_new_tokens=len(tokens))
    session = GenerationSession.over(bundle, ids, settings, eos_token_ids=(), top_n=20, fast=fast)
    worst = 0.0
    for ref_step, token in zip(reference.history, tokens, strict=True):
        session.force_next(token)
        step = session.step()
        probs = {c.token_id: c.raw_prob for c in step.candidates}
        for c in ref_step.candidates:
            worst = max(worst, abs(c.raw_prob - probs.get(c.token_id, 0.0)))
    return worst


def matvec_bandwidth(device: torch.device, dtype: torch.dtype, mbytes: int = 512) -> float:
    """Bytes per second reading a large matrix once per matrix-vector product: the best of
    ``w @ x`` and, on CPU, oneDNN on the matrix in its reordered layout (what decode uses)."""
    cols = 4096
    rows = mbytes * 2**20 // (cols * torch.tensor([], dtype=dtype).element_size())
    w = torch.randn(rows, cols, device=device).to(dtype)
    x = torch.randn(1, cols, device=device).to(dtype)
    kernels: list[Callable[[], Any]] = [lambda: x @ w.T]
    if device.type == "cpu" and torch.backends.mkldnn.is_available():
        try:
            packed = torch.ops.mkldnn._reorder_linear_weight(w, 1)
            kernels.append(lambda: linear(x, packed, True))
        except (RuntimeError, AttributeError, NotImplementedError):
            pass
    best, reps = 0.0, 8
    for kernel in kernels:
        for _ in range(2):
            kernel()
        _, secs = timed(device, lambda k=kernel: [k() for _ in range(reps)])
        best = max(best, reps * w.numel() * w.element_size() / secs)
    return best


def weight_bytes(model: torch.nn.Module) -> int:
    """Bytes read per token: every weight once (an untied input embedding only a row)."""
    seen: set[int] = set()
    total = 0
    emb = model.get_input_embeddings().weight
    out = model.get_output_embeddings().weight
    for p in model.parameters():
        if id(p) in seen:
            continue
        seen.add(id(p))
        if p is emb and emb is not out:
            continue
        total += p.numel() * p.element_size()
    return total


def dtype_section(
    bundle: ModelBundle,
    ids: list[int],
    dtype: torch.dtype,
    new_tokens: int,
    say: Callable[[str], None],
    reference: GenerationSession | None,
) -> tuple[dict[str, Any], GenerationSession]:
    """1 and 5 in one dtype: ours vs transformers.generate, and the bandwidth decode uses."""
    model = bundle.model
    model.to(dtype)
    name = str(dtype).removeprefix("torch.")
    kept: dict[str, Any] = {}

    def run(kind: str) -> float:
        if kind == "hf":
            rate, kept["hf"] = hf_generate_rate(bundle, ids, new_tokens)
        else:
            rate, kept[kind] = ours_rate(bundle, ids, new_tokens, fast=kind == "fast")
        return rate

    # alternated (A B C A B C): a load spike from another process falls on all three alike
    best = alternate({k: (lambda k=k: run(k)) for k in ("hf", "fast", "plain")})
    hf, fast, plain = best["hf"], best["fast"], best["plain"]
    fast_session = kept["fast"]
    same = fast_session.generated_ids == kept["hf"]
    say(
        line(
            f"1. engine streaming (top-20) vs HF generate, {name}", fast, hf, "tok/s", "ours", "HF"
        )
    )
    say(
        line(f"   engine on model.forward vs HF generate, {name}", plain, hf, "tok/s", "ours", "HF")
    )
    say(f"   greedy output identical to HF generate: {'yes' if same else 'NO'}")
    out: dict[str, Any] = {"ours_fast": fast, "ours_forward": plain, "hf": hf, "identical": same}
    if reference is not None:
        drift = top20_drift(reference, bundle, ids, fast=True)
        say(f"   top-20 probabilities vs float32, max |difference| over {new_tokens} steps: "
            f"{drift:.4f}")  # fmt: skip
        out["top20_drift_vs_fp32"] = drift
    bw = matvec_bandwidth(bundle.device, dtype)
    need = weight_bytes(model)
    say(line(f"5. bandwidth used by decode, {name}", fast * need / 1e9, bw / 1e9, "GB/s",
             "decode", "matvec"))  # fmt: skip
    say(f"   weights read per token {need / 1e6:.0f} MB; bandwidth limit {bw / need:.1f} tok/s")
    out.update(bandwidth_gbs=bw / 1e9, weight_mb=need / 1e6, limit_tok_s=bw / need)
    floor = matrix_products_alone(fast_session.stepper)
    if floor is not None:
        # what the kernels at this model's own shapes allow: the rest of a token is ours
        say(f"   the step's matrix products alone: {floor * 1e3:.1f} ms/token "
            f"({need / floor / 1e9:.1f} GB/s, {need / floor / bw:.2f} of matvec); a whole "
            f"token {1e3 / fast:.1f} ms; nothing but them: {1 / floor / hf:.2f}x HF")  # fmt: skip
        out.update(matmul_ms=floor * 1e3, matmul_gbs=need / floor / 1e9)
    return out, fast_session


def ngram_section(bundle: ModelBundle, say: Callable[[str], None], n: int = 96) -> dict[str, Any]:
    """4. n-gram speculative vs plain greedy on an input-grounded prompt (same decode path)."""
    ids = bundle.encode_prompt(GROUNDED_PROMPT)
    model, eos = bundle.model, bundle.eos_token_ids
    greedy = SamplerSettings(temperature=0, max_new_tokens=n)
    spec = SpeculativeSession(
        model, ids, NGramDrafter(), greedy, eos_token_ids=eos, gamma=5, top_n=1, fast=True
    )
    plain = GenerationSession(model, ids, greedy, top_n=1, eos_token_ids=eos, fast=True)
    ready(spec, n)  # on CUDA: each session's own capture, before the clocks
    ready(plain, n)
    _, plain_secs = timed(bundle.device, lambda: list(plain.stream()))
    out, spec_secs = timed(bundle.device, lambda: spec.run(n))
    plain_tps = len(plain.generated_ids) / plain_secs
    spec_tps = len(out) / spec_secs
    same = out == plain.generated_ids
    say(
        line("4. n-gram speculative vs plain greedy", spec_tps, plain_tps, "tok/s", "spec", "plain")
    )
    say(f"   identical output: {'yes' if same else 'NO'}; acceptance "
        f"{spec.stats.acceptance_rate:.0%}, {spec.stats.target_passes} target passes for "
        f"{len(out)} tokens")  # fmt: skip
    return {"spec": spec_tps, "plain": plain_tps, "identical": same}


def run_engine_bench(
    bundle: ModelBundle, say: Callable[[str], None], new_tokens: int = 128
) -> dict[str, Any]:
    results: dict[str, Any] = {}
    ids = bundle.encode_prompt("Write a short poem about the sea.")
    reference: GenerationSession | None = None
    for dtype in (torch.float32, torch.bfloat16):
        name = str(dtype).removeprefix("torch.")
        results[name], session = dtype_section(bundle, ids, dtype, new_tokens, say, reference)
        reference = reference or session
    bundle.model.to(torch.float32)
    llama = llama_cpp_section(bundle, results["bfloat16"]["ours_fast"], new_tokens, say)
    if llama is not None:
        results["llama_cpp"] = llama
    results["ngram"] = ngram_section(bundle, say)
    results["experiments"] = experiments_section(bundle, say)
    return results


def run_gpu_bench(say: Callable[[str], None]) -> None:
    """The GPU part: the captured step at SmolLM2-135M's shape and the families, the
    pipelined session (section 11), then the engine bench on the real SmolLM2-135M where it
    is installed."""
    if gpu_section(say) is None:
        return
    from engine.drivers.bench_pipeline import gpu_pipeline_section
    from engine.models.catalog import open_model

    gpu_pipeline_section(say)

    try:
        bundle = open_model("smollm2-135m", device="cuda", dtype="bfloat16")
    except Exception as exc:  # noqa: BLE001 - the model may be absent on a bare GPU machine
        say(f"   SmolLM2-135M itself: not available ({exc}), skipped")
        return
    run_engine_bench(bundle, lambda m: say("   " + m))
