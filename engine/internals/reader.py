"""Any token of a path at the pace of a click (issue 54). ``inspect.inspect_step`` runs the whole
path through the model for each token asked (~0.8 s for 512 tokens of SmolLM2 on a 2-core CPU,
whichever token). A ``PathReader`` reads the path once, as far as the clicks have reached, and
keeps what every later step needs from the positions before it:

- the keys and values of every layer (the model's own KV cache, as generation keeps it), so a
  step is one more one-token pass at its position, hooked as ``trace.capture`` hooks a full
  pass: the residual stream, each sub-block's output and each head's attention of that position;
- the head-averaged attention rows of every position read, with the residual added and each
  row renormalised as rollout takes them (``[L, T, T]``, up to ``ATTENTION_MAX_TOKENS``: 31 MB
  for SmolLM2 at 512 tokens, 126 MB at 1024): rollout multiplies those matrices, which one
  position cannot give. A causal row's renormalisation needs no column after it, so the rows
  serve every later step as they are.

A click on a token not read yet reads the positions up to it first, ``CHUNK`` at a time (the
first view of a token costs what the full pass did, the next ones a one-token pass). The figures
are those of the full pass up to float rounding (a one-token product sums in another order);
tests/engine/test_internals_reader.py compares the two on every family.

Decoder-only models only: an encoder-decoder (T5) reads its steps by the full pass, which its
short inputs make cheap (``PathReader.open`` answers None)."""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

import torch

from engine.errors import InternalsUnavailable
from engine.internals.anatomy import Anatomy, anatomy
from engine.internals.attention import rolled_out
from engine.internals.inspect import assemble, attention_fits
from engine.internals.records import StepInside
from engine.internals.trace import (
    ATTENTION_MAX_TOKENS,
    TokenPath,
    _Recorder,
    _weights,
    eager_attention,
)
from engine.step.kvcache import cache_kwargs

CHUNK = 256  # positions one reading pass takes (its attention: [H, CHUNK, T] per layer)


def _cache_class() -> Any:
    from transformers import DynamicCache

    return DynamicCache


class PathReader:
    """The keys, values and head-averaged attention of one path's positions, read so far."""

    def __init__(self, model: torch.nn.Module, ids: tuple[int, ...]) -> None:
        self._model = weakref.ref(model)  # the reader never keeps a model alive
        self.ids = ids
        self.layers = anatomy(model).layers
        self.cache = _cache_class()()  # every layer in full (no sliding window drops a key)
        self.read = 0  # positions whose keys and values are cached
        n = min(len(ids), ATTENTION_MAX_TOKENS)
        self.rows = torch.zeros(self.layers, n, n)  # rollout's rows of positions < read
        self.seconds = 0.0  # spent reading positions

    @classmethod
    def open(cls, bundle: Any, path: TokenPath) -> PathReader | None:
        """A reader over ``path`` (the longest path its clicks will ask about: a run's every
        token), or None where steps are read by the full pass (an encoder-decoder)."""
        if path.encoder_decoder or anatomy(bundle.model).encoder_decoder:
            return None
        return cls(bundle.model, path.ids)

    def model_is(self, bundle: Any) -> bool:
        return self._model() is bundle.model

    def serves(self, bundle: Any, path: TokenPath) -> bool:
        """Whether ``path`` is this reader's path or a part of it, on the same model."""
        return (
            not path.encoder_decoder
            and self._model() is bundle.model
            and self.ids[: len(path.ids)] == path.ids
        )

    def follow(self, path: TokenPath) -> bool:
        """Take ``path`` as the reader's path where it goes on from it (a run continued): what
        was read stays. Whether it did."""
        if path.ids[: len(self.ids)] != self.ids:
            return False
        self.ids = path.ids
        n = min(len(path.ids), ATTENTION_MAX_TOKENS)
        if n > self.rows.shape[1]:
            grown = torch.zeros(self.layers, n, n)
            k = self.rows.shape[1]
            grown[:, :k, :k] = self.rows
            self.rows = grown
        return True

    # -- reading positions ------------------------------------------------------------------

    @torch.inference_mode()
    def extend(self, upto: int, cancelled: Callable[[], bool] | None = None) -> None:
        """Read the positions up to ``upto`` (excluded), ``CHUNK`` per pass; ``cancelled`` is
        asked between passes."""
        upto = min(upto, len(self.ids))
        while self.read < upto:
            if cancelled is not None and cancelled():
                raise InternalsUnavailable("Stopped.")
            started = time.perf_counter()
            self._read(self.read, min(upto, self.read + CHUNK))
            self.seconds += time.perf_counter() - started

    def _read(self, lo: int, hi: int) -> None:
        model = self._model()
        if model is None:
            raise InternalsUnavailable("The model this path was read with is closed.")
        an = anatomy(model)
        rows = self.rows.shape[1]
        handles = []
        if lo < rows:  # the head-averaged attention rows of these positions, for rollout
            for i, attn in enumerate(an.attention):
                handles.append(attn.register_forward_hook(self._rows_hook(i, lo, hi)))
        dev = next(model.parameters()).device
        ids = torch.tensor([self.ids[lo:hi]], device=dev)
        where = torch.arange(lo, hi, device=dev)[None]
        try:
            with eager_attention(model) if handles else nullcontext():
                _stack_pass(an, ids, self.cache, where)
        finally:
            for h in handles:
                h.remove()
        self.read = hi
        if self.cache.get_seq_length() != hi:
            raise InternalsUnavailable("The model's cache did not keep every position.")

    def _rows_hook(self, i: int, lo: int, hi: int) -> Any:
        kept = self.rows.shape[1]

        def hook(_m: torch.nn.Module, _args: Any, output: Any) -> None:
            w = _weights(output)[0]  # [H, hi - lo, hi]: these positions' rows
            top = min(hi, kept)
            rows = w[:, : top - lo, :top].float().mean(0)  # heads averaged, [top - lo, top]
            rows[:, lo:top] += torch.eye(top - lo)  # the residual (attention.with_residual)
            self.rows[i, lo:top, :top] = rows / rows.sum(dim=-1, keepdim=True)

        return hook

    def _past(self, q: int) -> Any:
        """The cache of positions before ``q`` (a copy: the one-token pass appends to it)."""
        layers = [(k[:, :, :q], v[:, :, :q]) for k, v, *_ in self.cache]
        return _cache_class()(ddp_cache_data=layers) if q else _cache_class()()

    # -- one step -----------------------------------------------------------------------------

    @torch.inference_mode()
    def inspect(
        self,
        bundle: Any,
        path: TokenPath,
        step: int,
        top_n: int = 10,
        attention: bool = True,
        cancelled: Callable[[], bool] | None = None,
    ) -> StepInside:
        """``inspect.inspect_step(bundle, path, step)`` from the cache: the positions before
        the token's are read first where they were not."""
        if not self.serves(bundle, path):
            raise ValueError("This reader reads another path or model.")
        started = time.perf_counter()
        q = path.query(step)
        read_attention, notes = attention_fits(q, attention)
        self.extend(q + 1 if read_attention else q, cancelled)
        an, model = anatomy(bundle.model), bundle.model
        dev = next(model.parameters()).device
        rec = _Recorder(an, torch.tensor([0], device=dev), q if read_attention else None,
                        rollout=False, mids=True, row=0)  # fmt: skip
        rec.install()
        try:
            with eager_attention(model) if read_attention else nullcontext():
                where = torch.tensor([[q]], device=dev)
                _stack_pass(an, torch.tensor([[self.ids[q]]], device=dev), self._past(q), where)
        finally:
            rec.remove()
        if any(r is None for r in rec.resid) or any(m is None for ms in rec.mids for m in ms):
            raise InternalsUnavailable("The model did not pass through every block it declares.")
        resid = torch.stack(rec.resid)[:, 0]  # type: ignore[arg-type]
        mids = torch.stack([torch.stack(ms) for ms in rec.mids])[:, :, 0]  # type: ignore[misc]
        view = None
        if read_attention:
            rollout = rolled_out([m[: q + 1, : q + 1] for m in self.rows])
            view = (torch.stack(rec.heads), rollout, None)  # type: ignore[arg-type]
        return assemble(bundle, an, path, step, (resid, mids), view, notes, started, top_n)


def _stack_pass(an: Anatomy, ids: torch.Tensor, cache: Any, where: torch.Tensor) -> None:
    """The model's blocks and final norm over ``ids`` at positions ``where`` after ``cache``:
    the decoder without its head, whose product with the vocabulary (113 MB of SmolLM2's
    weights, a fifth of a one-token pass) the lens does itself where it needs it."""
    model: Any = an.model
    stack = model.transformer if an.model_type == "gpt2" else model.model
    stack(input_ids=ids, **cache_kwargs(stack, cache), use_cache=True, position_ids=where)


def reader_for(reader: PathReader | None, bundle: Any, path: TokenPath) -> PathReader | None:
    """``reader`` where it serves ``path`` or goes on to it (a run continued), else a new
    reader over ``path``; None where steps are read by the full pass (an encoder-decoder)."""
    usable = reader is not None and reader.model_is(bundle) and not path.encoder_decoder
    if usable and (reader.serves(bundle, path) or reader.follow(path)):  # type: ignore[union-attr]
        return reader
    return PathReader.open(bundle, path)
