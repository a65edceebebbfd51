"""11. Quantised weights (engine.quant), side by side in one run: SmolLM2-135M in float32,
bfloat16, int8 and int4 (its GGUF file's own Q4_1 blocks), and a Qwen2.5-0.5B-shaped model
(random weights) in the same four; each row's rate, its ratio to float32, the weight bytes
read per token and their share of the machine's measured copy bandwidth, and the step's
matrix products alone beside the whole token. llama.cpp on the same GGUF: llama-cpp-python
where it is installed, else llama.cpp's own server where ``make llama-server`` built it.

Copy bandwidth is measured as STREAM's "copy" counts it: bytes read plus bytes written per
second, copying 512 MB. Decode reads its weights once per token and writes next to nothing,
so "weights per token x tokens per second" over that figure is the share of the memory
system a token uses (1.0 would be every byte the machine can move)."""

from __future__ import annotations

import functools
import gc
import time
from collections.abc import Callable
from typing import Any

import torch

from engine.decode.session import GenerationSession
from engine.drivers.bench_common import matrix_products_alone
from engine.drivers.bench_families import family_model
from engine.drivers.bench_llama_cpp import llama_cpp_in_subprocess
from engine.drivers.bench_llama_server import llama_server_rates
from engine.models.device import timed
from engine.quant import native
from engine.quant.apply import quantize_model
from engine.quant.formats import INT8, pack_int4
from engine.quant.linear import QuantLinear
from engine.records import Step
from engine.sampling.settings import SamplerSettings
from engine.step.kernels import mm

KINDS = ("float32", "bfloat16", "int8", "int4")
PROMPT = "Write a short poem about the sea."


def copy_bandwidth(mbytes: int = 512, reps: int = 6) -> float:
    """Bytes read + written per second copying ``mbytes`` MB (best of ``reps``)."""
    src = torch.ones(mbytes * 2**20 // 4)
    dst = torch.empty_like(src)
    dst.copy_(src)
    best = min(timed(src.device, lambda: dst.copy_(src))[1] for _ in range(reps))
    return 2 * src.numel() * 4 / best


def weight_bytes(model: torch.nn.Module) -> int:
    """Bytes of weights read per token: every parameter and quantised layer once, except an
    input embedding of its own (a token reads one row of it)."""
    emb = model.get_input_embeddings().weight
    out = model.get_output_embeddings()
    tied = not isinstance(out, QuantLinear) and out.weight is emb
    quant = [m for m in model.modules() if isinstance(m, QuantLinear)]
    counted = {id(m.bias) for m in quant if m.bias is not None}  # in nbytes already
    total = sum(m.nbytes() for m in quant)
    for p in model.parameters():
        if (p is emb and not tied) or id(p) in counted:
            continue
        total += p.numel() * p.element_size()
    return total


def _rate(model: torch.nn.Module, ids: list[int], n: int) -> tuple[float, float, Any]:
    """Our fast path, greedy with the top-20 per step, after a warm-up session (TorchScript
    specialises the step on the first calls with each kind of weight): (tokens per second of
    the whole session, prompt included; of its decode alone, from the first token to the
    last; the stepper). A quantised model's prompt pass is its slowest part per token: more
    than 4 rows are multiplied on float32 tiles of the dequantised weights (38 prompt tokens,
    Qwen2.5-0.5B shape, stop 44: float32 175-195 ms, int8 215-235, int4 210-215; PyTorch's
    kernels int8 256, int4 200), so the session's ratio to float32 is below the decode's."""
    settings = SamplerSettings(temperature=0, max_new_tokens=n, min_new_tokens=n)

    def session() -> GenerationSession:
        return GenerationSession(model, ids, settings, eos_token_ids=[], top_n=20, fast=True)

    list(session().stream(24))
    s = session()
    start = time.perf_counter()
    first = None
    for record in s.stream():
        if first is None and isinstance(record, Step):
            first = time.perf_counter()
    end = time.perf_counter()
    ok = n > 1 and first is not None and end > first
    decode = (n - 1) / (end - first) if ok else float("nan")  # NaN: not measurable
    return n / (end - start), decode, s.stepper


def _rows(
    models: dict[str, torch.nn.Module], ids: list[int], n: int, copy_bw: float,
    say: Callable[[str], None], title: str, rounds: int = 5,
) -> dict[str, Any]:  # fmt: skip
    """Each model's rates and its matrix products alone, alternated over ``rounds`` rounds
    (a load spike falls on all alike), best of each. Both are measured alike: a model's
    products right after its session in each round (memory bandwidth shared with other
    machines moves both), as the mean of as many passes in a row as the decode has tokens
    (the decode's rate is its tokens' mean). The bandwidth share is taken on the decode
    alone: a decode token reads every weight once, the prompt pass reads them once for all
    its tokens."""
    best: dict[str, tuple[float, float]] = dict.fromkeys(models, (0.0, 0.0))
    floors: dict[str, float | None] = dict.fromkeys(models)
    quickest: dict[str, float | None] = dict.fromkeys(models)  # the best single pass
    for _ in range(rounds):
        for kind, model in models.items():
            whole, decode, stepper = _rate(model, ids, n)
            best[kind] = (max(best[kind][0], whole), max(best[kind][1], decode))  # NaN: 0
            floor = matrix_products_alone(stepper, rounds=1, passes=max(1, n - 1))
            one = matrix_products_alone(stepper, rounds=3)
            if floor is not None and one is not None:
                floors[kind] = min(floors[kind] or floor, floor)
                quickest[kind] = min(quickest[kind] or one, one)
    base = tuple(v or float("nan") for v in best.get("float32", (0.0, 0.0)))
    out: dict[str, Any] = {}
    nan = float("nan")
    for kind, model in models.items():
        (whole, decode), need, floor = best[kind], weight_bytes(model), floors[kind]
        decode = decode or nan  # a rate that could not be measured prints "nan", not a crash
        share = decode * need / copy_bw
        one = quickest[kind]
        products = "     ?" if floor is None or one is None else (
            f"{floor * 1e3:6.1f} ms (best single pass {one * 1e3:.1f} ms); the token "
            f"{1 / (decode * floor):.3f}x its products")  # fmt: skip
        say(f"   {title} {kind:<8} {whole:6.1f} tok/s {whole / base[0]:5.2f}x fp32 | decode alone "
            f"{decode:6.1f} tok/s {decode / base[1]:5.2f}x | weights/token {need / 1e6:6.1f} MB "
            f"{decode * need / 1e9:5.1f} GB/s = {share:.2f} of copy | decode token "
            f"{1e3 / decode:6.1f} ms, matrix products alone {products}")  # fmt: skip
        out[kind] = dict(tok_s=whole, vs_fp32=whole / base[0], decode_tok_s=decode,
                         decode_vs_fp32=decode / base[1], weight_mb=need / 1e6,
                         copy_share=share, token_ms=1e3 / decode,
                         matmul_ms=None if floor is None else floor * 1e3,
                         token_vs_matmul=None if floor is None else 1 / (decode * floor),
                         matmul_best_pass_ms=None if one is None else one * 1e3)  # fmt: skip
    return out


def _pytorchs(m: QuantLinear) -> tuple[torch.Tensor, torch.Tensor]:
    """A quantised matrix's integers and scales in PyTorch's kernels' layout, whatever kernel
    runs it in the model."""
    q, s = m.stored()
    if m.kind == INT8 or not m.on_native:
        return q, s
    return pack_int4(native.unpack4(q)), native.unscales4(s)


def _best(runs: list[Callable[[], Any]], rounds: int) -> list[float]:
    best = [float("inf")] * len(runs)
    with torch.inference_mode():
        for _ in range(rounds):
            for i, fn in enumerate(runs):
                best[i] = min(best[i], timed(torch.device("cpu"), fn)[1])
    return best


def products_both_ways(model: torch.nn.Module, rounds: int = 5) -> dict[str, Any] | None:
    """Seconds of one token's int8 / int4 products alone, on the kernels the model runs (the
    lab's, ``engine.quant.native``, or oneDNN's for the head) and on PyTorch's (the same
    integers in its layout), alternated, best of ``rounds``: ``layers`` (every quantised
    matrix but the head) and ``head`` as (the model's, PyTorch's), with ``head_kernel`` naming
    the model's. None for a model that is not quantised."""
    quantised = [m for m in model.modules() if isinstance(m, QuantLinear)]
    if not quantised:
        return None
    head = model.get_output_embeddings()
    out: dict[str, Any] = {}
    for name, mods in (("layers", [m for m in quantised if m is not head]),
                       ("head", [head] if head in quantised else [])):  # fmt: skip
        if not mods:
            continue
        xs = [torch.randn(1, m.in_features).to(torch.bfloat16) for m in mods]
        theirs = [_pytorchs(m) for m in mods]
        ours_run = functools.partial(_each, xs, [(m.qweight, m.scales) for m in mods])
        out[name] = tuple(_best([ours_run, functools.partial(_each, xs, theirs)], rounds))
    if head in quantised:
        out["head_kernel"] = ("the lab's" if head.on_native else
                              "oneDNN's" if head.on_onednn else "PyTorch's")  # fmt: skip
    return out


def _each(xs: list[torch.Tensor], weights: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
    for x, (w, s) in zip(xs, weights, strict=True):
        mm(x, w, s, False)


def _say_heads(models: dict[str, torch.nn.Module], say: Callable[[str], None], title: str) -> None:
    for kind, model in models.items():
        got = products_both_ways(model)
        if got is None:
            continue
        parts = []
        for name in ("layers", "head"):
            if name in got:
                ours, theirs = got[name][0] * 1e3, got[name][1] * 1e3
                whose = got["head_kernel"] if name == "head" else "the model's"
                parts.append(f"{name} {whose} {ours:.2f} ms vs PyTorch's {theirs:.2f} ms "
                             f"({theirs / ours:.2f}x)")  # fmt: skip
        say(f"   {title} {kind} products alone, one token: " + "; ".join(parts))


def _smollm2(kind: str) -> Any:
    from engine.models.catalog import open_model

    return open_model("smollm2-135m", device="cpu", dtype=kind, progress=lambda _m: None)


def _llama_rows(
    gguf: str, ids: list[int], n: int, int4: dict[str, Any], say: Callable[[str], None]
) -> dict[str, Any]:
    """llama.cpp on the same file, both ways it can be run here (each where it is there):
    llama-cpp-python, and llama.cpp's own server. Their top-20 costs differ by far (the
    binding computes every position's logits, ``logits_all``; the server its top-20 alone),
    so the two are printed side by side rather than one standing for llama.cpp."""
    found: dict[str, Any] = {}
    python = llama_cpp_in_subprocess(gguf, ids, n, say)
    server = llama_server_rates(gguf, ids, n, say)
    for who, llama in (("llama-cpp-python", python), ("llama-server", server)):
        if llama is None:
            continue
        for key, label in (("plain", "no probabilities"), ("logprobs20", "top-20 probs")):
            decode = llama.get(f"{key}_decode")  # the server's own figure; the binding has none
            extra = (
                ""
                if decode is None
                else (f" ({llama[f'{key}_threads']:.0f} thread(s); decode alone {decode:.1f})")
            )
            say(f"   {who} on the same Q4_1 file, {label}: {llama[key]:.1f} tok/s{extra}; "
                f"our int4 {int4['tok_s'] / llama[key]:.2f}x of it")  # fmt: skip
            if decode is not None:
                mine = int4["decode_tok_s"]
                say(f"      decode alone: our int4 {mine:.1f} tok/s, "
                    f"{mine / decode:.2f}x of llama.cpp's")  # fmt: skip
        found["llama_cpp" if who == "llama-cpp-python" else "llama_server"] = llama
    return found


def quant_section(say: Callable[[str], None], new_tokens: int = 64) -> dict[str, Any]:
    """11. The rows above, SmolLM2 first, then the Qwen2.5-0.5B shape."""
    copy_bw = copy_bandwidth()
    say(f"11. quantised weights: copy bandwidth {copy_bw / 1e9:.1f} GB/s (read + write), "
        f"{new_tokens} new tokens, greedy, top-20 per step")  # fmt: skip
    bundles = {kind: _smollm2(kind) for kind in KINDS}
    say(f"   SmolLM2 int4: {bundles['int4'].extra.get('quant_summary')}")
    ids = bundles["float32"].encode_prompt(PROMPT)
    out: dict[str, Any] = {"copy_gbs": copy_bw / 1e9}
    out["smollm2"] = _rows({k: b.model for k, b in bundles.items()}, ids, new_tokens,
                           copy_bw, say, "SmolLM2-135M")  # fmt: skip
    _say_heads({k: b.model for k, b in bundles.items()}, say, "SmolLM2-135M")
    gguf = bundles["float32"].extra.get("gguf")
    if gguf:
        out |= _llama_rows(gguf, ids, new_tokens, out["smollm2"]["int4"], say)
    del bundles
    gc.collect()
    qwen: dict[str, torch.nn.Module] = {}
    for kind in KINDS:
        model = family_model(
            "Qwen2.5-0.5B", torch.bfloat16 if kind == "bfloat16" else torch.float32
        )
        if kind in ("int8", "int4"):
            quantize_model(model, kind)
        qwen[kind] = model
    qwen_ids = [(7 * i + 3) % 1000 + 100 for i in range(len(ids))]
    out["qwen2.5-0.5b"] = _rows(qwen, qwen_ids, max(16, new_tokens // 2), copy_bw, say,
                                "Qwen2.5-0.5B shape")  # fmt: skip
    _say_heads(qwen, say, "Qwen2.5-0.5B shape")
    return out
