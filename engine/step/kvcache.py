"""KV caches as explicit objects: each knows which token ids it holds, position by position,
so a stepper can keep the common prefix of a changed sequence (a branch, rejected drafts, an
undo) and feed only the rest. Cropping forgets positions; nothing is recomputed."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Sequence
from typing import Any

import torch


@functools.cache
def _cache_name(forward_class: type) -> str:
    params = inspect.signature(forward_class.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def cache_kwargs(model: Any, cache: Any) -> dict[str, Any]:
    """The keyword that hands ``cache`` to ``model``'s forward: transformers 5.24 renamed
    ``past_key_values`` to ``cache`` (the old name warns until 5.40); older 5.x only know the
    old one (the GPU machine has 5.17)."""
    return {_cache_name(type(model)): cache}


def returned_cache(out: Any) -> Any:
    """The cache a forward pass returned, under either name."""
    keys = out.keys()
    return out["cache"] if "cache" in keys else out.get("past_key_values")


def _as_list(ids: Sequence[int]) -> list[int]:
    """``ids`` as a list, copied only where it is not one (a decode step compares the cached
    ids four times a token)."""
    return ids if isinstance(ids, list) else list(ids)


def common_prefix(cached: Sequence[int], ids: Sequence[int]) -> int:
    """How many leading ids two sequences share (the cache positions that can be kept)."""
    n = len(cached)
    if _as_list(ids[:n]) == _as_list(cached):  # the usual case: the sequence only grew
        return n
    for i, (a, b) in enumerate(zip(cached, ids, strict=False)):
        if a != b:
            return i
    return min(n, len(ids))


class KVCache:
    """The ids whose keys and values are cached. Subclasses hold the tensors."""

    def __init__(self) -> None:
        self.ids: list[int] = []

    def __len__(self) -> int:
        return len(self.ids)

    def reusable(self, ids: Sequence[int], keep: int = 1) -> int:
        """Cached positions still valid for ``ids`` when its last ``keep`` must be fed anew
        (their logits are wanted)."""
        return min(common_prefix(self.ids, ids), len(ids) - keep)

    def crop(self, length: int) -> None:
        """Forget the positions at and after ``length``."""
        del self.ids[max(0, length) :]

    def take(
        self, ids: Sequence[int], keep: int, limit: int, what: str = "the model's context"
    ) -> tuple[int, list[int]]:
        """A stepper is about to run ``ids`` for the logits of their last ``keep``: check them
        (against ``limit``, named ``what`` in the message), forget the cached positions that
        no longer match, and return the first position to feed and the ids to feed."""
        if len(ids) < keep:
            raise ValueError(f"need at least {keep} ids, got {len(ids)}")
        if len(ids) > limit:
            raise ValueError(f"{len(ids)} tokens exceed {what} of {limit}")
        self.crop(self.reusable(ids, keep))
        start = len(self)
        return start, list(ids[start:])

    def extend(self, new: Sequence[int]) -> None:
        self.ids.extend(new)


class DynamicKV(KVCache):
    """transformers' growing cache (``DynamicCache``, or a pair for encoder-decoder models)."""

    def __init__(self, model: torch.nn.Module, encoder_decoder: bool) -> None:
        super().__init__()
        self._fresh = lambda: self._new_store(model, encoder_decoder)
        self.store: Any = self._fresh()

    @staticmethod
    def _new_store(model: torch.nn.Module, encoder_decoder: bool) -> Any:
        from transformers import DynamicCache, EncoderDecoderCache

        if encoder_decoder:
            return EncoderDecoderCache(DynamicCache(), DynamicCache())
        return DynamicCache(config=model.config)

    def _windows_full(self) -> bool:
        """Whether a sliding-window layer has dropped keys already (transformers keeps only
        the last window there), so that the cache cannot go back."""
        store = getattr(self.store, "self_attention_cache", self.store)
        return any(
            getattr(layer, "sliding_window", None)
            and not getattr(layer, "record_past", False)
            and layer.get_seq_length() >= layer.sliding_window
            for layer in getattr(store, "layers", ())
        )

    def reusable(self, ids: Sequence[int], keep: int = 1) -> int:
        n = super().reusable(ids, keep)
        return 0 if n < len(self.ids) and self._windows_full() else n

    def crop(self, length: int) -> None:
        length = max(0, length)
        if len(self.ids) > length:
            try:
                # transformers 5: crop() takes the (negative) number of positions to remove.
                self.store.crop(length - len(self.ids))
            except RuntimeError:
                # a sliding-window layer past its window cannot go back (Mistral, Gemma,
                # Qwen2 with windows on model.forward): start again; the stepper then feeds
                # every id, so a branch costs a full pass but is right
                self.store, length = self._fresh(), 0
            super().crop(length)


class StaticKV(KVCache):
    """Keys and values preallocated as ``[layers, kv_heads, capacity, head_dim]`` and written
    in place. Cropping only moves the end; running out of room copies into a buffer twice as
    large (up to ``max_len``). ``buckets``: capacities are ``min_capacity`` times a power of
    two (or ``max_len``), so a static step sees few distinct shapes (one compile each)."""

    def __init__(
        self,
        layers: int,
        kv_heads: int,
        head_dim: int,
        dtype: torch.dtype,
        device: torch.device,
        max_len: int,
        min_capacity: int = 256,
        buckets: bool = False,
    ) -> None:
        super().__init__()
        self.shape = (layers, kv_heads, head_dim)
        self.dtype, self.device = dtype, device
        self.max_len = max_len
        self.min_capacity = min_capacity
        self.buckets = buckets
        self.k: torch.Tensor | None = None
        self.v: torch.Tensor | None = None

    @property
    def capacity(self) -> int:
        return 0 if self.k is None else self.k.shape[2]

    def ensure(self, needed: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Room for ``needed`` positions; returns the key and value buffers."""
        have = self.capacity
        if needed > have or self.k is None or self.v is None:
            capacity = max(needed, 2 * have, self.min_capacity)
            if self.buckets:
                capacity = max(have, self.min_capacity)
                while capacity < needed:
                    capacity *= 2
            capacity = min(self.max_len, capacity)
            layers, kv_heads, head_dim = self.shape
            shape = (layers, kv_heads, capacity, head_dim)
            k = torch.zeros(shape, dtype=self.dtype, device=self.device)
            v = torch.zeros(shape, dtype=self.dtype, device=self.device)
            if self.k is not None and self.v is not None:
                k[:, :, :have] = self.k
                v[:, :, :have] = self.v
            self.k, self.v = k, v
        return self.k, self.v
