"""Inside one step, and the decision strip of a whole path: the entry points the window, the
CLI and the benchmark call. Each reads the model once (``trace.capture``) and returns plain
records (``internals.records``)."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch
from torch import Tensor

from engine.errors import InternalsUnavailable
from engine.internals.anatomy import Anatomy, anatomy
from engine.internals.attention import rollout_row
from engine.internals.dla import split_logit_difference
from engine.internals.lens import decision_layer, kl_bits, lens_logprobs, strip_scan
from engine.internals.records import (
    AttentionView,
    DecisionStrip,
    LensView,
    LogitAttribution,
    StepInside,
    Token,
)
from engine.internals.trace import ATTENTION_MAX_TOKENS, TokenPath, capture
from engine.models.text import TokenTable

LAYER_TOP = 5  # the lens's top tokens listed per layer
STRIP_WINDOW = 2048  # positions whose residuals one strip pass keeps (memory: L x P x d floats)


def path_for(bundle: Any, context: list[int] | tuple[int, ...], tokens: Any) -> TokenPath:
    """The path of a run on ``bundle``: its context (prompt ids, or the encoder's input) and its
    tokens (ids, or Step records). Refused when it cannot be read inside."""
    ids = tuple(int(getattr(t, "token_id", t)) for t in tokens)
    start = None
    if bundle.is_encoder_decoder:
        start = int(bundle.model.config.decoder_start_token_id or 0)
    path = TokenPath(tuple(int(i) for i in context), ids, start)
    limit = bundle.context_length
    if limit is not None and len(path.ids) > limit:
        raise InternalsUnavailable(
            f"The path has {len(path.ids)} tokens, more than the model's context of {limit}."
        )
    return path


def _texts(table: TokenTable, ids: Any) -> tuple[Token, ...]:
    return tuple((int(i), table(int(i))) for i in ids)


@torch.inference_mode()
def inspect_step(
    bundle: Any, path: TokenPath, step: int, top_n: int = 10, attention: bool = True
) -> StepInside:
    """The lens, the attention and the direct logit attribution of token ``step`` of ``path``,
    from one pass over the whole path (``reader.PathReader`` reads a step of a path it has
    read before from one more position)."""
    an = anatomy(bundle.model)
    started = time.perf_counter()
    q = path.query(step)
    read_attention, notes = attention_fits(q, attention)
    trace = capture(an, path, torch.tensor([q]), query=q if read_attention else None)
    view = None
    if read_attention:
        assert trace.heads is not None
        rollout = rollout_row(trace.means) if trace.means else None
        view = (trace.heads, rollout, trace.cross)
    return assemble(bundle, an, path, step, (trace.resid[:, 0], trace.mids[:, :, 0]), view,
                    notes, started, top_n)  # fmt: skip


def attention_fits(q: int, attention: bool) -> tuple[bool, list[str]]:
    """Whether the attention of position ``q`` is read, and the note saying why not."""
    if attention and q + 1 > ATTENTION_MAX_TOKENS:
        return False, [f"Attention is shown for positions up to {ATTENTION_MAX_TOKENS} tokens; "
                       f"this token is read at position {q + 1}."]  # fmt: skip
    return attention, []


def assemble(
    bundle: Any,
    an: Anatomy,
    path: TokenPath,
    step: int,
    read: tuple[Tensor, Tensor],
    attention: tuple[Tensor, Tensor | None, Tensor | None] | None,
    notes: list[str],
    started: float,
    top_n: int = 10,
) -> StepInside:
    """The step's records from what a pass read at its position: ``read`` = (residual stream
    [L + 1, d], after each sub-block [L, S - 1, d]); ``attention`` = (each head's weights
    [L, H, q + 1], the rollout row [q + 1] or None, cross-attention or None)."""
    q, token = path.query(step), path.tokens[step]
    table = TokenTable(bundle.tokenizer)
    resid, mids = read
    logp = lens_logprobs(an, resid)  # [L + 1, V]
    lens = _lens_view(logp, token, top_n, table)
    dla = _attribution(an, resid, mids, logp[-1], token, table)
    view = None
    if attention is not None:
        heads, rollout, cross = attention
        view = _attention_view(an, heads, rollout, cross, path, q, table)
    return StepInside(step, q, (token, table(token)), lens, view, dla,
                      time.perf_counter() - started, tuple(notes))  # fmt: skip


def _lens_view(logp: Tensor, token: int, top_n: int, table: TokenTable) -> LensView:
    n_layers = logp.shape[0] - 1
    top = torch.topk(logp[-1], min(top_n, logp.shape[1])).indices.tolist()
    if token not in top:
        top.append(token)
    first = logp.argmax(-1)  # [L + 1]: the top-1 the decision layer and the strip use
    layer_top = tuple(
        tuple((j, table(j), float(np.exp(v))) for v, j in _ranked(row, int(a)))
        for row, a in zip(logp, first.tolist(), strict=True)
    )  # fmt: skip
    top1 = first == token
    return LensView(
        layers=n_layers, candidates=_texts(table, top), chosen=top.index(token),
        logprobs=logp[:, top].cpu().numpy(),
        layer_top=layer_top, kl_bits=kl_bits(logp).cpu().numpy(),
        decision_layer=decision_layer(top1),
    )  # fmt: skip


def _ranked(row: Tensor, first: int) -> list[tuple[float, int]]:
    """A layer's top ``LAYER_TOP`` (log-probability, id), best first, exact ties broken as
    argmax breaks them (the lower id first): the grid's top-1 is then the token the decision
    layer counts (topk alone may order a tie either way, so in bfloat16 the two disagreed)."""
    k = min(LAYER_TOP, row.shape[0])
    vals, idx = torch.topk(row, k)
    pairs = sorted(zip(vals.tolist(), idx.tolist(), strict=True), key=lambda t: (-t[0], t[1]))
    if pairs[0][1] != first:  # more ties than listed: argmax's own comes first
        pairs = [(float(row[first]), first)] + [p for p in pairs if p[1] != first][: k - 1]
    return pairs


def _attribution(
    an: Anatomy, resid: Tensor, mids: Tensor, final: Tensor, token: int, table: TokenTable
) -> LogitAttribution:
    """The chosen token against the runner-up: the output's best other token."""
    order = torch.topk(final, 2).indices.tolist()
    rival = order[1] if order[0] == token else order[0]
    blocks, embedding, bias = split_logit_difference(an, resid, mids, token, rival)
    raw = an.raw_logits(resid[-1]).float()
    return LogitAttribution(
        token=(token, table(token)), rival=(rival, table(rival)), sublayers=an.sublayers,
        blocks=blocks.cpu().numpy(), embedding=embedding, bias=bias,
        total=float(raw[token] - raw[rival]),
    )  # fmt: skip


def _attention_view(
    an: Anatomy, heads: Tensor, rollout: Tensor | None, cross: Tensor | None, path: TokenPath,
    q: int, table: TokenTable,
) -> AttentionView:  # fmt: skip
    return AttentionView(
        sources=_texts(table, path.ids[: q + 1]), heads=heads.cpu().numpy(),
        rollout=rollout.cpu().numpy() if rollout is not None else None,
        cross_sources=_texts(table, path.context) if an.encoder_decoder else (),
        cross=cross.cpu().numpy() if cross is not None else None,
    )  # fmt: skip


@torch.inference_mode()
def decision_strip(
    bundle: Any, path: TokenPath, first: int = 0, screen: bool | None = None
) -> DecisionStrip:
    """The decision layer of every token of ``path`` from ``first`` on, from one pass per
    ``STRIP_WINDOW`` positions (one pass for any run that fits the window); ``screen``: the
    bf16 screen where it pays (None), or forced on or off."""
    an = anatomy(bundle.model)
    started = time.perf_counter()
    first = max(first, 1 - path.offset, 0)  # a token with no context before it has no position
    decided: list[int | None] = []
    for lo in range(first, len(path.tokens), STRIP_WINDOW):
        steps = range(lo, min(lo + STRIP_WINDOW, len(path.tokens)))
        keep = torch.tensor([path.offset + k - 1 for k in steps])
        end = int(keep[-1]) + 1  # the pass reads the path up to the window's last position
        part = TokenPath(path.context, path.tokens[: end - path.offset], path.start)
        trace = capture(an, part, keep, mids=False)
        chosen = torch.tensor([path.tokens[k] for k in steps], device=trace.resid.device)
        decided.extend(strip_scan(an, trace.resid, chosen, screen))
    return DecisionStrip(an.layers, first, tuple(decided), time.perf_counter() - started,
                         getattr(bundle, "name", ""))  # fmt: skip
