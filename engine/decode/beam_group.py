"""One group of beams and transformers' rules for it, with no model in sight.

Plain beam search is one group of N beams; diverse (group) beam search is G groups of N/G
that take their step in turn (``engine.decode.beam.BeamSession`` runs either). Per step a
group receives its ``Candidates`` (the best K = max(2, 1 + #EOS) · size continuations, best
first) and ``BeamGroup.advance`` applies the rules of transformers' ``_beam_search``:

* only candidates ranked in the top ``size`` may finish a hypothesis (EOS or the length
  limit), scored sum_logprob / generated_length ** length_penalty; a group keeps its best
  ``size`` finished hypotheses;
* the best ``size`` unfinished candidates carry on;
* the group is done when no running beam can beat its worst finished hypothesis
  (transformers' heuristic), when ``early_stopping=True`` and it holds ``size`` hypotheses,
  or when every candidate ended.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch

from engine.records import FINISHED, PRUNED, RUNNING

NEG = -1e9  # transformers' "impossible" score for beams and hypotheses


@dataclass(frozen=True)
class BeamRules:
    """The search's settings that the group rules read."""

    prompt_len: int
    max_length: int  # prompt plus generated tokens, at most
    length_penalty: float = 1.0
    early_stopping: bool | str = False


@dataclass(frozen=True)
class Candidates:
    """One group's K candidates at one step, best first. The lists are host copies for the
    bookkeeping; the tensors (one row per candidate) are what ``measure`` reads."""

    scores: list[float]  # path scores: the beam's score plus the token's log-probability
    beams: list[int]  # the beam (index within the group) each candidate continues
    tokens: list[int]
    ends: list[bool]  # whether it ends a hypothesis (an EOS token, or the length limit)
    logprobs: list[float]  # the token's log-probability after the penalty stages
    logits: torch.Tensor  # [K, vocab] raw logits of each candidate's beam
    probs: torch.Tensor  # [K, vocab] that beam's distribution after the stages
    cut: torch.Tensor  # [K, vocab] which stage removed each token (-1: kept)
    token_ids: torch.Tensor  # [K]


class Finished(NamedTuple):
    score: float
    seq: list[int]  # prompt and generated ids
    node: int  # the tree node it ends at


@dataclass(frozen=True)
class Advance:
    """What one step did to a group: each candidate's status, final score (finished ones)
    and parent node; the candidates that fill the group's beams (indices into the
    ``Candidates``, best first) and the node ids of those that carry on."""

    statuses: list[str]
    final_scores: list[float | None]
    parents: list[int]
    order: list[int]
    running: list[int]


class BeamGroup:
    """The state of ``size`` beams between steps; ``rows``: their rows in the model's batch."""

    def __init__(self, prompt: list[int], rows: range, device: torch.device) -> None:
        self.size = len(rows)
        self.rows = rows
        self.seqs = [list(prompt) for _ in rows]
        self.scores = torch.full((self.size,), NEG, device=device)
        self.scores[0] = 0.0  # only beam 0 is live at first: all beams are the same prompt
        self.nodes = [0] * self.size  # the tree node each beam ends at (0: the prompt)
        self.finished: list[Finished] = []  # best first, at most ``size``
        self.improvable = True
        self.done = False

    def advance(self, c: Candidates, first_id: int, cur_len: int, rules: BeamRules) -> Advance:
        """Apply one step's candidates (numbered ``first_id``, ``first_id + 1``... in the
        tree); ``cur_len``: the sequences' length before this step."""
        parents = [self.nodes[b] for b in c.beams]
        statuses, final_scores = self._finish(c, first_id, cur_len + 1 - rules.prompt_len, rules)
        masked = torch.tensor(c.scores) + torch.tensor(c.ends, dtype=torch.float) * NEG
        order = torch.topk(masked, self.size).indices.tolist()
        for j in order:
            if not c.ends[j]:
                statuses[j] = RUNNING
        self.scores = masked[order].to(self.scores.device)
        self.seqs = [self.seqs[c.beams[j]] + [c.tokens[j]] for j in order]
        self.nodes = [first_id + j for j in order]
        self.done = self._stop(float(masked[order[0]]), cur_len + 1, rules) or all(c.ends)
        running = [first_id + j for j in order if not c.ends[j]]
        return Advance(statuses, final_scores, parents, order, running)

    def _finish(
        self, c: Candidates, first_id: int, gen_len: int, rules: BeamRules
    ) -> tuple[list[str], list[float | None]]:
        """Finished hypotheses: only candidates ranked in the top ``size`` may finish; a
        finished one worse than ``size`` better hypotheses is pruned."""
        n, k = self.size, len(c.tokens)
        statuses = [PRUNED] * k
        final_scores: list[float | None] = [None] * k
        if not self.improvable or (len(self.finished) == n and rules.early_stopping is True):
            return statuses, final_scores
        for j in range(min(n, k)):
            if c.ends[j]:
                final = c.scores[j] / (gen_len**rules.length_penalty)
                self.finished.append(
                    Finished(final, self.seqs[c.beams[j]] + [c.tokens[j]], first_id + j)
                )
                statuses[j], final_scores[j] = FINISHED, final
        self.finished.sort(key=lambda h: -h.score)
        kept = {h.node for h in self.finished[:n]}
        for j in range(k):
            if statuses[j] == FINISHED and first_id + j not in kept:
                statuses[j] = PRUNED
        del self.finished[n:]
        return statuses, final_scores

    def _stop(self, best_running: float, cur_len: int, rules: BeamRules) -> bool:
        """Whether the group ends: no running beam can beat the worst finished hypothesis
        (transformers' heuristic), or ``size`` are finished with ``early_stopping=True``."""
        if rules.early_stopping == "never" and rules.length_penalty > 0:
            best_len = rules.max_length - rules.prompt_len
        else:
            best_len = cur_len - rules.prompt_len
        best_possible = best_running / (best_len**rules.length_penalty)
        worst = self.finished[-1].score if len(self.finished) == self.size else NEG
        self.improvable = self.improvable and best_possible > worst
        full = len(self.finished) == self.size and rules.early_stopping is True
        return not self.improvable or full
