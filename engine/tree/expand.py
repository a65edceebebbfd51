"""Growing a RunTree by probability: from a node, to depth D, at most K children per node,
keeping children whose probability (raw or after the sampler) passes a min-prob cutoff and a
cumulative top-p. ``expand`` runs ONE batched forward per level (all frontier sequences of a
level have the same length, so no padding); ``expand_node_by_node`` is the reference, one
forward per expanded node. Both build the same tree; ``ExpandStats.forwards`` counts passes."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from engine.tree.model import RunTree
from engine.tree.options import ExpandOptions  # its home before; torch-free now


@dataclass
class ExpandStats:
    forwards: int = 0  # model forward passes
    added: int = 0  # nodes added (existing children are reused, not counted)
    stopped: bool = False


def next_logits(bundle: Any, prompt_ids: list[int], seqs: list[list[int]]) -> torch.Tensor:
    """Logits (fp32, [batch, vocab]) after prompt + each of ``seqs`` (all of one length), in ONE
    forward pass. Encoder-decoder: the prompt is the encoder input, seqs follow the start."""
    model, dev = bundle.model, bundle.device
    with torch.inference_mode():
        if bundle.is_encoder_decoder:
            start = model.config.decoder_start_token_id
            dec = torch.tensor([[start, *s] for s in seqs], device=dev)
            enc = torch.tensor([prompt_ids], device=dev).expand(len(seqs), -1)
            out = model(input_ids=enc, attention_mask=torch.ones_like(enc), decoder_input_ids=dec)
        else:
            ids = torch.tensor([[*prompt_ids, *s] for s in seqs], device=dev)
            out = model(input_ids=ids, attention_mask=torch.ones_like(ids))
    return out.logits[:, -1, :].float()


def _distributions(bundle: Any, tree: RunTree, logits: torch.Tensor, seqs: list[list[int]],
                   chain: Any) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """Raw log-probabilities and after-sampler probabilities, [batch, vocab] each."""
    logp = F.log_softmax(logits, dim=-1)
    if chain is None:
        return logp, logp.exp()
    ids = torch.tensor([[*tree.prompt_ids, *s] for s in seqs], device=logits.device)
    chain.prepare(None)
    after, _ = chain.probs(ids, logits.clone())
    return logp, after


def _grow(tree: RunTree, nid: int, logp: torch.Tensor, after: torch.Tensor, opts: ExpandOptions,
          decode: Callable[[int], str]) -> list[int]:  # fmt: skip
    """Add the children of ``nid`` from one distribution; returns their ids."""
    raw = logp.exp()
    rank_by = after if opts.use_sampler else raw
    k = max(opts.max_children, opts.top_n)
    vals, idx = torch.topk(rank_by, min(k, rank_by.numel()))
    ent = float(-(raw * logp.clamp_min(-1e30)).nan_to_num().sum()) / math.log(2)
    top = [(int(t), decode(int(t)), float(raw[t]), float(after[t])) for t in idx[: opts.top_n]]
    kids, cum = [], 0.0
    for v, t in zip(
        vals.tolist()[: opts.max_children], idx.tolist()[: opts.max_children], strict=True
    ):
        if v < opts.min_prob or v <= 0.0 or (opts.top_p < 1.0 and cum >= opts.top_p):
            break
        cum += v
        kids.append(tree.add_child(nid, t, decode(t), float(raw[t]), float(after[t]),
                                   float(logp[t]), ent, top))  # fmt: skip
    return kids


def _setup(bundle: Any, tree: RunTree, settings: Any) -> tuple[Any, Callable[[int], str]]:
    chain = None
    if settings is not None:
        from engine.sampling.build import build_chain

        chain = build_chain(settings, len(tree.prompt_ids), bundle.eos_token_ids,
                            tokenizer=bundle.tokenizer)  # fmt: skip
    tok = bundle.tokenizer
    return chain, lambda t: tok.decode([t], skip_special_tokens=False)


def expand(bundle: Any, tree: RunTree, nid: int, opts: ExpandOptions, settings: Any = None,
           progress: Callable[[int, int], None] | None = None,
           stop: Callable[[], bool] | None = None, max_batch: int = 64) -> ExpandStats:  # fmt: skip
    """Batched: the whole frontier of a level in one forward (split in ``max_batch`` rows)."""
    chain, decode = _setup(bundle, tree, settings)
    stats, frontier = ExpandStats(), [nid]
    before = len(tree.nodes)
    for level in range(opts.depth):
        nxt: list[int] = []
        for i in range(0, len(frontier), max_batch):
            if stop is not None and stop():
                stats.stopped = True
                return _done(stats, tree, before)
            part = frontier[i : i + max_batch]
            seqs = [tree.path_ids(n) for n in part]
            logits = next_logits(bundle, tree.prompt_ids, seqs)
            stats.forwards += 1
            logp, after = _distributions(bundle, tree, logits, seqs, chain)
            for row, n in enumerate(part):
                nxt += _grow(tree, n, logp[row], after[row], opts, decode)
        frontier = nxt
        if progress is not None:
            progress(level + 1, opts.depth)
        if not frontier:
            break
    return _done(stats, tree, before)


def expand_node_by_node(bundle: Any, tree: RunTree, nid: int, opts: ExpandOptions,
                        settings: Any = None) -> ExpandStats:  # fmt: skip
    """The reference: one forward per expanded node, breadth first (same order as ``expand``)."""
    chain, decode = _setup(bundle, tree, settings)
    stats, frontier = ExpandStats(), [nid]
    before = len(tree.nodes)
    for _ in range(opts.depth):
        nxt: list[int] = []
        for n in frontier:
            seq = [tree.path_ids(n)]
            logits = next_logits(bundle, tree.prompt_ids, seq)
            stats.forwards += 1
            logp, after = _distributions(bundle, tree, logits, seq, chain)
            nxt += _grow(tree, n, logp[0], after[0], opts, decode)
        frontier = nxt
    return _done(stats, tree, before)


def _done(stats: ExpandStats, tree: RunTree, before: int) -> ExpandStats:
    stats.added = len(tree.nodes) - before
    return stats
