"""The whole token in one CUDA graph: the captured static step's forward pass, then the chain,
the pick and the Step's numbers (``engine.decode.device_stats.token_stats``), replayed as one
launch per token. CUDA only; written against ``engine.step.static_step.StaticStepper``.

Before each replay the host writes the token's inputs into the graph's fixed buffers, each a
small copy ordered on the stream (no sync): the id fed (a host int, or the previous token's
device tensor, never read back), its position, the run's ids for the penalty window and the
forced token (-1: pick). The generator is registered with the graph, so that the seed set
before a replay (``manual_seed``, as today's step does) is the one the captured draw uses.

A graph is captured per (cache capacity, chain plan): a new capacity or new settings capture
again (the forward pass is compiled once per capacity and shared, ``compiled_step``). Anything
that fails falls back, with the reason, to the eager device path (``feed_device`` below).

``tests/engine/test_token_graph_cuda.py`` checks it against today's session where CUDA is
present (passed on an H100, torch 2.11; figures in resources/notes/pipeline-gpu.md).
"""

from __future__ import annotations

import logging
from typing import Any

import torch

from engine.decode.device_stats import FusedPlan, token_stats, window_seen
from engine.decode.measure import finite_rows
from engine.models.device import vocab_size
from engine.step.kvcache import common_prefix
from engine.step.static_step import StaticStepper

log = logging.getLogger(__name__)
PENDING = -1  # an id fed from the device whose value the host has not read yet


def graph_stepper(stepper: Any) -> StaticStepper | None:
    """``stepper`` when it replays a captured step (CUDA), else None."""
    if isinstance(stepper, StaticStepper) and stepper.graphs:
        return stepper
    return None


def feed_device(stepper: Any, token: torch.Tensor, position: int) -> torch.Tensor | None:
    """The logits ([1, vocab] float32) after ``token`` ([1] long on the device) fed at
    ``position``, from the stepper's captured forward pass without reading the token on the
    host. None when the stepper cannot (no captured graph at this capacity, a cache that must
    grow first): the caller reads the token and feeds it the usual way."""
    s = graph_stepper(stepper)
    if s is None or len(s.cache) != position or position + 1 > s.cache.capacity:
        return None
    captured = s._graph
    if captured is None or captured[0] != s.cache.capacity:
        return None
    s._ids.copy_(token)  # device to device, ordered on the stream
    s._pos.fill_(position)
    captured[1].replay()
    s.forward_passes += 1
    s.cache.extend([PENDING])  # settled when the token's row is read
    return captured[2].clone()


class TokenGraph:
    """One token replayed from a graph: forward, chain, pick, numbers. ``launch`` returns the
    token ([1] long) and its packed row ([width] float64), both copies owned by the caller."""

    def __init__(
        self, stepper: StaticStepper, generator: torch.Generator, capture: bool = True
    ) -> None:
        self.stepper = stepper
        self.capture = capture
        self.vocab = vocab_size(stepper.model)  # the head may be quantised: not its shape
        self.generator = generator
        self.device = stepper.device
        self.broken: str | None = None  # why this session stopped using the graph
        self.captures = 0
        self.launches = 0  # tokens it ran
        self._key: tuple | None = None
        self._out: Any = None  # the graph's own buffers: the packed row, the token,
        self._token: Any = None  # and the run's ids (the penalty's window)
        self._ids: Any = None
        self._fn: Any = None
        self._graph: Any = None
        self._length = torch.zeros(1, dtype=torch.long, device=self.device)
        self._forced = torch.full((1,), -1, dtype=torch.long, device=self.device)
        self.mirror: list[int] = []  # what ``_ids`` holds, as the host knows it (PENDING)

    def fits(self, position: int) -> bool:
        """Whether the token fed at ``position`` fits the cache as it is (no growth)."""
        cache = self.stepper.cache
        return self.broken is None and len(cache) == position and position < cache.capacity

    def _inputs(self, fed: torch.Tensor | int, position: int, known: list[int]) -> None:
        """Write a token's inputs into the graph's buffers, each a copy ordered on the stream:
        the id fed at ``position`` (a host int, ``known[-1]``, or a device tensor that goes
        after ``known``), and the run's ids for the penalty window (only what changed)."""
        s = self.stepper
        if isinstance(fed, torch.Tensor):
            s._ids.copy_(fed)
        else:
            s._ids.fill_(fed)
        s._pos.fill_(position)
        self._length.fill_(position + 1)
        need = s.cache.capacity + 1  # a new capacity captures again, with this buffer
        if self._ids is None or self._ids.shape[0] < need:
            self._ids = torch.zeros(need, dtype=torch.long, device=self.device)
            self.mirror = []
        keep = common_prefix(self.mirror, known)
        if keep < len(known):  # after a rewind or a host launch: copied from pinned memory
            new = torch.tensor(known[keep:], dtype=torch.long)
            new = new.pin_memory() if self.device.type == "cuda" else new
            self._ids[keep : len(known)].copy_(new, non_blocking=True)
        self.mirror = list(known)
        if isinstance(fed, torch.Tensor):
            self._ids[position : position + 1].copy_(fed)
            self.mirror.append(PENDING)

    def _body(self, plan: FusedPlan, fn: Any) -> None:
        s = self.stepper
        logits = s._run(s._ids, s._pos, 1, fn)  # [1, vocab]
        logits, finite = finite_rows(logits)
        seen = None
        if plan.penalties:
            seen = window_seen(self._ids, self._length, plan.last_n or 0, logits.shape[-1])
        token = token_stats(plan, logits, finite, seen, self.generator, self._forced, self._out)
        self._token.copy_(token)

    def _prepare(self, plan: FusedPlan, vocab: int, key: tuple) -> bool:
        """The graph's buffers for ``plan``, and its capture (``capture`` off: the same body
        runs eagerly, which is how a machine without CUDA checks it). False when capture
        failed (``broken`` says why)."""
        s = self.stepper
        self._fn = s._step_fn(s.cache.capacity) if self.capture else None
        self._out = torch.zeros(plan.width(vocab), dtype=torch.float64, device=self.device)
        self._token = torch.zeros(1, dtype=torch.long, device=self.device)
        if self.capture:
            try:
                self._capture(plan)
            except Exception as exc:  # noqa: BLE001 - the graph is an optimisation
                self.broken = f"whole-token graph not captured: {exc}"
                log.info(self.broken)
                return False
        self._key = key
        return True

    def _capture(self, plan: FusedPlan) -> None:
        side = torch.cuda.Stream(device=self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):  # warm-up off the capture (as StaticStepper._capture)
            for _ in range(2):
                self._body(plan, self._fn)
        torch.cuda.current_stream(self.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        if not plan.greedy:  # the seed set before a replay reaches the captured draw
            graph.register_generator_state(self.generator)
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):
            self._body(plan, self._fn)
        self.captures += 1
        self._graph = graph

    @torch.inference_mode()
    def launch(
        self,
        plan: FusedPlan,
        fed: torch.Tensor | int,
        position: int,
        known: list[int],
        forced: int | None,
        seed: int,
    ) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The token after ``fed`` at ``position`` (the host's ids ``known``; ``fed`` their last,
        or a device tensor after them), drawn with the step's ``seed``: the token [1] and its
        packed row, copies the caller owns. None when the graph cannot be used (``broken``)."""
        self._inputs(fed, position, known)
        self._forced.fill_(-1 if forced is None else forced)
        key = (self.stepper.cache.capacity, plan.key)
        if self._key != key and not self._prepare(plan, self.vocab, key):
            return None
        self.generator.manual_seed(seed)  # after any capture: its warm-up drew from it
        if self.capture:
            self._graph.replay()
        else:
            self._body(plan, self._fn)
        self.launches += 1
        self.stepper.forward_passes += 1
        self.stepper.cache.extend([PENDING if isinstance(fed, torch.Tensor) else fed])
        return self._token.clone(), self._out.clone()
