"""Search methods beside plain beam search, streamed as the same records (``Step`` for the
token shown, ``BeamEvent`` for the tree).

* ``SampledBeamSession``: beam search that draws its candidates (transformers'
  ``generate(do_sample=True, num_beams=N)``): the beams' log-probabilities go through the
  penalties, then temperature and the filters, and the K = max(2, 1 + #EOS) · N continuations
  are drawn without replacement from softmax(path scores) over all beams instead of taken best
  first. The first N drawn may finish a hypothesis; the best N unfinished go on.
* ``ContrastiveSession``: contrastive search (Su et al., 2022, "A Contrastive Framework for
  Neural Text Generation"; transformers 5 moved it to the Hub repository
  ``transformers-community/contrastive-search``). Among the top-k tokens by probability
  (after the penalties), pick the one maximising
  ``(1 - alpha) · p(v) - alpha · max_j cos(h_v, h_j)``, where h_v is the model's last hidden
  state after reading v and h_j those of every earlier position (prompt included). alpha 0 is
  greedy decoding.
* ``GroupBeamSession``: diverse (group) beam search (Vijayakumar et al., 2016, "Diverse Beam
  Search"; transformers-community/group-beam-search). The N beams form G groups of N/G; at each
  step the groups choose in turn, and a group's log-probabilities lose
  ``diversity_penalty × (how many beams of earlier groups chose that token at this step)``
  (Hamming diversity) before its own beam step. Each group keeps its own N/G finished
  hypotheses; the answer is the best over all groups.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from engine.decode.beam import BeamSession, _Beams
from engine.decode.measure import measure
from engine.decode.session import Record, SessionBase
from engine.models.device import model_device
from engine.records import (
    CONTRASTIVE,
    GROUP_BEAM,
    KEEP_FULL,
    PRUNED,
    RUNNING,
    SAMPLED_BEAM,
    BeamEvent,
    BeamHypothesis,
    BeamNode,
    BeamResult,
    StageNote,
)
from engine.sampling.base import LogitsProcessor
from engine.sampling.build import PENALTIES, build_chain
from engine.sampling.chain import Chain
from engine.sampling.penalties import SequenceBias
from engine.sampling.settings import DEFAULT_SETTINGS, SamplerSettings
from engine.sampling.truncation import EpsilonCutoff, EtaCutoff, MinP, TopK, TopP, TypicalP


class ScaleTemperature(LogitsProcessor):
    """Divide the scores by the temperature, unshifted (transformers'
    ``TemperatureLogitsWarper``): beam scores add across beams, so a per-row shift would
    change which beam wins."""

    def __init__(self, temperature: float) -> None:
        if not temperature > 0:
            raise ValueError(f"temperature must be > 0, got {temperature!r}")
        self.temperature = float(temperature)

    @property
    def label(self) -> str:
        return f"temperature {self.temperature:g}"

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        return scores / self.temperature


def sampling_beam_chain(
    settings: SamplerSettings,
    prompt_length: int,
    eos_token_ids: Sequence[int],
    tokenizer: Any = None,
) -> Chain:
    """The stages transformers applies in sampled beam search, in its order: the penalties,
    then temperature, top-k, top-p, min-p, typical-p, epsilon, eta, each keeping at least
    1 + #EOS tokens (transformers' ``min_tokens_to_keep`` for beams). The llama.cpp-only stages
    (XTC, mirostat, dynamic temperature, ...) do not apply to beams."""
    penalties = build_chain(
        settings, prompt_length, eos_token_ids, only=PENALTIES, tokenizer=tokenizer
    ).stages
    keep = len(eos_token_ids) + 1 if eos_token_ids else 2
    s = settings
    warpers: list[LogitsProcessor] = []
    if s.temperature not in (0.0, 1.0):
        warpers.append(ScaleTemperature(s.temperature))
    if s.top_k:
        warpers.append(TopK(max(s.top_k, keep)))
    if s.top_p < 1:
        warpers.append(TopP(s.top_p, keep))
    if s.min_p > 0:
        warpers.append(MinP(s.min_p))
    if s.typical_p < 1:
        warpers.append(TypicalP(s.typical_p, keep))
    if s.epsilon_cutoff > 0:
        warpers.append(EpsilonCutoff(s.epsilon_cutoff, keep))
    if s.eta_cutoff > 0:
        warpers.append(EtaCutoff(s.eta_cutoff, keep))
    return Chain([*penalties, *warpers], greedy=False)


class SampledBeamSession(BeamSession):
    """Beam search whose candidates are drawn (``do_sample=True, num_beams=N`` in
    transformers). One generator, seeded with the settings' seed, for the whole search;
    temperature 0 gives plain beam search. The tree's candidates come in draw order."""

    method = SAMPLED_BEAM

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        seed = self._settings.seed if self._settings is not None else 0
        self.generator = torch.Generator(device=self.device).manual_seed(seed)

    def _chain_for(self, settings: SamplerSettings) -> Chain:
        return sampling_beam_chain(settings, self.prompt_length, self.eos_token_ids, self.tokenizer)

    def _select(self, total: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self._settings is not None and self._settings.temperature == 0:
            return super()._select(total, k)
        # [1, N * vocab] as transformers draws it, without replacement
        idx = torch.multinomial(total.softmax(-1)[None], k, generator=self.generator)[0]
        return total[idx], idx


class ContrastiveSession(SessionBase):
    """Contrastive search, token by token (decoder-only models). Per step: one forward pass
    over the k candidates (the KV cache repeated k times, then cropped to the chosen one),
    a ``Step`` for the chosen token and a ``BeamEvent`` with the k candidates scored."""

    method = CONTRASTIVE

    def __init__(
        self,
        model: torch.nn.Module,
        prompt_ids: Sequence[int],
        settings: SamplerSettings = DEFAULT_SETTINGS,
        *,
        penalty_alpha: float = 0.6,
        top_k: int = 4,
        tokenizer: Any | None = None,
        eos_token_ids: int | Iterable[int] | None = None,
        top_n: int = 20,
        max_context: int | None = None,
        keep_candidates: int | None = KEEP_FULL,
    ) -> None:
        if not 0 <= penalty_alpha <= 1:
            raise ValueError(f"penalty_alpha must be in [0, 1], got {penalty_alpha!r}")
        if not (isinstance(top_k, int) and top_k >= 1):
            raise ValueError(f"top_k must be an integer >= 1, got {top_k!r}")
        super().__init__(
            model, prompt_ids, settings, tokenizer=tokenizer, eos_token_ids=eos_token_ids,
            top_n=top_n, max_context=max_context, keep_candidates=keep_candidates,
        )  # fmt: skip
        if self.is_encoder_decoder:
            raise ValueError("contrastive search here takes decoder-only models")
        self.alpha = float(penalty_alpha)
        self.k = top_k
        self.device = model_device(model)
        self.forward_passes = 0
        self._state: tuple[torch.Tensor, Any, torch.Tensor] | None = None
        self._node = 0  # the tree node of the last chosen token (0: the prompt)
        self._next_id = 1

    def _chain_for(self, settings: SamplerSettings) -> Chain:
        """Contrastive search is deterministic: only the penalties apply (as in transformers)."""
        return build_chain(
            settings, self.prompt_length, self.eos_token_ids, only=PENALTIES,
            tokenizer=self.tokenizer,
        )  # fmt: skip

    def rewind(self, step_index: int) -> Any:
        raise NotImplementedError("contrastive search runs from the prompt; start a new run")

    def _forward(self, ids: torch.Tensor, cache: Any) -> tuple[torch.Tensor, torch.Tensor, Any]:
        """ids: [rows, t] -> last logits [rows, vocab], last-layer hidden states [rows, t, H]."""
        out = self.model(
            input_ids=ids, past_key_values=cache, use_cache=True, output_hidden_states=True
        )
        self.forward_passes += 1
        return out.logits[:, -1, :].float(), out.hidden_states[-1].float(), out.past_key_values

    def _advance(self, room: int) -> Iterator[Record]:
        yield from self._step()

    @torch.inference_mode()
    def _step(self) -> list[Record]:
        from transformers import DynamicCache

        start = time.perf_counter()
        fed = 1
        if self._state is None:  # read the prompt once
            prompt = torch.tensor([self.ids], device=self.device)
            logits, hidden, cache = self._forward(prompt, DynamicCache(config=self.model.config))
            self._state = (logits, cache, hidden[0])  # context: [S, H]
            fed = len(self.ids)
        logits, cache, context = self._state
        ids = torch.tensor([self.ids], device=self.device) if self.sampler.uses_ids else None
        probs, cut = self.sampler.probs(ids, logits)  # [1, vocab]
        k = min(self.k, probs.shape[-1])
        top_p, top_ids = torch.topk(probs[0], k)  # [k]
        # Feed the k candidates at once: the cache repeated k times.
        cache.batch_repeat_interleave(k)
        cand_logits, cand_hidden, cache = self._forward(top_ids[:, None], cache)
        h = F.normalize(cand_hidden[:, -1, :], dim=-1)  # [k, H]
        degeneration = (h @ F.normalize(context, dim=-1).T).amax(dim=-1)  # [k]
        score = (1 - self.alpha) * top_p - self.alpha * degeneration
        best = score.argmax()  # the first maximum, as torch.max in transformers
        token = top_ids[best].reshape(1)
        cache.reorder_cache(best.reshape(1))  # keep the chosen candidate's row
        self._state = (
            cand_logits[best][None],
            cache,
            torch.cat([context, cand_hidden[best, -1][None]]),
        )
        extra = torch.cat([top_ids.double(), top_p.double(), degeneration.double(),
                           score.double()])[None]  # fmt: skip
        m = measure(logits, probs, token, self.top_n, cut, extra=extra)[0]  # one host copy
        elapsed = time.perf_counter() - start
        return self._records(m, elapsed, fed, k)

    def _records(self, m: Any, elapsed: float, fed: int, k: int) -> list[Record]:
        ids, p, deg, score = (m.extra[i * k : (i + 1) * k] for i in range(4))
        chosen = [int(i) for i in ids].index(m.token_id)
        show = self.text_track.show
        depth = len(self.history) + 1
        nodes = tuple(
            BeamNode(
                node_id=self._next_id + j,
                parent=self._node,
                token_id=int(ids[j]),
                text=show(int(ids[j])),
                logprob=float(torch.tensor(p[j]).log()),
                score=score[j],
                depth=depth,
                status=RUNNING if j == chosen else PRUNED,
            )  # fmt: skip
            for j in range(k)
        )
        note = StageNote(
            f"contrastive α {self.alpha:g}, k {self.k}",
            f"chose {show(m.token_id)!r}: p {p[chosen]:.3f}, degeneration {deg[chosen]:.3f}, "
            f"score {score[chosen]:.3f}",
        )
        self._node = self._next_id + chosen
        self._next_id += k
        step = self._append(m, elapsed, "contrastive", fed=fed)
        step = self.history[-1] = _with_note(step, note)
        event = BeamEvent(depth, nodes, (self._node,), ())
        return [event, step]


def _with_note(step: Any, note: StageNote) -> Any:
    from dataclasses import replace

    return replace(step, stage_notes=(*step.stage_notes, note))


class HammingDiversity(LogitsProcessor):
    """transformers' ``HammingDiversityLogitsProcessor`` for one group: subtract
    ``penalty × count`` where ``count[v]`` is how many beams of the earlier groups chose v at
    this step (``counts``, set before each group)."""

    def __init__(self, penalty: float) -> None:
        if not (isinstance(penalty, (int, float)) and penalty >= 0):
            raise ValueError(f"diversity_penalty must be >= 0, got {penalty!r}")
        self.penalty = float(penalty)
        self.counts: torch.Tensor | None = None  # [vocab]

    @property
    def label(self) -> str:
        return f"diversity {self.penalty:g}"

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self.counts is None or self.penalty == 0:
            return scores.clone()
        return scores - self.penalty * self.counts.to(scores.dtype)


class GroupBeamSession(BeamSession):
    """Diverse beam search: ``num_beams`` beams in ``num_beam_groups`` groups, one forward pass
    for all of them per step; each group is a beam search of ``num_beams / num_beam_groups``
    beams (transformers' rules, ``BeamSession``) whose scores lose the Hamming diversity
    penalty for the tokens earlier groups chose at this step. The diversity stage sits after
    the logit bias and before the other penalties, as in transformers' processor list. A
    group that is done stops (transformers pads it and counts the pad token for later groups;
    here it counts nothing). The shown beam is the best running one over all groups."""

    method = GROUP_BEAM

    def __init__(
        self,
        model: torch.nn.Module,
        prompt_ids: Sequence[int],
        settings: SamplerSettings = DEFAULT_SETTINGS,
        *,
        num_beams: int = 4,
        num_beam_groups: int = 2,
        diversity_penalty: float = 0.5,
        **kwargs: Any,
    ) -> None:
        if not (isinstance(num_beam_groups, int) and num_beam_groups >= 1):
            raise ValueError(f"num_beam_groups must be an integer >= 1, got {num_beam_groups!r}")
        if num_beams % num_beam_groups:
            raise ValueError(
                f"num_beams ({num_beams}) must be a multiple of num_beam_groups ({num_beam_groups})"
            )
        self.diversity = HammingDiversity(diversity_penalty)
        super().__init__(model, prompt_ids, settings, num_beams=num_beams, **kwargs)
        self.groups = num_beam_groups
        self.total_beams = num_beams
        self.group_size = num_beams // num_beam_groups

    def _chain_for(self, settings: SamplerSettings) -> Chain:
        stages = super()._chain_for(settings).stages
        at = 1 if stages and type(stages[0]) is SequenceBias else 0
        return Chain([*stages[:at], self.diversity, *stages[at:]], greedy=True)

    @torch.inference_mode()
    def _steps(self, budget: int) -> Iterator[list[Record]]:
        started = time.perf_counter()
        max_length = len(self.ids) + budget
        if self.max_context is not None:
            max_length = min(max_length, self.max_context)
        tick = time.perf_counter()
        logits, cache, extra = self._start()  # [N, vocab] for all beams
        gs, vocab = self.group_size, logits.shape[-1]
        self.num_beams = gs  # the inherited bookkeeping works on one group at a time
        groups = [_Beams(self.ids, gs, max_length, self.device) for _ in range(self.groups)]
        done = [False] * self.groups
        next_id = 1
        while True:
            counts = torch.zeros(vocab, device=self.device)
            nodes: list[BeamNode] = []
            rows = list(range(self.total_beams))  # the cache row each beam continues from
            measured: list[tuple[torch.Tensor, ...]] = []
            for g, b in enumerate(groups):
                if done[g]:
                    continue
                b.next_id, b.depth = next_id, b.depth + 1
                self.diversity.counts = counts if g > 0 else None
                base = g * gs
                cands = self._candidates(
                    logits[base : base + gs], b.seqs, b.scores, b.cur_len + 1 >= max_length
                )
                statuses, final_scores = self._finish(b, cands)
                top_scores, src, tok, hits, token_logp = cands
                masked = torch.tensor(top_scores) + torch.tensor(hits, dtype=torch.float) * -1e9
                order = torch.topk(masked, gs).indices.tolist()
                for j in order:
                    if not hits[j]:
                        statuses[j] = RUNNING
                group_nodes = [
                    BeamNode(
                        node_id=next_id + j,
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
                ]
                nodes += group_nodes
                lg, pr, cut, src_t, tok_t = self._last
                measured.append((lg[src_t], pr[src_t], cut[src_t], tok_t))
                b.scores = masked[order].to(self.device)
                b.seqs = [b.seqs[src[j]] + [tok[j]] for j in order]
                b.nodes = [next_id + j for j in order]
                next_id += len(tok)
                b.next_id = next_id
                for i, j in enumerate(order):
                    rows[base + i] = base + src[j]
                chosen = torch.tensor([tok[j] for j in order], device=self.device)
                counts = counts + torch.bincount(chosen, minlength=vocab).to(counts.dtype)
                b.cur_len += 1
                done[g] = self._done(b, float(masked[order[0]])) or all(hits)
            cache.reorder_cache(torch.tensor(rows, device=self.device))
            self.nodes.update((node.node_id, node) for node in nodes)
            finished = sorted((h for b in groups for h in b.finished), key=lambda h: -h[0])
            live = tuple(node for g, b in enumerate(groups) if not done[g] for node in b.nodes)
            event = BeamEvent(max(b.depth for b in groups), tuple(nodes), live,
                              tuple(h[2] for h in finished))  # fmt: skip
            self._last = (
                torch.cat([m[0] for m in measured]), torch.cat([m[1] for m in measured]),
                torch.cat([m[2] for m in measured]), torch.arange(len(nodes)),
                torch.cat([m[3] for m in measured]),
            )  # fmt: skip
            self._measure_nodes(nodes, time.perf_counter() - tick)
            if all(done):
                hyps = tuple(
                    BeamHypothesis(tuple(seq[groups[0].prompt_len :]), score, node)
                    for score, seq, node in finished
                )
                seconds = time.perf_counter() - started
                depth = max(b.depth for b in groups)
                self.result = BeamResult(hyps, depth, self.forward_passes, seconds)
                self.finished = True
                self.stop_reason = self.stop_reason or "max_new_tokens"
                yield [event, *self._show_path(self.result.best.node_id), self.result]
                return
            best = max(
                (g for g in range(self.groups) if not done[g]),
                key=lambda g: float(groups[g].scores[0]),
            )
            yield [event, *self._show_path(groups[best].nodes[0])]
            tick = time.perf_counter()
            last = torch.tensor(
                [groups[i // gs].seqs[i % gs][-1] for i in range(self.total_beams)],
                device=self.device,
            )
            logits, cache = self._forward(last, cache, extra)
