"""Where a model runs, and honest clocks there: a device's queued work is waited for before
every clock read (the seed timed CUDA without a sync)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import torch

T = TypeVar("T")


def model_device(model: torch.nn.Module) -> torch.device:
    try:
        return next(model.parameters()).device
    except StopIteration:  # pragma: no cover - a model without parameters
        return torch.device("cpu")


def synchronize(device: torch.device) -> None:
    """Wait for queued device work, so a clock read afterwards measures it."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":  # pragma: no cover - no MPS here
        torch.mps.synchronize()


def timed(device: torch.device, fn: Callable[[], T]) -> tuple[T, float]:
    """``fn()`` and the seconds it took, the device synchronised before and after."""
    synchronize(device)
    start = time.perf_counter()
    out = fn()
    synchronize(device)
    return out, time.perf_counter() - start


def context_length(model: torch.nn.Module) -> int | None:
    """The longest sequence the model's positions allow; None for relative positions (T5)."""
    config = model.config
    for name in ("max_position_embeddings", "n_positions", "max_context_length", "n_ctx"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def vocab_size(model: torch.nn.Module) -> int:
    """Rows of the output head, read from its shape: a quantised head (engine.quant) would
    dequantise its whole matrix to answer ``.weight`` (272 MB for Qwen2.5's, and kept)."""
    head = model.get_output_embeddings()
    rows = getattr(head, "out_features", None)
    return rows if isinstance(rows, int) else int(head.weight.shape[0])


def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags as Linux's /proc/cpuinfo lists them (avx2, avx512_vnni, ...);
    elsewhere, or unreadable, none (unknown)."""
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return frozenset()
    line = next((ln for ln in text.splitlines() if ln.startswith("flags")), "")
    return frozenset(line.partition(":")[2].split())


def switched_off(variable: str) -> bool:
    """Whether the environment variable ``variable`` turns a default-on kernel choice off:
    0, false, off or no (any case, spaces around ignored)."""
    return os.environ.get(variable, "").strip().lower() in ("0", "false", "off", "no")
