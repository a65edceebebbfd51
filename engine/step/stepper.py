"""Steppers: run a model on a growing decoder sequence and return next-token logits.

Every stepper has the same small interface (``Stepper``): ``logits(ids, keep)`` for the whole
sequence so far, an explicit ``cache`` (``engine.step.kvcache``) that knows which ids it holds, and
a count of forward passes. A changed sequence (a branch, rejected drafts) keeps the cache's
common prefix and feeds the rest; nothing is recomputed.

* ``ModelStepper``: transformers' ``model.forward`` for any decoder-only or encoder-decoder
  model, with or without a cache. The encoder runs once, here.
* ``engine.step.fastpath.FastStepper``: a lean path for the families it knows
  (``engine.step.forward``: plain Python, run eagerly).
* ``engine.step.fast_t5.T5FastStepper``: the same for the decoder of T5 encoder-decoder models.
* ``engine.step.static_step.StaticStepper``: the same step over a fixed-capacity cache, compiled
  and replayed from a CUDA graph on a GPU.

``make_stepper`` picks one.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator, Sequence
from typing import Any, Protocol

import torch

from engine.errors import EmptyPromptError
from engine.models.device import model_device
from engine.records import Progress
from engine.runtime.threads import governed_step
from engine.step.fast_t5 import t5_stepper_or_none
from engine.step.fastpath import fast_stepper_or_none
from engine.step.kvcache import DynamicKV, KVCache, cache_kwargs, returned_cache
from engine.step.static_step import static_stepper_or_none


class Stepper(Protocol):
    device: torch.device
    forward_passes: int
    cache: KVCache | None  # None: every call runs the whole sequence

    def logits(self, ids: Sequence[int], keep: int = 1) -> torch.Tensor:
        """ids: the whole decoder sequence so far -> float32 logits of its last ``keep``
        positions, [keep, vocab] (row j predicts the id after ids[len - keep + j])."""
        ...

    def truncate(self, length: int) -> None:
        """Forget cached positions at and after ``length``."""
        ...


class ModelStepper:
    """``model.forward`` with transformers' cache; the encoder of an encoder-decoder model runs
    once, in ``__init__``."""

    def __init__(
        self,
        model: torch.nn.Module,
        encoder_input_ids: Sequence[int] | None = None,
        use_cache: bool = True,
    ) -> None:
        self.model = model
        self.device = model_device(model)
        self.is_encoder_decoder = bool(getattr(model.config, "is_encoder_decoder", False))
        self._keep_last = "logits_to_keep" in inspect.signature(model.forward).parameters
        self.forward_passes = 0
        self._encoder: dict[str, Any] = {}
        if self.is_encoder_decoder:
            if encoder_input_ids is None or len(encoder_input_ids) == 0:
                raise EmptyPromptError("The encoder input is empty: type a prompt first.")
            enc = torch.tensor([list(encoder_input_ids)], dtype=torch.long, device=self.device)
            mask = torch.ones_like(enc)
            with torch.inference_mode():
                # The encoder runs exactly once; every decoder step cross-attends to its output.
                out = model.get_encoder()(input_ids=enc, attention_mask=mask, return_dict=True)
            self._encoder = {"encoder_outputs": out, "attention_mask": mask}
        self.cache: DynamicKV | None = (
            DynamicKV(model, self.is_encoder_decoder) if use_cache else None
        )

    def truncate(self, length: int) -> None:
        if self.cache is not None:
            self.cache.crop(length)

    @torch.inference_mode()
    def logits(self, ids: Sequence[int], keep: int = 1) -> torch.Tensor:
        if len(ids) < keep:
            raise ValueError(f"need at least {keep} ids, got {len(ids)}")
        kwargs: dict[str, Any] = {"use_cache": self.cache is not None, **self._encoder}
        if self.cache is not None:
            self.cache.crop(self.cache.reusable(ids, keep))
            new = list(ids[len(self.cache) :])
            kwargs.update(cache_kwargs(self.model, self.cache.store))
        else:
            new = list(ids)
        if self._keep_last:
            kwargs["logits_to_keep"] = keep
        x = torch.tensor([new], dtype=torch.long, device=self.device)  # [1, n]
        key = "decoder_input_ids" if self.is_encoder_decoder else "input_ids"
        with governed_step(self.model, self.device, len(new)):
            out = self.model(**{key: x}, **kwargs)
        self.forward_passes += 1
        if self.cache is not None:
            self.cache.store = returned_cache(out)
            self.cache.extend(new)
        return out.logits[0, -keep:, :].float()  # [keep, vocab]


PREFILL_CHUNK = 256  # prompt tokens read per forward pass: Stop and progress act in between


def to_feed(stepper: Stepper, ids: Sequence[int], keep: int = 1) -> int:
    """How many positions ``stepper.logits(ids, keep)`` will run the model on."""
    cache = stepper.cache
    return len(ids) - cache.reusable(ids, keep) if cache is not None else len(ids)


def catch_up(
    stepper: Stepper, ids: Sequence[int], keep: int = 1, chunk: int | None = None
) -> Iterator[Progress]:
    """Fill the cache for all but the last ``keep`` of ``ids`` a chunk at a time, with a
    ``Progress`` record after each chunk (a long prompt, or the tokens of a restored run). A
    stepper without a cache reads everything in one pass, later."""
    if stepper.cache is None:
        return
    chunk = chunk or PREFILL_CHUNK
    total = len(ids) - keep
    done = stepper.cache.reusable(ids, keep)
    if total - done <= chunk:
        return
    while total - done > chunk:
        done += chunk
        stepper.logits(ids[:done])
        yield Progress(f"Reading the prompt: {done:,} of {total:,} tokens", done / total)


def make_stepper(
    model: torch.nn.Module,
    encoder_input_ids: Sequence[int] | None = None,
    use_cache: bool = True,
    fast: bool = False,
    max_len: int | None = None,
) -> Stepper:
    """The fast path when asked for and the model's family has one, else ``ModelStepper``. On
    CUDA the static step (compiled, decode tokens replayed from a CUDA graph); elsewhere, or
    when that is unavailable, the eager fast step. An encoder-decoder model gets the T5 step
    when it is a T5 that path knows."""
    if fast and use_cache and encoder_input_ids:
        t5 = t5_stepper_or_none(model, encoder_input_ids, max_len=max_len)
        if t5 is not None:
            return t5
    if fast and use_cache and not encoder_input_ids:
        stepper: Stepper | None = None
        if model_device(model).type == "cuda":
            stepper = static_stepper_or_none(model, max_len=max_len)
        if stepper is None:
            stepper = fast_stepper_or_none(model, max_len=max_len)
        if stepper is not None:
            return stepper
    return ModelStepper(model, encoder_input_ids, use_cache=use_cache)
