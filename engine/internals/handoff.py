"""The decode session's own keys and values, handed to the Inside view's reader (issue 54).

A run's session keeps every position's keys and values while it generates (its stepper's
cache: ``engine.step.kvcache``). The reader (``engine.internals.reader``) needs the same
tensors for the positions before a clicked token; reading them again costs a pass over the
whole path (1.7 s for 512 tokens of SmolLM2 on a 2-core CPU), where taking the session's costs
a copy (23 MB, a few milliseconds). The copy is the session's: a later branch or undo rewrites
the cache in place, so nothing is shared.

Handed over only where the cache holds every layer's every position in transformers' order
(keys after the rotary embedding, one row per key-value head): the fast path's ``StaticKV``
(``[layers, kv_heads, capacity, head_dim]``, CPU and GPU) and ``model.forward``'s
``DynamicCache`` while no sliding window has dropped a key. Beam search, contrastive search and
encoder-decoder sessions hand nothing (the reader then reads the positions itself)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch import Tensor

from engine.step.kvcache import DynamicKV, StaticKV, common_prefix

Layers = list[tuple[Tensor, Tensor]]  # per layer: keys and values, [1, kv_heads, n, head_dim]


def handed_keys(session: Any, model: Any, ids: Sequence[int]) -> tuple[int, Layers] | None:
    """How many leading positions of ``ids`` the session's cache holds, and a copy of their
    keys and values per layer; None where it holds none it can hand over (another model,
    another path, a cache of another kind)."""
    stepper = getattr(session, "stepper", None)
    cache = getattr(stepper, "cache", None)
    if cache is None or getattr(stepper, "model", None) is not model:
        return None
    n = common_prefix(cache.ids, ids)
    if n == 0:
        return None
    if isinstance(cache, StaticKV):
        return _static(cache, n)
    if isinstance(cache, DynamicKV):
        return _dynamic(cache, n)
    return None


def _static(cache: StaticKV, n: int) -> tuple[int, Layers] | None:
    k, v = cache.k, cache.v
    if k is None or v is None or k.shape[2] < n:
        return None
    return n, [(k[i, :, :n][None].clone(), v[i, :, :n][None].clone()) for i in range(k.shape[0])]


def _dynamic(cache: DynamicKV, n: int) -> tuple[int, Layers] | None:
    store = cache.store
    if hasattr(store, "self_attention_cache"):  # an encoder-decoder's pair of caches
        return None
    layers: Layers = []
    for layer in getattr(store, "layers", ()):
        keys, values = getattr(layer, "keys", None), getattr(layer, "values", None)
        if not isinstance(keys, Tensor) or not isinstance(values, Tensor):
            return None
        if keys.dim() != 4 or keys.shape[0] != 1 or keys.shape[-2] != len(cache.ids):
            return None  # a sliding window dropped keys, or a batch: not the path's positions
        layers.append((keys[:, :, :n].clone(), values[:, :, :n].clone()))
    return (n, layers) if layers else None
