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
first view of a token costs what the full pass did, the next ones a one-token pass), unless the
run's decode session still holds their keys and values (``take``, ``handoff``): the first view
is then one one-token pass too, and the rows rollout needs are read after it (``read_rows``,
stopped between two blocks by a click). The figures
are those of the full pass up to float rounding (a one-token product sums in another order);
tests/engine/test_internals_reader.py compares the two on every family.

Decoder-only models only: an encoder-decoder (T5) reads its steps by the full pass, which its
short inputs make cheap (``PathReader.open`` answers None)."""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import replace
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
ROWS_CHUNK = 256  # positions one pass reads rows for behind handed keys (stopped at any block)


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
        self.rows = torch.zeros(self.layers, n, n)  # rollout's rows of positions < rowed
        self.rowed = 0  # positions whose rows are kept (<= read: handed keys come without)
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
        """Read the keys and values of the positions up to ``upto`` (excluded), ``CHUNK`` per
        pass, with their attention rows where those were read up to there; ``cancelled`` is
        asked between passes."""
        upto = min(upto, len(self.ids))
        while self.read < upto:
            self._check(cancelled)
            started = time.perf_counter()
            lo, hi = self.read, min(upto, self.read + CHUNK)
            self._read(lo, hi, self.cache, rows=self.rowed == lo)
            self.read = hi
            if self.cache.get_seq_length() != hi:
                raise InternalsUnavailable("The model's cache did not keep every position.")
            self.seconds += time.perf_counter() - started

    @torch.inference_mode()
    def read_rows(self, upto: int, cancelled: Callable[[], bool] | None = None) -> None:
        """Read the attention rows of the positions up to ``upto`` (excluded) that came with
        handed keys and values (``take``), ``ROWS_CHUNK`` per pass over a copy of the cache
        before them. ``cancelled`` is asked before every block of the model too (a pass over
        a copy leaves nothing half-done), so a click waits for one block at most (measured on
        SmolLM2, 512 tokens, 2 cores: 32 positions a pass read the rows in 1.9 s, 256 in
        0.84 s)."""
        upto = min(upto, self.rows.shape[1])
        self.extend(upto, cancelled)
        while self.rowed < upto:
            self._check(cancelled)
            started = time.perf_counter()
            lo, hi = self.rowed, min(upto, self.rowed + ROWS_CHUNK)
            self._read(lo, hi, self._past(lo), rows=True, cancelled=cancelled)
            self.seconds += time.perf_counter() - started

    def take(self, session: Any, upto: int) -> bool:
        """Take the keys and values of the positions up to ``upto`` from a decode session's
        cache (``handoff.handed_keys``) where it holds more of this path than was read;
        their attention rows are read later (``read_rows``). Whether it did."""
        from engine.internals.handoff import handed_keys

        if session is None or self.read >= upto:
            return False
        handed = handed_keys(session, self._model(), self.ids)
        if handed is None or handed[0] <= self.read:
            return False
        self.cache = _cache_class()(ddp_cache_data=handed[1])
        self.read = handed[0]
        return True

    @staticmethod
    def _check(cancelled: Callable[[], bool] | None) -> None:
        if cancelled is not None and cancelled():
            raise InternalsUnavailable("Stopped.")

    def _read(
        self, lo: int, hi: int, cache: Any, rows: bool, cancelled: Callable[[], bool] | None = None
    ) -> None:
        """Positions ``lo`` to ``hi`` through the model after ``cache`` (which takes their
        keys and values), their head-averaged attention rows kept where ``rows``; with
        ``cancelled``, asked before each block (only where ``cache`` is a copy)."""
        model = self._model()
        if model is None:
            raise InternalsUnavailable("The model this path was read with is closed.")
        an = anatomy(model)
        handles, kept = [], rows and lo < self.rows.shape[1]
        if kept:  # these positions' rows, for rollout
            for i, attn in enumerate(an.attention):
                handles.append(attn.register_forward_hook(self._rows_hook(i, lo, hi)))
        if cancelled is not None:
            for block in an.blocks:
                handles.append(block.register_forward_pre_hook(lambda *_: self._check(cancelled)))
        dev = next(model.parameters()).device
        ids = torch.tensor([self.ids[lo:hi]], device=dev)
        where = torch.arange(lo, hi, device=dev)[None]
        try:
            with eager_attention(model) if kept else nullcontext():
                _stack_pass(an, ids, cache, where)
        finally:
            for h in handles:
                h.remove()
        if rows:
            self.rowed = hi

    def _rows_hook(self, i: int, lo: int, hi: int) -> Any:
        kept = self.rows.shape[1]

        def hook(_m: torch.nn.Module, _args: Any, output: Any) -> None:
            w = _weights(output)[0]  # [H, hi - lo, hi]: these positions' rows
            top = min(hi, kept)
            rows = w[:, : top - lo, :top].float().mean(0).cpu()  # heads averaged: [top - lo, top]
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
        session: Any = None,
        rollout: bool = True,
    ) -> StepInside:
        """``inspect.inspect_step(bundle, path, step)`` from the cache: the positions before
        the token's are taken from ``session`` (a decode session over this path) or read first
        where they were not. Without ``rollout`` a step whose positions came from the session
        is returned without its rollout (``AttentionView.rollout_pending``), which
        ``read_rows`` and a second call then give."""
        if not self.serves(bundle, path):
            raise ValueError("This reader reads another path or model.")
        started = time.perf_counter()
        q = path.query(step)
        read_attention, notes = attention_fits(q, attention)
        self.take(session, q)
        self.extend(q, cancelled)
        if read_attention and rollout:
            self.read_rows(q, cancelled)
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
        view, pending = None, False
        if read_attention:
            heads = torch.stack(rec.heads)  # type: ignore[arg-type]
            roll = self._rollout(q, heads)
            view, pending = (heads, roll, None), roll is None
        inside = assemble(bundle, an, path, step, (resid, mids), view, notes, started, top_n)
        if pending and inside.attention is not None:
            inside = replace(inside, attention=replace(inside.attention, rollout_pending=True))
        return inside

    def _rollout(self, q: int, heads: torch.Tensor) -> torch.Tensor | None:
        """The rollout row of position ``q`` from the rows of the positions before it and its
        own heads' weights ``[L, H, q + 1]`` (None while those rows are not read)."""
        if self.rowed < q:
            return None
        own = heads.float().mean(1).cpu()  # [L, q + 1]: the heads averaged (rows are on the CPU)
        own[:, q] += 1.0  # the residual (attention.with_residual)
        own = own / own.sum(dim=-1, keepdim=True)
        return rolled_out(
            [torch.cat([self.rows[i, :q, : q + 1], own[i : i + 1]]) for i in range(self.layers)]
        )


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
