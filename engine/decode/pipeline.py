"""Sampling with the host one token behind: ``PipelinedSession``.

Today's step (``GenerationSession.step``) runs the forward pass, the chain, the pick and the
measurements, then copies the numbers to the host and waits for them before the next token
starts: on a GPU the device idles while the host builds the record. Here token t+1 is launched
(its forward pass fed with token t straight from the device, the chain, the pick and the
numbers, ``engine.decode.device_stats``) before token t's numbers are read back and turned into
a ``Step``. Each launched token has its own row buffer (on CUDA a pinned host copy made without
blocking, and an event that says when it has landed).

What the host does between tokens still lands exactly: new settings, a forced token, a branch,
an undo, a rewind or Stop discard the token launched ahead (the KV cache is cropped back to
what today's path holds) and the next launch starts from the host's ids, with the new choice.
Greedy and seeded runs give the same records as ``GenerationSession``, record for record
(``tests/engine/test_pipeline_session.py``). Chains the device path cannot run
(``device_stats.fallback_reason``) take today's step, with the reason shown once per run.

On CUDA with a captured static step, the forward pass, the chain, the pick and the numbers
replay from one graph (``engine.decode.token_graph``); the token reaches the next replay by a
device-to-device copy, never read by the host on the way.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from engine.decode.base import Record
from engine.decode.device_stats import FusedPlan, plan_for, token_stats, window_seen
from engine.decode.measure import finite_rows, unpack_row
from engine.decode.session import GenerationSession, StepLogits, step_seed
from engine.decode.token_graph import PENDING, TokenGraph, feed_device, graph_stepper
from engine.models.device import switched_off
from engine.records import Progress, Rewind, Step
from engine.sampling.sampler import NO_REPORT
from engine.sampling.settings import SamplerSettings
from engine.step.kvcache import common_prefix
from engine.step.stepper import catch_up, to_feed

# Where the pipeline is on unless a session says otherwise. CPU: off, measured (bench section
# 11, resources/notes/pipeline-cpu.md): a CPU runs each op as it is issued, so launching ahead
# overlaps nothing and only adds the discarded tokens' work. CUDA: on, measured on an H100
# (resources/notes/pipeline-gpu.md: tests/engine/test_token_graph_cuda.py passed there, and the
# SmolLM2 shape in bf16 with top-20 ran 742.6 tok/s against today's 432.1);
# DECODING_LAB_PIPELINE=0 (or false, off, no) turns it off there.
ON_BY_DEFAULT = {"cuda": not switched_off("DECODING_LAB_PIPELINE"), "cpu": False}


class RowBuffer:
    """One launched token's packed row: written on the device, copied to the host without
    blocking (CUDA: pinned memory and an event), read once the event says it has landed."""

    def __init__(self, width: int, device: torch.device) -> None:
        self.out = torch.empty(width, dtype=torch.float64, device=device)
        cuda = device.type == "cuda"
        self.host = torch.empty(width, dtype=torch.float64, pin_memory=True) if cuda else self.out
        self.event = torch.cuda.Event() if cuda else None

    def send(self) -> None:
        """Queue the copy to the host behind the kernels that write ``out``."""
        if self.event is not None:
            self.host.copy_(self.out, non_blocking=True)
            self.event.record()

    def read(self) -> list[float]:
        if self.event is not None:
            self.event.synchronize()
        return self.host.tolist()


class DeviceIds:
    """The run's ids on the device, for the repetition penalty's window: a buffer that grows,
    with a host mirror of what it holds (``PENDING`` where a token was written on the device)."""

    def __init__(self, device: torch.device) -> None:
        self.buf = torch.zeros(256, dtype=torch.long, device=device)
        self.mirror: list[int] = []

    def _ensure(self, size: int) -> None:
        have = self.buf.shape[0]
        if size > have:
            grown = torch.zeros(max(size, 2 * have), dtype=torch.long, device=self.buf.device)
            grown[:have] = self.buf
            self.buf = grown

    def sync(self, ids: list[int]) -> None:
        """Hold exactly ``ids`` (only the part that differs is copied)."""
        keep = common_prefix(self.mirror, ids)
        self._ensure(len(ids) + 1)
        if keep < len(ids):
            new = torch.tensor(ids[keep:], dtype=torch.long)
            if self.buf.is_cuda:  # pinned: the copy does not wait for the stream
                new = new.pin_memory()
            self.buf[keep : len(ids)].copy_(new, non_blocking=True)
        self.mirror = list(ids)

    def push(self, token: torch.Tensor, position: int) -> None:
        """token: [1] long on the device, written at ``position`` without reading it."""
        self._ensure(position + 2)
        self.buf[position : position + 1].copy_(token)
        del self.mirror[position:]
        self.mirror.append(PENDING)


@dataclass
class Slot:
    """A token launched and not yet read back."""

    index: int  # the history index it will take
    position: int  # where it goes in the ids
    token: torch.Tensor  # [1] long on the device
    row: RowBuffer
    top_n: int  # top-N columns in the row
    penalties: bool  # the row carries the penalty blocks
    fed: int  # positions its forward pass read
    how: str  # "greedy", "sample" or "forced"
    plan: FusedPlan  # the chain it ran
    started: float  # perf_counter at its launch (its clock starts then, or at the last record)


class PipelinedSession(GenerationSession):
    """``GenerationSession`` with the host one token behind on the chains the device path runs
    (``pipeline``: None takes ``ON_BY_DEFAULT`` for the session's device)."""

    def __init__(self, *args: Any, pipeline: bool | None = None, **kwargs: Any) -> None:
        self._ahead: Slot | None = None
        super().__init__(*args, **kwargs)
        on = ON_BY_DEFAULT.get(self.device.type, False) if pipeline is None else pipeline
        self.pipeline = bool(on)
        self._plans: tuple[Any, FusedPlan | str] | None = None
        self._ids_dev = DeviceIds(self.device)
        self._rows: list[RowBuffer] = []
        self._turn = 0
        self._free_from = 0.0  # when the host last finished a record (a slot's clock starts)
        self.launched_ahead = 0  # tokens launched before the previous one was read
        self.discarded = 0  # of those, thrown away (a choice between tokens, Stop, EOS)
        self._graph: Any = None  # engine.decode.token_graph.TokenGraph, on CUDA

    # -- what runs -----------------------------------------------------------------------------

    def plan(self) -> FusedPlan | str:
        """The device path's plan for the current chain, or why the chain takes today's."""
        if self._plans is None or self._plans[0] is not self.sampler:
            self._plans = (self.sampler, plan_for(self.sampler, self.top_n))
        return self._plans[1]

    @property
    def fallback(self) -> str | None:
        """Why this session's tokens take today's step (None: they take the device path)."""
        if not self.pipeline:
            return "the pipeline is off for this session"
        plan = self.plan()
        return plan if isinstance(plan, str) else None

    # -- choices between tokens: the token launched ahead is dropped ---------------------------

    @property
    def settings(self) -> SamplerSettings | None:
        return self._settings

    @settings.setter
    def settings(self, value: SamplerSettings) -> None:
        self._discard()
        GenerationSession.settings.fset(self, value)  # type: ignore[attr-defined]

    def force_next(self, token_id: int) -> None:
        self._discard()
        super().force_next(token_id)

    def rewind(self, step_index: int) -> Rewind:
        self._discard()
        return super().rewind(step_index)

    def step(self) -> Step:
        self._discard()
        return super().step()

    def _discard(self) -> None:
        """Forget the token launched ahead: the cache goes back to all ids but the last (what
        today's path holds between tokens); its row is never read."""
        if getattr(self, "_ahead", None) is None:
            return
        self._ahead = None
        self.discarded += 1
        self.stepper.truncate(len(self.ids) - 1)

    # -- the loop ------------------------------------------------------------------------------

    def stream(self, max_new_tokens: int | None = None) -> Iterator[Record]:
        try:
            reason = self.fallback
            if self.pipeline and reason is not None and not self.finished:
                yield Progress(f"Decoding on the host path: {reason}")
            yield from super().stream(max_new_tokens)
        finally:  # Stop, or the budget spent: nothing stays launched
            self._discard()

    def _advance(self, room: int) -> Iterator[Record]:
        plan = self.plan() if self.pipeline else "off"
        if isinstance(plan, str):
            self._discard()
            yield from super()._advance(room)
            return
        if self._ahead is None:
            total = to_feed(self.stepper, self.ids)
            yield from self.clock.read(catch_up(self.stepper, self.ids), total)
            slot = self._launch(plan, None)
        else:
            slot, self._ahead = self._ahead, None
            if slot.plan is not plan:  # the chain was swapped without the settings setter
                self._ahead = slot
                self._discard()
                slot = self._launch(plan, None)
        if room > 1 and (self.max_context is None or len(self.ids) + 1 < self.max_context):
            self._ahead = self._launch(plan, slot)
            self.launched_ahead += 1
        step = self._collect(slot)
        if self.finished:
            self._discard()
        yield step

    # -- one token on the device ----------------------------------------------------------------

    @torch.inference_mode()
    def _launch(self, plan: FusedPlan, prev: Slot | None) -> Slot:
        """Launch the token after the host's ids (``prev`` None) or after ``prev``, whose token
        is still only on the device; nothing here waits for the device."""
        started = time.perf_counter()
        forced = None
        if prev is None:
            forced, self._forced = self._forced, None
        index = len(self.history) if prev is None else prev.index + 1
        position = self.prompt_length + index  # where the token goes in the ids
        seed = step_seed(self.seed, index)
        self._generator.manual_seed(seed)
        launched = self._launch_graph(plan, prev, forced, seed)
        if launched is None:
            launched = self._launch_eager(plan, prev, forced, position)
        token, row, fed, vocab = launched
        row.send()
        how = "forced" if forced is not None else "greedy" if plan.greedy else "sample"
        n = min(plan.top_n, vocab)
        return Slot(index, position, token, row, n, plan.penalties, fed, how, plan, started)

    def _launch_eager(
        self, plan: FusedPlan, prev: Slot | None, forced: int | None, position: int
    ) -> tuple[torch.Tensor, RowBuffer, int, int]:
        """The forward pass as the stepper runs it, then ``token_stats`` as its own kernels."""
        source = self._logits() if prev is None else self._logits_after(prev)
        vocab = source.logits.shape[-1]
        seen = None
        if plan.penalties:
            if prev is None:
                self._ids_dev.sync(self.ids)
            else:
                self._ids_dev.push(prev.token, prev.position)
            seen = window_seen(self._ids_dev.buf, position, plan.last_n or 0, vocab)
        row = self._row(plan.width(vocab))
        pin = torch.tensor([forced], device=self.device) if forced is not None else None
        token = token_stats(plan, source.logits, source.finite, seen, self._generator, pin, row.out)
        return token, row, source.fed, vocab

    def _launch_graph(
        self, plan: FusedPlan, prev: Slot | None, forced: int | None, seed: int
    ) -> tuple[torch.Tensor, RowBuffer, int, int] | None:
        """The whole token replayed from one graph (CUDA, ``token_graph.TokenGraph``); None
        where there is none or it cannot take this token (a cache to fill or grow first)."""
        if self._graph is None:
            stepper = graph_stepper(self.stepper)
            if stepper is None:
                return None
            self._graph = TokenGraph(stepper, self._generator)
        graph, cache = self._graph, self.stepper.cache
        if prev is None:
            cache.crop(cache.reusable(self.ids, 1))
            fed, position = self.ids[-1], len(self.ids) - 1
        else:
            fed, position = prev.token, prev.position
        if not graph.fits(position):
            return None
        got = graph.launch(plan, fed, position, list(self.ids), forced, seed)
        if got is None:
            return None
        token, out = got
        row = self._row(plan.width(graph.vocab))
        row.out.copy_(out)
        return token, row, 1, graph.vocab

    def _logits_after(self, prev: Slot) -> StepLogits:
        """The logits after ``prev``'s token, fed from the device where the stepper can take
        it so (``token_graph.feed_device``: the captured step on CUDA); elsewhere the token is
        read first (on a CPU that costs nothing: it is already computed)."""
        logits = feed_device(self.stepper, prev.token, prev.position)
        if logits is None:
            logits = self.stepper.logits([*self.ids, int(prev.token)])
        logits, finite = finite_rows(logits)
        return StepLogits(logits, finite, 1)

    def _row(self, width: int) -> RowBuffer:
        """The next of two row buffers (one being read, one launched ahead)."""
        if not self._rows or self._rows[0].out.shape[0] != width:
            self._rows = [RowBuffer(width, self.device) for _ in range(2)]
        self._turn = 1 - self._turn
        return self._rows[self._turn]

    def _collect(self, slot: Slot) -> Step:
        """Read ``slot``'s row (waiting for it, if the device is still at work) and add its
        Step; ids fed from the device are settled with the value read."""
        m = unpack_row(slot.row.read(), slot.top_n, slot.penalties)
        mirrors = [self._ids_dev.mirror, self._graph.mirror if self._graph is not None else []]
        for ids in [self.stepper.cache.ids if self.stepper.cache else [], *mirrors]:
            if slot.position < len(ids) and ids[slot.position] == PENDING:
                ids[slot.position] = m.token_id
        elapsed = time.perf_counter() - max(slot.started, self._free_from)
        forced = slot.how == "forced"
        step = self._append(m, elapsed, slot.how, forced, slot.fed, NO_REPORT)
        self._free_from = time.perf_counter()
        return step
