"""One teacher-forced forward pass over a token path, read by hooks (nnsight / TransformerLens
style): the residual stream before each block, after each sub-block and before the final norm,
and, when asked, the attention of one query position. Every view of a step is computed from
this one pass; nothing re-runs the model layer by layer."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from engine.errors import InternalsUnavailable
from engine.internals.anatomy import Anatomy

# The attention of a query is read from the model's eager attention, which holds a [heads, T, T]
# matrix per layer while it runs; rollout keeps one [T, T] matrix per layer. Longer paths show
# the lens and the logit attribution without them, and say so.
ATTENTION_MAX_TOKENS = 1024


@dataclass(frozen=True)
class TokenPath:
    """The tokens a run (a branch, a scored text) is made of.

    Decoder-only: ``context`` is the prompt's ids and the model reads ``context + tokens``.
    Encoder-decoder: ``context`` is the encoder's input and the decoder reads
    ``(start, *tokens)``."""

    context: tuple[int, ...]
    tokens: tuple[int, ...]
    start: int | None = None  # the decoder's start id (encoder-decoder only)

    @property
    def encoder_decoder(self) -> bool:
        return self.start is not None

    @property
    def ids(self) -> tuple[int, ...]:
        """What the decoder reads."""
        if self.start is not None:
            return (self.start, *self.tokens)
        return (*self.context, *self.tokens)

    @property
    def offset(self) -> int:
        """Position (in ``ids``) of the first token of ``tokens``."""
        return 1 if self.start is not None else len(self.context)

    def query(self, step: int) -> int:
        """The position whose output is token ``step`` (0-based among ``tokens``)."""
        if not 0 <= step < len(self.tokens):
            raise InternalsUnavailable(
                f"There is no token {step + 1}: the path has {len(self.tokens)}."
            )
        q = self.offset + step - 1
        if q < 0:
            raise InternalsUnavailable(
                "The first token has no context before it, so no position of the model "
                "predicts it: give the text a context, or pick a later token."
            )
        return q


@dataclass
class Trace:
    """What one pass read, at the kept positions ``keep`` (indices into the path's ids)."""

    keep: Tensor  # [P]
    resid: Tensor  # [L + 1, P, d]: before each block, then the final norm's input
    mids: Tensor  # [L, S - 1, P, d]: after each sub-block but the last
    query: int | None = None
    heads: Tensor | None = None  # [L, H, q + 1]: each head's attention from the query
    means: list[Tensor] = field(default_factory=list)  # per layer [q + 1, q + 1], heads averaged
    cross: Tensor | None = None  # [L, H, E]: cross-attention from the query (encoder-decoder)


@contextmanager
def eager_attention(model: nn.Module) -> Iterator[None]:
    """The model's eager attention while the block runs (the fused kernels keep no weights);
    the implementation it had afterwards. Jobs run one at a time, so nothing else runs the model
    meanwhile."""
    before = getattr(model.config, "_attn_implementation", None)
    if before in (None, "eager"):
        yield
        return
    model.set_attn_implementation("eager")
    try:
        yield
    finally:
        model.set_attn_implementation(before)


def _hidden(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Tensor:
    return args[0] if args else kwargs["hidden_states"]


def _weights(output: Any) -> Tensor:
    """An attention module's weights: the last item of its output (Llama, GPT-2: (out, w);
    T5: (out, position_bias, w))."""
    w = output[-1] if isinstance(output, tuple) else None
    if not isinstance(w, Tensor) or w.dim() != 4:
        raise InternalsUnavailable("This model's attention module does not return its weights.")
    return w


class _Recorder:
    """The hooks of one pass and what they read."""

    def __init__(
        self, an: Anatomy, keep: Tensor, query: int | None, rollout: bool, mids: bool,
        row: int | None = None,
    ) -> None:  # fmt: skip
        self.an, self.keep, self.query, self.rollout = an, keep, query, rollout
        self.read_mids = mids
        # the query's row in the weights: its position in a full pass, 0 in a one-token pass
        # over the cached keys (engine.internals.reader)
        self.row = query if row is None else row
        n = an.layers
        self.resid: list[Tensor | None] = [None] * (n + 1)
        self.mids: list[list[Tensor | None]] = [[None] * len(m) for m in an.mids]
        self.heads: list[Tensor | None] = [None] * n
        self.cross: list[Tensor | None] = [None] * n
        self.means: list[Tensor] = []
        self.handles: list[Any] = []

    def _pick(self, h: Tensor) -> Tensor:
        return h[0].index_select(0, self.keep)

    def install(self) -> None:
        an, add = self.an, self.handles.append
        for i, block in enumerate(an.blocks):
            add(block.register_forward_pre_hook(self._resid_hook(i), with_kwargs=True))
            for j, mid in enumerate(an.mids[i] if self.read_mids else ()):
                add(mid.register_forward_pre_hook(self._mid_hook(i, j), with_kwargs=True))
        add(an.final_norm.register_forward_pre_hook(self._resid_hook(an.layers), with_kwargs=True))
        if self.query is None:
            return
        for i, attn in enumerate(an.attention):
            add(attn.register_forward_hook(self._attn_hook(i)))
        for i, attn in enumerate(an.cross):
            add(attn.register_forward_hook(self._cross_hook(i)))

    def remove(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles.clear()

    def _resid_hook(self, i: int) -> Any:
        def hook(_m: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            self.resid[i] = self._pick(_hidden(args, kwargs))

        return hook

    def _mid_hook(self, i: int, j: int) -> Any:
        def hook(_m: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            self.mids[i][j] = self._pick(_hidden(args, kwargs))

        return hook

    def _attn_hook(self, i: int) -> Any:
        def hook(_m: nn.Module, _args: Any, output: Any) -> None:
            w = _weights(output)[0]  # [H, T, T]
            q = self.query
            assert q is not None
            self.heads[i] = w[:, self.row, : q + 1].float()
            if self.rollout:
                self.means.append(w[:, : q + 1, : q + 1].float().mean(0))

        return hook

    def _cross_hook(self, i: int) -> Any:
        def hook(_m: nn.Module, _args: Any, output: Any) -> None:
            q = self.query
            assert q is not None
            self.cross[i] = _weights(output)[0, :, self.row, :].float()

        return hook


def model_inputs(an: Anatomy, path: TokenPath, device: torch.device) -> dict[str, Tensor]:
    """The forward's keyword arguments for ``path``."""
    ids = torch.tensor([path.ids], device=device)
    if an.encoder_decoder:
        enc = torch.tensor([path.context], device=device)
        return {"input_ids": enc, "attention_mask": torch.ones_like(enc), "decoder_input_ids": ids}
    # the logits are the lens's own business (the head on the kept positions): keep one
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "logits_to_keep": 1}


def capture(
    an: Anatomy,
    path: TokenPath,
    keep: Tensor,
    query: int | None = None,
    rollout: bool = True,
    mids: bool = True,
) -> Trace:
    """Run ``path`` once; read the residual stream at positions ``keep`` (with ``mids``, after
    each sub-block too) and, with ``query``, that position's attention in every layer (eager
    attention; with ``rollout`` its head-averaged matrices too)."""
    if an.encoder_decoder and not path.context:
        raise InternalsUnavailable("The encoder's input is empty.")
    dev = next(an.model.parameters()).device
    keep = keep.to(dev)
    rec = _Recorder(an, keep, query, rollout, mids)
    rec.install()
    eager = eager_attention(an.model) if query is not None else _nothing()
    try:
        with torch.inference_mode(), eager:
            an.model(**model_inputs(an, path, dev))
    finally:
        rec.remove()
    missing = any(r is None for r in rec.resid)
    if mids and any(m is None for ms in rec.mids for m in ms):
        missing = True
    if missing:
        raise InternalsUnavailable("The model did not pass through every block it declares.")
    resid = torch.stack(rec.resid)  # type: ignore[arg-type]
    mid = torch.stack([torch.stack(ms) for ms in rec.mids]) if mids else resid[:0]  # type: ignore[misc]
    trace = Trace(keep=keep, resid=resid, mids=mid, query=query)
    if query is not None:
        trace.heads = torch.stack(rec.heads)  # type: ignore[arg-type]
        trace.means = rec.means
        if an.cross:
            trace.cross = torch.stack(rec.cross)  # type: ignore[arg-type]
    return trace


@contextmanager
def _nothing() -> Iterator[None]:
    yield
