"""Beam search with the same rules as ``transformers.generate(num_beams=N, do_sample=False)``,
streamed as records: per step a ``BeamEvent`` (every candidate, for the tree view) and the best
running beam as ``Step`` records (with a ``Rewind`` where the best beam changed), and at the end
the best finished hypothesis and the ``BeamResult``.

Per step, over all beams: log-softmax of the logits, then the penalty stages of the settings
(repetition penalty, no-repeat-ngram, min new tokens), plus each beam's running log-probability;
the best K = max(2, 1 + #EOS) * N candidates are kept. A candidate that ends with EOS (or reaches
the length limit) and ranks in the top N becomes a finished hypothesis scored
sum_logprob / generated_length ** length_penalty; the best N unfinished candidates carry on. The
search stops when no running beam can beat the worst of N finished hypotheses (transformers'
heuristic: the running score divided by the current length), when ``early_stopping=True`` and N
hypotheses are finished, or at the limit.

The KV cache is filled once for the prompt, repeated for the N beams, and reordered after every
step (``reorder_cache``), never recomputed. The encoder of an encoder-decoder model runs once.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F

from engine.decode.base import Record, SessionBase
from engine.decode.beam_group import Advance, BeamGroup, BeamRules, Candidates
from engine.decode.measure import measure
from engine.models.device import model_device
from engine.records import (
    BEAM,
    KEEP_FULL,
    BeamEvent,
    BeamHypothesis,
    BeamNode,
    BeamResult,
    Step,
)
from engine.sampling.build import PENALTIES, build_chain
from engine.sampling.chain import Chain, apply_chain
from engine.sampling.settings import DEFAULT_SETTINGS, SamplerSettings
from engine.step.kvcache import cache_kwargs, returned_cache


@dataclass
class _Tree:
    """Where the search is: steps taken, the next node id, the sequences' length."""

    depth: int = 0
    next_id: int = 1  # 0 is the prompt
    cur_len: int = 0


class _GroupsStep(NamedTuple):
    """One step of all groups."""

    nodes: tuple[BeamNode, ...]  # every group's candidates, group after group
    candidates: list[Candidates]  # per group that took the step
    rows: list[int]  # the batch row each beam continues from (for the cache)
    running: tuple[int, ...]  # node ids that carry on


class BeamSession(SessionBase):
    """``for record in session.stream(): ...`` then ``session.result``; or ``session.run()``."""

    method = BEAM
    num_beam_groups = 1  # plain beam search is one group; group beam search sets more
    sampler: Chain  # the penalty stages, run over every beam by apply_chain (_chain_for)

    def __init__(
        self,
        model: torch.nn.Module,
        prompt_ids: Sequence[int],
        settings: SamplerSettings = DEFAULT_SETTINGS,
        *,
        num_beams: int = 4,
        length_penalty: float = 1.0,
        early_stopping: bool | str = False,
        tokenizer: Any | None = None,
        eos_token_ids: int | Iterable[int] | None = None,
        top_n: int = 20,
        max_context: int | None = None,
        keep_candidates: int | None = KEEP_FULL,
    ) -> None:
        if num_beams < 1:
            raise ValueError("num_beams must be >= 1")
        if early_stopping not in (True, False, "never"):
            raise ValueError("early_stopping must be True, False or 'never'")
        super().__init__(
            model, prompt_ids, settings, tokenizer=tokenizer, eos_token_ids=eos_token_ids,
            top_n=top_n, max_context=max_context, keep_candidates=keep_candidates,
        )  # fmt: skip
        self.num_beams = num_beams
        self.length_penalty = float(length_penalty)
        self.early_stopping = early_stopping
        self.device = model_device(model)
        self.result: BeamResult | None = None
        self.forward_passes = 0
        self.nodes: dict[int, BeamNode] = {}
        self._node_steps: dict[int, Step] = {}  # each candidate's record (text added on output)
        self._path: list[int] = []  # node ids of the steps in ``history``
        self._search: Iterator[list[Record]] | None = None

    def _chain_for(self, settings: SamplerSettings) -> Chain:
        """Beams are ranked by log-probability: only the penalty stages apply."""
        return build_chain(
            settings, self.prompt_length, self.eos_token_ids, only=PENALTIES,
            tokenizer=self.tokenizer,
        )  # fmt: skip

    def run(self) -> BeamResult:
        for _ in self.stream():
            pass
        assert self.result is not None
        return self.result

    def _advance(self, room: int) -> list[Record]:
        if self._search is None:
            self._search = self._steps(room)
        return next(self._search)

    # -- model calls --------------------------------------------------------------------------

    def _start(self) -> tuple[torch.Tensor, Any, dict[str, Any]]:
        """First logits for every beam [N, vocab], the cache, and extra forward kwargs."""
        from transformers import DynamicCache, EncoderDecoderCache

        n, model = self.num_beams, self.model
        if self.is_encoder_decoder:
            enc = torch.tensor([self.encoder_ids], device=self.device)
            mask = torch.ones_like(enc)
            encoder_out = model.get_encoder()(input_ids=enc, attention_mask=mask, return_dict=True)
            # one encoder pass, its output shared by the N beams
            encoder_out["last_hidden_state"] = encoder_out.last_hidden_state.repeat_interleave(
                n, dim=0
            )
            extra = {"encoder_outputs": encoder_out, "attention_mask": mask.repeat_interleave(n, 0)}
            cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
            start = torch.tensor([self.ids] * n, device=self.device)
            passed = cache_kwargs(model, cache)
            out = model(decoder_input_ids=start, **passed, use_cache=True, **extra)
            self.forward_passes += 1
            return out.logits[:, -1, :].float(), returned_cache(out), extra
        cache = DynamicCache(config=model.config)
        prompt = torch.tensor([self.ids], device=self.device)
        out = model(input_ids=prompt, **cache_kwargs(model, cache), use_cache=True)
        self.forward_passes += 1
        cache = returned_cache(out)
        cache.batch_repeat_interleave(n)  # the prompt is computed once, copied for each beam
        return out.logits[:, -1, :].float().expand(n, -1), cache, {}

    def _forward(
        self, tokens: torch.Tensor, cache: Any, extra: dict[str, Any]
    ) -> tuple[torch.Tensor, Any]:
        """tokens: [N] -> logits [N, vocab]."""
        key = "decoder_input_ids" if self.is_encoder_decoder else "input_ids"
        passed = cache_kwargs(self.model, cache)
        out = self.model(**{key: tokens[:, None]}, **passed, use_cache=True, **extra)
        self.forward_passes += 1
        return out.logits[:, -1, :].float(), returned_cache(out)

    # -- the search ---------------------------------------------------------------------------

    def _groups(self) -> list[BeamGroup]:
        """The beams in ``num_beam_groups`` groups of consecutive batch rows."""
        size = self.num_beams // self.num_beam_groups
        return [
            BeamGroup(self.ids, range(g * size, (g + 1) * size), self.device)
            for g in range(self.num_beam_groups)
        ]

    def _before_group(self, index: int, chosen: list[int]) -> None:
        """Called before group ``index`` chooses, with the tokens the earlier groups' beams
        carry on with at this step; the diversity stage of group beam search reads them."""

    @torch.inference_mode()
    def _steps(self, budget: int) -> Iterator[list[Record]]:
        """One list of records per beam step; the last one ends the run."""
        started = time.perf_counter()
        max_length = len(self.ids) + budget
        if self.max_context is not None:
            max_length = min(max_length, self.max_context)
        rules = BeamRules(len(self.ids), max_length, self.length_penalty, self.early_stopping)
        groups = self._groups()
        tree = _Tree(cur_len=len(self.ids))
        tick = time.perf_counter()  # the first step's time includes reading the prompt
        logits, cache, extra = self._start()
        while True:
            step = self._step_groups(groups, logits, rules, tree)
            cache.reorder_cache(torch.tensor(step.rows, device=self.device))
            self.nodes.update((node.node_id, node) for node in step.nodes)
            finished = sorted((h for g in groups for h in g.finished), key=lambda h: -h.score)
            ends = tuple(h.node for h in finished)
            event = BeamEvent(tree.depth, step.nodes, step.running, ends)
            self._measure_nodes(step.nodes, step.candidates, time.perf_counter() - tick)
            if all(g.done for g in groups):
                hyps = tuple(
                    BeamHypothesis(tuple(h.seq[rules.prompt_len :]), h.score, h.node)
                    for h in finished
                )
                seconds = time.perf_counter() - started
                self.result = BeamResult(hyps, tree.depth, self.forward_passes, seconds)
                self.finished = True
                self.stop_reason = self.stop_reason or "max_new_tokens"
                yield [event, *self._show_path(self.result.best.node_id), self.result]
                return
            # the shown beam: the best running one over the groups still searching
            best = max((g for g in groups if not g.done), key=lambda g: float(g.scores[0]))
            yield [event, *self._show_path(best.nodes[0])]
            tick = time.perf_counter()
            last = torch.tensor([seq[-1] for g in groups for seq in g.seqs], device=self.device)
            logits, cache = self._forward(last, cache, extra)

    def _step_groups(
        self, groups: list[BeamGroup], logits: torch.Tensor, rules: BeamRules, tree: _Tree
    ) -> _GroupsStep:
        """One step of every group that is still searching, in turn. logits: [N, vocab] for
        all beams."""
        tree.depth += 1
        at_limit = tree.cur_len + 1 >= rules.max_length
        nodes: list[BeamNode] = []
        all_cands: list[Candidates] = []
        rows = list(range(self.num_beams))
        chosen: list[int] = []
        running: list[int] = []
        for index, group in enumerate(groups):
            if group.done:
                continue
            self._before_group(index, chosen)
            c = self._candidates(logits[group.rows.start : group.rows.stop], group, at_limit)
            step = group.advance(c, tree.next_id, tree.cur_len, rules)
            nodes += self._nodes(c, step, tree)
            for i, j in enumerate(step.order):
                rows[group.rows[i]] = group.rows[c.beams[j]]
            chosen += [c.tokens[j] for j in step.order]
            if not group.done:  # a group that ended carries nothing on
                running += step.running
            tree.next_id += len(c.tokens)
            all_cands.append(c)
        tree.cur_len += 1
        return _GroupsStep(tuple(nodes), all_cands, rows, tuple(running))

    def _nodes(self, c: Candidates, step: Advance, tree: _Tree) -> list[BeamNode]:
        """The tree nodes of one group's candidates."""
        return [
            BeamNode(
                node_id=tree.next_id + j,
                parent=step.parents[j],
                token_id=c.tokens[j],
                text=self.text_track.show(c.tokens[j]),
                logprob=c.logprobs[j],
                score=c.scores[j],
                depth=tree.depth,
                status=step.statuses[j],
                final_score=step.final_scores[j],
            )  # fmt: skip
            for j in range(len(c.tokens))
        ]

    def _candidates(self, logits: torch.Tensor, group: BeamGroup, at_limit: bool) -> Candidates:
        """The best K candidates over the group's beams (logits: [size, vocab]), by path score:
        the beam's score plus the token's log-probability after the penalty stages."""
        logp = F.log_softmax(logits, dim=-1)  # [size, vocab]
        ids = torch.tensor(group.seqs, device=self.device) if self.sampler.uses_ids else None
        processed, cut = apply_chain(
            self.sampler.stages, ids if ids is not None else torch.empty(0), logp, track=True
        )
        assert cut is not None  # track=True
        vocab = processed.shape[-1]
        keep = max(2, 1 + len(self.eos_token_ids)) * group.size
        total = (processed + group.scores[:, None]).reshape(-1)  # [size * vocab]
        top_scores, top_idx = self._select(total, min(keep, total.numel()))
        src, tok = top_idx // vocab, top_idx % vocab
        if at_limit:
            ends = torch.ones_like(tok, dtype=torch.bool)
        elif self.eos_token_ids:
            ends = torch.isin(tok, torch.tensor(self.eos_token_ids, device=self.device))
        else:
            ends = torch.zeros_like(tok, dtype=torch.bool)
        token_logp = processed.reshape(-1)[top_idx]
        return Candidates(
            # one copy of the few numbers the bookkeeping needs
            top_scores.tolist(), src.tolist(), tok.tolist(), ends.tolist(), token_logp.tolist(),
            logits=logits[src], probs=F.softmax(processed, dim=-1)[src], cut=cut[src],
            token_ids=tok,
        )  # fmt: skip

    def _select(self, total: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """total: [size * vocab] path scores -> the K candidates that go on (scores, indices),
        best first. Sampled beam search (``engine.decode.search``) draws them instead."""
        return torch.topk(total, k)

    def _measure_nodes(
        self, nodes: Sequence[BeamNode], cands: Sequence[Candidates], elapsed: float
    ) -> None:
        """A Step record for every candidate of this step, from its beam's distribution."""
        measured = measure(
            torch.cat([c.logits for c in cands]), torch.cat([c.probs for c in cands]),
            torch.cat([c.token_ids for c in cands]), self.top_n,
            torch.cat([c.cut for c in cands]),
        )  # fmt: skip
        fed = len(self.ids) if nodes and nodes[0].depth == 1 else 1  # the prompt's pass
        rate = self.clock.add(elapsed, fed)
        for node, m in zip(nodes, measured, strict=True):
            step = self._make_step(m, node.depth - 1, elapsed, rate, "beam", text="")
            self._node_steps[node.node_id] = replace(step, prefill=fed > 1)

    def _show_path(self, node_id: int) -> list[Record]:
        """Make ``history`` the path to ``node_id``: a Rewind where it parts from the path shown
        so far, then the new steps (with their text)."""
        path = []
        while node_id in self.nodes:
            path.append(node_id)
            node_id = self.nodes[node_id].parent
        path.reverse()
        keep = 0
        while keep < min(len(path), len(self._path)) and path[keep] == self._path[keep]:
            keep += 1
        records: list[Record] = []
        if keep < len(self.history):
            records.append(self.rewind(keep))
        for node in path[keep:]:
            step = self._node_steps[node]
            step = replace(step, text=self.text_track.push(step.token_id))
            self._add(step)
            records.append(step)
        self._path = path
        if self.history and self.history[-1].is_eos:
            self.stop_reason = "eos"
        return records


def beam_search(
    model: torch.nn.Module,
    prompt_ids: Sequence[int],
    num_beams: int = 4,
    max_new_tokens: int = 40,
    settings: SamplerSettings = DEFAULT_SETTINGS,
    **options: Any,
) -> BeamResult:
    """Run a beam search to the end and return its hypotheses, best first. ``options``: the
    penalty settings (``no_repeat_ngram_size=2``...) and ``BeamSession``'s keywords."""
    penalties = {name: options.pop(name) for name in PENALTIES if name in options}
    settings = settings.with_(max_new_tokens=max_new_tokens, **penalties)
    return BeamSession(model, prompt_ids, settings, num_beams=num_beams, **options).run()
