"""Growing a RunTree by probability: from a node, to depth D, at most K children per node,
keeping children whose probability (raw or after the sampler) passes a min-prob cutoff and a
cumulative top-p (the child that crosses p is kept, so top-p 0 keeps the likeliest, as the
sampler's top-p does). ``expand`` runs ONE batched forward per level (all frontier sequences of
a level have the same length, so no padding); ``expand_node_by_node`` is the reference, one
forward per expanded node. Both build the same tree; ``ExpandStats.forwards`` counts passes.

Bounded before it starts: at most ``ExpandOptions.max_nodes`` new nodes (and never past the
tree file's ``MAX_NODES``), breadth first, so the budget keeps the likeliest levels whole. An
end-of-text token ends its branch (nothing grows under ``<|im_end|>``), and so does a full
context."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from engine.tree.model import RunTree
from engine.tree.node import MAX_NODES
from engine.tree.options import ExpandOptions  # its home before; torch-free now


@dataclass
class ExpandStats:
    forwards: int = 0  # model forward passes
    added: int = 0  # nodes added (existing children are reused, not counted)
    stopped: bool = False
    budget: int = 0  # the most nodes it could add (the options' max_nodes, the file bound)
    limited: bool = False  # it stopped at the budget: frontier nodes were left unexpanded

    def describe(self) -> str:
        """One line: what was added, and what bound stopped it when one did."""
        why = f"; stopped at the node budget of {self.budget:,}" if self.limited else ""
        return f"{self.added:,} nodes in {self.forwards} forward passes{why}"


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
          decode: Callable[[int], str], room: int) -> list[int]:  # fmt: skip
    """Add the children of ``nid`` from one distribution, at most ``room``; their ids."""
    raw = logp.exp()
    rank_by = after if opts.use_sampler else raw
    k = max(opts.max_children, opts.top_n)
    vals, idx = torch.topk(rank_by, min(k, rank_by.numel()))
    ent = float(-(raw * logp.clamp_min(-1e30)).nan_to_num().sum()) / math.log(2)
    top = [(int(t), decode(int(t)), float(raw[t]), float(after[t])) for t in idx[: opts.top_n]]
    kids: list[int] = []
    cum = 0.0
    width = min(opts.max_children, room)
    for v, t in zip(vals.tolist()[:width], idx.tolist()[:width], strict=True):
        if v < opts.min_prob or v <= 0.0 or (opts.top_p < 1.0 and kids and cum >= opts.top_p):
            break
        cum += v
        kids.append(tree.add_child(nid, t, decode(t), float(raw[t]), float(after[t]),
                                   float(logp[t]), ent, top))  # fmt: skip
    return kids


def _ends(bundle: Any, tree: RunTree, nid: int) -> bool:
    """A node that ends its branch: an end-of-text token, or a full context."""
    node = tree.nodes[nid]
    if nid != 0 and node.token_id in tuple(bundle.eos_token_ids):
        return True
    limit = getattr(bundle, "context_length", None)
    return limit is not None and len(tree.prompt_ids) + node.depth >= limit


def _budget(tree: RunTree, opts: ExpandOptions) -> int:
    return max(0, min(opts.max_nodes, MAX_NODES - len(tree.nodes)))


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
    stats, frontier = ExpandStats(budget=_budget(tree, opts)), [nid]
    before = len(tree.nodes)
    for level in range(opts.depth):
        nxt: list[int] = []
        frontier = [n for n in frontier if not _ends(bundle, tree, n)]
        for i in range(0, len(frontier), max_batch):
            if stop is not None and stop():
                stats.stopped = True
                return _done(stats, tree, before)
            if len(tree.nodes) - before >= stats.budget:
                stats.limited = True
                return _done(stats, tree, before)
            part = frontier[i : i + max_batch]
            seqs = [tree.path_ids(n) for n in part]
            logits = next_logits(bundle, tree.prompt_ids, seqs)
            stats.forwards += 1
            logp, after = _distributions(bundle, tree, logits, seqs, chain)
            for row, n in enumerate(part):
                room = stats.budget - (len(tree.nodes) - before)
                stats.limited = stats.limited or room <= 0
                nxt += _grow(tree, n, logp[row], after[row], opts, decode, room)
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
    stats, frontier = ExpandStats(budget=_budget(tree, opts)), [nid]
    before = len(tree.nodes)
    for _ in range(opts.depth):
        nxt: list[int] = []
        for n in frontier:
            room = stats.budget - (len(tree.nodes) - before)
            if _ends(bundle, tree, n) or room <= 0:
                stats.limited = stats.limited or room <= 0
                continue
            seq = [tree.path_ids(n)]
            logits = next_logits(bundle, tree.prompt_ids, seq)
            stats.forwards += 1
            logp, after = _distributions(bundle, tree, logits, seq, chain)
            nxt += _grow(tree, n, logp[0], after[0], opts, decode, room)
        frontier = nxt
    return _done(stats, tree, before)


def _done(stats: ExpandStats, tree: RunTree, before: int) -> ExpandStats:
    stats.added = len(tree.nodes) - before
    return stats
