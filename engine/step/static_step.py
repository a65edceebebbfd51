"""A static decode step: the shapes a CUDA graph can replay.

The fast path's step (``engine.step.forward.forward``) over a cache of fixed capacity: keys and
values are written at ``pos`` (a device tensor), attention reads the whole capacity under a
mask (key j is visible to the row at position p when j <= p, and
j > p - window on sliding layers), so no shape depends on how far decoding has got. That lets

* ``torch.compile`` fuse the step (compiled once per (model, dtype, capacity), shared by the
  steppers of one model), and
* a CUDA graph capture one decode token (``torch.cuda.CUDAGraph``, captured after the compiled
  step has run on a side stream) and replay it: a token costs one graph launch instead of
  hundreds of kernel launches from Python.

Per decode token the host does: copy the token id and its position into two preallocated
device tensors (``copy_`` from a pinned host buffer, ordered on the stream), replay, and
clone the logits out of the graph's output buffer. No synchronisation happens here: the
caller's top-N / sampler chain run on the device and its one small device-to-host copy is the
token's only sync point.

When a token would not fit, the cache grows (twice the capacity, up to the model's context),
which changes the shapes: the step is compiled and captured again for the new capacity.
Multi-token calls (the prompt, speculative verification) run the same step eagerly over the
static cache. Anything that cannot be compiled or captured (no CUDA, an old torch, a failing
compile) falls back, with one line in the log saying why: to the eager step on a GPU, and on
CPU ``FastStepper`` (TorchScript of the same functions, filled part only) stays the default
(resources/notes/fast-path-python.md has the figures).
"""

from __future__ import annotations

import importlib
import logging
import types
import warnings
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

from engine.step.fastpath import Spec, read_spec
from engine.step.forward import forward
from engine.step.kvcache import StaticKV

log = logging.getLogger(__name__)

# compiled steps per model: {model: {(dtype, capacity): compiled forward}}
_COMPILED: weakref.WeakKeyDictionary[torch.nn.Module, dict[tuple[torch.dtype, int], Any]]
_COMPILED = weakref.WeakKeyDictionary()


def graphs_unavailable(device: torch.device) -> str | None:
    """None when a CUDA graph can be captured on ``device``, else why not (one line)."""
    if device.type != "cuda":
        return f"CUDA graphs need a CUDA device (this model is on {device.type})"
    if not torch.cuda.is_available():
        return "CUDA is not available"
    if not hasattr(torch.cuda, "CUDAGraph"):
        return f"torch {torch.__version__} has no CUDA graphs"
    return None


def compile_unavailable() -> str | None:
    """None when ``torch.compile`` can be used here, else why not."""
    if not hasattr(torch, "compile"):
        return f"torch {torch.__version__} has no torch.compile"
    try:
        importlib.import_module("torch._dynamo")
    except Exception as exc:  # noqa: BLE001 - any import failure means: no compile
        return f"torch.compile is unusable: {exc}"
    return None


def fresh_forward() -> Callable[..., torch.Tensor]:
    """``forward`` as a new function object over its own copy of the code object: dynamo keeps
    its cache of compiled graphs (and its recompile limit, 8) per code object, so each
    (model, dtype, capacity) compiled from its own copy does not evict or count against the
    others."""
    code = forward.__code__.replace()
    fn = types.FunctionType(code, forward.__globals__, forward.__name__, forward.__defaults__)
    fn.__kwdefaults__ = forward.__kwdefaults__
    return fn


def _import_inductor() -> None:
    """Import inductor before the first compile, without its one warning: torch 2.13's own
    import chain (``torch._inductor.compile_fx`` -> ``torch.fx.experimental.optimization`` ->
    ``torch.utils.mkldnn``) defines TorchScript modules and warns "`torch.jit.script_method`
    is deprecated" once per process. That is torch's code, not a route this project takes."""
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", r"`torch\.jit\.script_method` is deprecated", DeprecationWarning
        )
        importlib.import_module("torch._inductor.compile_fx")


def compiled_step(model: torch.nn.Module, dtype: torch.dtype, capacity: int) -> Any:
    """``torch.compile`` of the step, cached per (model, dtype, capacity). Compilation itself
    happens on the first call (seconds to a minute), which is why callers warm it up off the
    GUI thread."""
    per_model = _COMPILED.setdefault(model, {})
    key = (dtype, capacity)
    if key not in per_model:
        _import_inductor()
        # fullgraph: a graph break would leave Python between kernels, which capture forbids;
        # dynamic=False: one capacity, one set of shapes, no symbolic sizes
        per_model[key] = torch.compile(fresh_forward(), fullgraph=True, dynamic=False)
    return per_model[key]


class StaticStepper:
    """A ``Stepper`` over a fixed-capacity cache; on CUDA, decode tokens replay a captured
    graph of the (compiled) step.

    ``compile``: use ``torch.compile`` (default: on CUDA). ``graphs``: capture decode tokens in
    a CUDA graph (default: on CUDA). ``capacity``: the cache's first size (it grows)."""

    def __init__(
        self,
        model: torch.nn.Module,
        max_len: int | None = None,
        capacity: int = 256,
        compile: bool | None = None,
        graphs: bool | None = None,
    ) -> None:
        self.model = model
        self.spec: Spec = read_spec(model)
        self.family = self.spec.family
        self.device, self.dtype = self.spec.device, self.spec.dtype
        self.max_len = min(max_len or self.spec.max_len, self.spec.max_len)
        cuda = self.device.type == "cuda"
        self.compile = cuda if compile is None else compile
        self.graphs = cuda if graphs is None else graphs
        self.fallback: str | None = None  # why this stepper runs less than asked, if it does
        if self.graphs and (reason := graphs_unavailable(self.device)):
            self._fall_back(reason)
        if self.compile and (reason := compile_unavailable()):
            self.compile = False
            self._fall_back(reason)
        self._args = self.spec.args(onednn=False)
        self._eager = forward
        self.forward_passes = 0
        self.captures = 0  # graphs captured so far (one per capacity reached)
        self.cache = StaticKV(
            len(self.spec.layers),
            self.spec.n_kv,
            self.spec.head_dim,
            self.dtype,
            self.device,
            self.max_len,
            min_capacity=min(capacity, self.max_len),
            buckets=True,
        )
        self._graph: Any = None  # (capacity, CUDAGraph, output buffer)
        self._ids = torch.zeros(1, dtype=torch.long, device=self.device)  # [1] token id
        self._pos = torch.zeros(1, dtype=torch.long, device=self.device)  # [1] its position
        self._host = torch.zeros(2, dtype=torch.long, pin_memory=cuda)
        self._copied = torch.cuda.Event() if cuda else None  # the last copy out of _host

    def _fall_back(self, reason: str) -> None:
        self.graphs = False
        self.fallback = reason
        log.info("static step without CUDA graphs: %s", reason)

    def truncate(self, length: int) -> None:
        # Positions past the end stay in the buffer but are masked: a key at j > p is never
        # visible to a row at p, and the next token at that position overwrites it.
        self.cache.crop(length)

    def _step_fn(self, capacity: int) -> Callable[..., torch.Tensor]:
        if not self.compile:
            return self._eager
        try:
            return compiled_step(self.model, self.dtype, capacity)
        except Exception as exc:  # noqa: BLE001 - compile is an optimisation, never an error
            self.compile = False
            log.info("static step not compiled: %s", exc)
            return self._eager

    def _run(self, ids: torch.Tensor, pos: torch.Tensor, keep: int, fn: Any = None) -> Any:
        k_all, v_all = self.cache.k, self.cache.v
        return (fn or self._eager)(
            ids=ids, pos=pos, attn_len=self.cache.capacity, always_mask=True, k_all=k_all,
            v_all=v_all, keep=keep, **self._args,
        )  # fmt: skip

    def _capture(self) -> tuple[int, Any, torch.Tensor]:
        """Compile (on first use) and capture one decode token at the current capacity. The
        token id and position are already in ``self._ids`` / ``self._pos``: the warm-up runs
        write the same keys and values the real token will, so they change nothing."""
        capacity = self.cache.capacity
        fn = self._step_fn(capacity)
        side = torch.cuda.Stream(device=self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):  # warm-up off the capture: compile, autotune, allocate
            for _ in range(2):
                self._run(self._ids, self._pos, 1, fn)
        torch.cuda.current_stream(self.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        # thread_local: CUDA calls made by other threads meanwhile (none expected: the GUI
        # thread does not touch the device) do not invalidate this capture
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):
            out = self._run(self._ids, self._pos, 1, fn)  # [1, vocab], lives in the graph's pool
        self.captures += 1
        return capacity, graph, out

    def _decode_graphed(self, token: int, position: int) -> torch.Tensor | None:
        """One decode token by graph replay, or None when capture failed (then eager)."""
        # The pinned buffer is reused: wait until the last copy out of it ran. Normally it has
        # long since (the caller read the previous token's logits back), so this costs nothing;
        # it matters after warm_up, which returns without reading anything.
        if self._copied is not None:
            self._copied.synchronize()
        self._host[0], self._host[1] = token, position
        # both copies are ordered on the stream before the replay; no host sync here
        self._ids.copy_(self._host[:1], non_blocking=True)
        self._pos.copy_(self._host[1:], non_blocking=True)
        if self._copied is not None:
            self._copied.record()
        if self._graph is None or self._graph[0] != self.cache.capacity:
            self._graph = None  # a grown cache: new buffers, new shapes, capture again
            try:
                self._graph = self._capture()
            except Exception as exc:  # noqa: BLE001 - capture is an optimisation
                self._fall_back(f"capture failed: {exc}")
                return None
        _, graph, out = self._graph
        graph.replay()
        return out.clone()  # the next replay overwrites the graph's buffer

    @property
    def capacity(self) -> int:
        """Tokens the cache holds before it grows (and the step is captured again)."""
        return self.cache.capacity

    def needs_warm_up(self, length: int = 0) -> bool:
        """Whether ``warm_up(length)`` would compile or capture (False when graphs are off, or
        a graph is ready at a capacity that holds ``length`` tokens)."""
        if not self.graphs:
            return False
        ready = self._graph is not None and self._graph[0] == self.cache.capacity
        return not ready or min(length, self.max_len) > self.cache.capacity

    @torch.inference_mode()
    def warm_up(self, length: int = 0) -> bool:
        """Compile and capture now (seconds to a minute on first use), so that the first
        token does not pause: call it from the worker thread with a progress line. ``length``:
        the tokens about to be fed (the prompt), so that the graph is captured at the capacity
        they need rather than again after the prompt. The dummy token goes to the first free
        position, which is masked until a real token overwrites it. True when a graph is
        ready."""
        if not self.graphs:
            return False
        position = len(self.cache)
        if position >= self.max_len:
            return False
        self.cache.ensure(min(self.max_len, max(position + 1, length + 1)))
        return self._decode_graphed(0, position) is not None

    @torch.inference_mode()
    def logits(self, ids: Sequence[int], keep: int = 1) -> torch.Tensor:
        """Same contract as ModelStepper.logits: [keep, vocab] float32."""
        start, new = self.cache.take(ids, keep, self.max_len)
        self.cache.ensure(start + len(new))  # may grow: a new capacity
        out: torch.Tensor | None = None
        if self.graphs and len(new) == 1 and keep == 1:
            out = self._decode_graphed(new[0], start)
        if out is None:
            x = torch.tensor(new, device=self.device)  # [n]
            pos = torch.arange(start, start + len(new), device=self.device)  # [n]
            fn = self._step_fn(self.cache.capacity) if len(new) == 1 and keep == 1 else None
            out = self._run(x, pos, keep, fn)
        self.forward_passes += 1
        self.cache.extend(new)
        return out


def static_stepper_or_none(model: torch.nn.Module, **kwargs: Any) -> StaticStepper | None:
    """The static step when the model's family has a fast path and it runs on CUDA, else
    None (with the reason logged)."""
    from engine.step.fastpath import supports

    if supports(model) is not None:
        return None  # engine.step.fastpath says why, once
    reason = graphs_unavailable(next(model.parameters()).device)
    if reason is not None:
        log.info("static step off: %s", reason)
        return None
    return StaticStepper(model, **kwargs)


def _warmable(session: Any) -> list[tuple[Any, int]]:
    """The steppers a session decodes with that can be warmed up (a ``StaticStepper`` on
    CUDA), each with how many tokens it runs past the session's ids: the model's (none; one
    for a pipelined session, which launches the next token before the host has read the one
    before it), and a draft model's (up to gamma, drafted in a round)."""
    drafter = getattr(session, "drafter", None)
    ahead = 1 if getattr(session, "pipeline", False) else 0  # engine.decode.pipeline
    found = [
        (getattr(session, "stepper", None), ahead),
        (getattr(drafter, "stepper", None), getattr(session, "gamma", 0)),
    ]
    return [(s, past) for s, past in found if hasattr(s, "needs_warm_up")]


def warm_ups(session: Any, ahead: int = 0) -> Iterator[str]:
    """Compile and capture the GPU decode steps ``session`` needs for its next token, before
    that token (``StaticStepper.warm_up``: seconds to a minute, once per model and cache
    size), yielding a line for the status bar before each one that will take a while, and one
    after it: the capacity captured, or why the stepper decodes without CUDA graphs. Call it
    before a run's first token and again between tokens: a run that outgrows its cache gets
    the larger cache's step here rather than inside a token. ``ahead``: size the cache for that many
    more tokens now (a run of known length captures once). Nothing happens for other steppers
    (CPU, ``model.forward``) or a finished session."""
    if getattr(session, "finished", False):
        return
    length = len(getattr(session, "ids", ())) + ahead
    for stepper, past in _warmable(session):
        needed = length + past
        if not stepper.needs_warm_up(needed):
            continue
        if getattr(stepper, "captures", 0):
            yield (
                f"The run passed {stepper.capacity} tokens: compiling and capturing the "
                "GPU decode step for a larger cache..."
            )
        else:
            yield (
                "Preparing the GPU decode step: compiling and capturing it (once per model and "
                "cache size)..."
            )
        if stepper.warm_up(needed):  # the status bar must not say "Preparing" all run long
            yield f"GPU decode step captured for {stepper.capacity} tokens; generating…"
        elif stepper.fallback:
            yield f"GPU decode step without CUDA graphs: {stepper.fallback}"
