"""Where a GPU token's time goes (bench section 7): one session token under torch's profiler
(kernels launched, the GPU's busy share of the wall time) beside the captured step alone
with a greedy pick, so the line says whether the step or the session's own work binds."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

from engine.decode.session import GenerationSession
from engine.drivers.compare import ready
from engine.models.device import model_device, timed
from engine.sampling.settings import SamplerSettings


@dataclass(frozen=True)
class TokenProfile:
    wall_ms: float  # one session token (top-20, both entropies, the chain), wall clock
    kernels: float  # GPU kernels launched per token
    gpu_busy: float  # the kernels' summed time / the wall time
    host_ms: float  # wall time the GPU was idle per token (host work, syncs, launches)
    step_ms: float  # the captured step alone plus a greedy pick, per token

    def describe(self) -> str:
        bound = "the session's host work" if self.gpu_busy < 0.5 else "the GPU's kernels"
        return (
            f"one token {self.wall_ms:.2f} ms: {self.kernels:.0f} kernels, GPU busy "
            f"{100 * self.gpu_busy:.0f}%, idle {self.host_ms:.2f} ms; the captured step alone "
            f"{self.step_ms:.2f} ms/token; bound by {bound}"
        )


def token_profile(
    model: torch.nn.Module,
    ids: list[int],
    n: int = 16,
    session_cls: type[GenerationSession] = GenerationSession,
    **options: Any,
) -> TokenProfile:
    """Profile ``n`` greedy session tokens (after the capture and a warm-up), then time the
    session's own stepper for ``n`` tokens with nothing but an argmax between them.
    ``session_cls``: today's session, or ``engine.decode.pipeline.PipelinedSession`` (with
    ``pipeline=True`` in ``options`` where it is not on by default)."""
    device = model_device(model)
    settings = SamplerSettings(temperature=0, max_new_tokens=3 * n + 8, min_new_tokens=3 * n + 8)
    session = session_cls(model, ids, settings, eos_token_ids=[], top_n=20, fast=True, **options)
    ready(session, 3 * n + 8)
    stream = session.stream()
    for _ in range(4):  # warm: the first tokens pay the allocator and the caches
        next(stream)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        _, wall = timed(device, lambda: [next(stream) for _ in range(n)])
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    busy_s = sum(e.device_time for e in kernels) / 1e6  # device_time: microseconds
    seq = list(ids) + session.generated_ids
    stepper = session.stepper

    def greedy() -> None:
        for _ in range(n):
            seq.append(int(stepper.logits(seq)[-1].argmax()))

    _, step_total = timed(device, greedy)
    return TokenProfile(
        wall_ms=1e3 * wall / n,
        kernels=len(kernels) / n,
        gpu_busy=min(1.0, busy_s / wall),
        host_ms=1e3 * max(0.0, wall - busy_s) / n,
        step_ms=1e3 * step_total / n,
    )
