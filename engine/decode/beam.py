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
from dataclasses import replace
from typing import Any

import torch
import torch.nn.functional as F

from engine.decode.measure import measure
from engine.decode.session import Record, SessionBase
from engine.models.device import model_device
from engine.records import (
    BEAM,
    FINISHED,
    KEEP_FULL,
    PRUNED,
    RUNNING,
    BeamEvent,
    BeamHypothesis,
    BeamNode,
    BeamResult,
    Step,
)
from engine.sampling.build import PENALTIES, build_chain
from engine.sampling.chain import Chain, apply_chain
from engine.sampling.settings import DEFAULT_SETTINGS, SamplerSettings


class _Beams:
    """The search's state between steps."""

    def __init__(self, prompt: list[int], n: int, max_length: int, device: torch.device) -> None:
        self.prompt_len = len(prompt)
        self.max_length = max_length
        self.seqs = [list(prompt) for _ in range(n)]
        self.scores = torch.full((n,), -1e9, device=device)
        self.scores[0] = 0.0  # only beam 0 is live at first: all beams are the same prompt
        self.nodes = [0] * n  # the tree node each beam ends at (0: the prompt)
        self.finished: list[tuple[float, list[int], int]] = []  # (score, seq, node), best first
        self.improvable = True
        self.next_id, self.cur_len, self.depth = 1, self.prompt_len, 0


class BeamSession(SessionBase):
    """``for record in session.stream(): ...`` then ``session.result``; or ``session.run()``."""

    method = BEAM

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
            out = model(decoder_input_ids=start, past_key_values=cache, use_cache=True, **extra)
            self.forward_passes += 1
            return out.logits[:, -1, :].float(), out.past_key_values, extra
        cache = DynamicCache(config=model.config)
        prompt = torch.tensor([self.ids], device=self.device)
        out = model(input_ids=prompt, past_key_values=cache, use_cache=True)
        self.forward_passes += 1
        cache = out.past_key_values
        cache.batch_repeat_interleave(n)  # the prompt is computed once, copied for each beam
        return out.logits[:, -1, :].float().expand(n, -1), cache, {}

    def _forward(
        self, tokens: torch.Tensor, cache: Any, extra: dict[str, Any]
    ) -> tuple[torch.Tensor, Any]:
        """tokens: [N] -> logits [N, vocab]."""
        key = "decoder_input_ids" if self.is_encoder_decoder else "input_ids"
        out = self.model(**{key: tokens[:, None]}, past_key_values=cache, use_cache=True, **extra)
        self.forward_passes += 1
        return out.logits[:, -1, :].float(), out.past_key_values

    # -- the search ---------------------------------------------------------------------------

    @torch.inference_mode()
    def _steps(self, budget: int) -> Iterator[list[Record]]:
        """One list of records per beam step; the last one ends the run."""
        started = time.perf_counter()
        max_length = len(self.ids) + budget
        if self.max_context is not None:
            max_length = min(max_length, self.max_context)
        b = _Beams(self.ids, self.num_beams, max_length, self.device)
        tick = time.perf_counter()  # the first step's time includes reading the prompt
        logits, cache, extra = self._start()
        while True:
            b.depth += 1
            cands = self._candidates(logits, b.seqs, b.scores, b.cur_len + 1 >= max_length)
            statuses, final_scores = self._finish(b, cands)
            top_scores, src, tok, hits, token_logp = cands
            # The best N unfinished candidates carry on.
            masked = torch.tensor(top_scores) + torch.tensor(hits, dtype=torch.float) * -1e9
            order = torch.topk(masked, self.num_beams).indices.tolist()
            for j in order:
                if not hits[j]:
                    statuses[j] = RUNNING
            nodes = tuple(
                BeamNode(
                    node_id=b.next_id + j,
                    parent=b.nodes[src[j]],
                    token_id=tok[j],
                    text=self.text_track.show(tok[j]),
                    logprob=token_logp[j],
                    score=top_scores[j],
                    depth=b.depth,
                    status=statuses[j],
                    final_score=final_scores[j],
                )  # fmt: skip
                for j in range(len(tok))
            )
            self.nodes.update((node.node_id, node) for node in nodes)
            b.scores = masked[order].to(self.device)
            b.seqs = [b.seqs[src[j]] + [tok[j]] for j in order]
            b.nodes = [b.next_id + j for j in order]
            b.next_id += len(tok)
            cache.reorder_cache(torch.tensor([src[j] for j in order], device=self.device))
            b.cur_len += 1
            live = tuple(node for node, j in zip(b.nodes, order, strict=True) if not hits[j])
            event = BeamEvent(b.depth, nodes, live, tuple(h[2] for h in b.finished))
            done = self._done(b, float(masked[order[0]])) or all(hits)
            self._measure_nodes(nodes, time.perf_counter() - tick)
            if done:
                hyps = tuple(
                    BeamHypothesis(tuple(seq[b.prompt_len :]), score, node)
                    for score, seq, node in b.finished
                )
                seconds = time.perf_counter() - started
                self.result = BeamResult(hyps, b.depth, self.forward_passes, seconds)
                records = [event, *self._show_path(self.result.best.node_id), self.result]
                self.finished = True
                self.stop_reason = self.stop_reason or "max_new_tokens"
                yield records
                return
            yield [event, *self._show_path(b.nodes[0])]
            tick = time.perf_counter()
            last = torch.tensor([seq[-1] for seq in b.seqs], device=self.device)
            logits, cache = self._forward(last, cache, extra)

    def _finish(
        self, b: _Beams, cands: tuple[list[float], list[int], list[int], list[bool], list[float]]
    ) -> tuple[list[str], list[float | None]]:
        """Finished hypotheses: only candidates ranked in the top N may finish; a finished one
        worse than N better hypotheses is pruned. Returns each candidate's status so far."""
        top_scores, src, tok, hits, _ = cands
        n = self.num_beams
        statuses = [PRUNED] * len(tok)
        final_scores: list[float | None] = [None] * len(tok)
        if not b.improvable or (len(b.finished) == n and self.early_stopping is True):
            return statuses, final_scores
        gen_len = b.cur_len + 1 - b.prompt_len
        for j in range(min(n, len(tok))):
            if hits[j]:
                final = top_scores[j] / (gen_len**self.length_penalty)
                b.finished.append((final, b.seqs[src[j]] + [tok[j]], b.next_id + j))
                statuses[j], final_scores[j] = FINISHED, final
        b.finished.sort(key=lambda h: -h[0])
        kept_ids = {h[2] for h in b.finished[:n]}
        for j in range(len(tok)):
            if statuses[j] == FINISHED and b.next_id + j not in kept_ids:
                statuses[j] = PRUNED
        del b.finished[n:]
        return statuses, final_scores

    def _done(self, b: _Beams, best_running: float) -> bool:
        """Whether the search ends: no running beam can beat the worst finished hypothesis
        (transformers' heuristic), or N are finished with ``early_stopping=True``."""
        n = self.num_beams
        if self.early_stopping == "never" and self.length_penalty > 0:
            best_len = b.max_length - b.prompt_len
        else:
            best_len = b.cur_len - b.prompt_len
        best_possible = best_running / (best_len**self.length_penalty)
        worst = b.finished[-1][0] if len(b.finished) == n else -1e9
        b.improvable = b.improvable and best_possible > worst
        return not b.improvable or (len(b.finished) == n and self.early_stopping is True)

    def _candidates(
        self, logits: torch.Tensor, seqs: list[list[int]], scores: torch.Tensor, at_limit: bool
    ) -> tuple[list[float], list[int], list[int], list[bool], list[float]]:
        """The best K candidates over all beams: path scores, source beam, token, whether it
        ends a hypothesis, and its log-probability. Keeps the beams' distributions for
        ``_measure_nodes``."""
        logp = F.log_softmax(logits, dim=-1)  # [N, vocab]
        ids = torch.tensor(seqs, device=self.device) if self.sampler.uses_ids else None
        processed, cut = apply_chain(
            self.sampler.stages, ids if ids is not None else torch.empty(0), logp, track=True
        )
        vocab = processed.shape[-1]
        keep = max(2, 1 + len(self.eos_token_ids)) * self.num_beams
        total = (processed + scores[:, None]).reshape(-1)  # [N * vocab]
        top_scores, top_idx = self._select(total, min(keep, total.numel()))
        src, tok = top_idx // vocab, top_idx % vocab
        if at_limit:
            hits = torch.ones_like(tok, dtype=torch.bool)
        elif self.eos_token_ids:
            hits = torch.isin(tok, torch.tensor(self.eos_token_ids, device=self.device))
        else:
            hits = torch.zeros_like(tok, dtype=torch.bool)
        self._last = (logits, F.softmax(processed, dim=-1), cut, src, tok)
        token_logp = processed.reshape(-1)[top_idx]
        # one copy of the few numbers the bookkeeping needs
        return (
            top_scores.tolist(), src.tolist(), tok.tolist(), hits.tolist(), token_logp.tolist()
        )  # fmt: skip

    def _select(self, total: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """total: [N * vocab] path scores -> the K candidates that go on (scores, indices),
        best first. Sampled beam search (``engine.decode.search``) draws them instead."""
        return torch.topk(total, k)

    def _measure_nodes(self, nodes: Sequence[BeamNode], elapsed: float) -> None:
        """A Step record for every candidate of this step, from its beam's distribution."""
        logits, probs, cut, src, tok = self._last
        measured = measure(logits[src], probs[src], tok, self.top_n, cut[src])
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
