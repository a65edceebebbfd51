"""The bench's shared pieces: the CPU named in the header, one printed ratio line, alternated
runs, and the fast path's matrix products timed alone (the floor under a token)."""

from __future__ import annotations

import os
import platform
from collections.abc import Callable
from typing import Any

import torch

from engine.models.device import timed
from engine.step.fast_spec import Spec
from engine.step.kernels import mm


def line(
    label: str, ours: float, theirs: float, unit: str, ours_name: str, theirs_name: str
) -> str:
    ratio = ours / theirs if theirs else float("nan")
    a, b = f"{ours_name} {ours:8.1f} {unit}", f"{theirs_name} {theirs:8.1f} {unit}"
    return f"{label:<44} {ratio:6.2f}x   {a}  vs  {b}"


def alternate(runs: dict[str, Callable[[], float]], rounds: int = 2) -> dict[str, float]:
    """Best rate of each run over ``rounds``, interleaved (A B A B) so that the load other
    processes put on a shared CPU falls on both alike."""
    best: dict[str, float] = dict.fromkeys(runs, 0.0)
    for _ in range(rounds):
        for name, run in runs.items():
            best[name] = max(best[name], run())
    return best


CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16")


def cpu_info() -> tuple[str, list[str]]:
    """The CPU's model name and the flags that decide the kernels (AVX2 / AVX-512 / AMX),
    from /proc/cpuinfo; the platform's processor string elsewhere."""
    name, flags = platform.processor() or platform.machine(), set()
    try:
        with open("/proc/cpuinfo") as f:
            for row in f:
                key, _, value = row.partition(":")
                if key.strip() == "model name" and name in ("", platform.machine()):
                    name = value.strip()
                elif key.strip() == "flags":
                    flags = set(value.split())
                    break
    except OSError:
        pass
    return name, [flag for flag in CPU_FLAGS if flag in flags]


def header(threads: int | None = None) -> str:
    name, flags = cpu_info()
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "?"
    return (
        f"Decoding Lab benchmark: CPU {name} [{' '.join(flags) or 'no avx2'}], "
        f"{threads or torch.get_num_threads()} threads, torch {torch.__version__}, "
        f"load average {load}"
    )


def _width(w: torch.Tensor, s: torch.Tensor) -> int:
    """The input width K of a step's matrix as the model holds it (before oneDNN's packing):
    float or int8 [N, K], int4 packed two to a byte [N, K / 2], int8 packed for oneDNN [K, N],
    or the lab's own layouts (``engine.quant.native``): int8 [N, K / 32, 32], int4 [N, K / 64,
    32] bytes."""
    if w.is_mkldnn:
        return w.shape[0]
    k = w.shape[1] * w.shape[2] if w.dim() == 3 else w.shape[-1]
    return k * 2 if s.numel() and w.dtype == torch.uint8 else k


def matrix_products_alone(stepper: Any, rounds: int = 3, passes: int = 1) -> float | None:
    """Seconds per token of a fast-path stepper's matrix products alone (every layer's fused
    q/k/v, output, up and down products and the head, with the stepper's own weights and
    kernel): the mean of ``passes`` passes in a row, best of ``rounds``; the floor under a
    token on this machine, whatever else the step does. Set beside a run's token rate (a
    mean over its tokens), ``passes`` as many as the run's tokens measures both alike: the
    best of single passes catches the machine's quietest moments, which a run's mean does
    not. None for a stepper without the fast path's weights."""
    layers, head = getattr(stepper, "layers", None), getattr(stepper, "lm_head", None)
    spec = getattr(stepper, "spec", None)
    if layers is None or head is None or spec is None:
        return None
    weights = [layer[s] for layer in layers for s in Spec.MATRIX_SLOTS] + [head]
    plain = [layer[s] for layer in spec.layers for s in Spec.MATRIX_SLOTS] + [spec.lm_head]
    scales = [layer[s] for layer in spec.layers for s in Spec.SCALE_SLOTS] + [spec.lm_head_s]
    inputs = [torch.randn(1, _width(w, s), device=stepper.device).to(stepper.dtype)
              for w, s in zip(plain, scales, strict=True)]  # fmt: skip
    onednn = bool(getattr(stepper, "onednn", False))

    def once() -> None:
        with torch.inference_mode():
            for x, w, s in zip(inputs, weights, scales, strict=True):
                mm(x, w, s, onednn)

    def run() -> None:
        for _ in range(passes):
            once()

    once()
    return min(timed(stepper.device, run)[1] for _ in range(rounds)) / passes
