"""A token's whole sampling step as one tensor function, for the common chains: the chain
(temperature, top-k, top-p, min-p, repetition penalty), the pick (greedy, or a draw from the
step's seeded generator on the session's device) and every number a ``Step`` needs (top-N ids
with both probabilities and the stage that cut each, the chosen token's rank and probabilities,
survivors, both entropies, the penalties at the top-N) written into one fixed float64 buffer.

Nothing here reads a value back to the host, and no shape depends on the run's length (the
penalty reads a fixed-capacity id buffer under a length), so the function can run ahead of the
host (``engine.decode.pipeline``) and be captured in a CUDA graph with the forward pass
(``engine.decode.token_graph``). The buffer is ``engine.decode.measure``'s packed row, so
``unpack_row`` reads it, and the numbers are the same operations ``measure`` runs.

Chains with a stage that needs the host between tokens or its own random draw cannot run this
way (``plan_for`` returns why, in words for the status line); sessions then take today's path.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from engine.decode.measure import record_columns, row_width
from engine.sampling.base import LogitsProcessor
from engine.sampling.chain import ChainReport, apply_chain, pick
from engine.sampling.penalties import RepetitionPenalty
from engine.sampling.sampler import Sampler
from engine.sampling.temperature import Temperature
from engine.sampling.truncation import MinP, TopK, TopP

FUSED_STAGES = (Temperature, TopK, TopP, MinP, RepetitionPenalty)

# Why a stage keeps its chain on the host path, by class name (the grammar's class is not
# imported: llguidance loads only when a grammar is set).
WHY_NOT: dict[str, str] = {
    "Mirostat": "mirostat moves its target after every token on the host",
    "DRY": "DRY matches repeated sequences on the host",
    "Grammar": "the grammar is checked on the host (llguidance)",
    "XTC": "XTC draws its own random number before the pick",
    "SequenceBias": "logit bias by words is matched against the sequence on the host",
    "BannedSequences": "banned strings are matched against the sequence on the host",
    "NoRepeatNGram": "no-repeat-ngram matches the sequence on the host",
    "DynamicTemperature": "dynamic temperature reports its value per token",
    "AdaptiveP": "adaptive-p keeps a running average on the host",
}


def fallback_reason(sampler: Sampler) -> str | None:
    """None when ``sampler``'s whole chain runs as one tensor function, else why not."""
    stages = getattr(sampler, "stages", None)
    if stages is None:
        return "this sampler is not a chain of stages"
    for stage in stages:
        if stage.idle:  # min new tokens with no end ids: a plain copy, run as it is
            continue
        if type(stage) not in FUSED_STAGES:
            why = WHY_NOT.get(type(stage).__name__, "it is not one of the device path's stages")
            return f"{stage.label}: {why}"
    return None


class SeenPenalty(LogitsProcessor):
    """``RepetitionPenalty`` reading a mask of the ids seen (``[1, vocab]`` bool, passed where
    the protocol passes ``input_ids``) instead of the ids themselves: the same arithmetic on the
    same tokens, with a shape that does not grow with the run."""

    reweights = True

    def __init__(self, stage: RepetitionPenalty) -> None:
        self.penalty, self.last_n, self._label = stage.penalty, stage.last_n, stage.label

    @property
    def label(self) -> str:
        return self._label

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        penalised = torch.where(scores < 0, scores * self.penalty, scores / self.penalty)
        return torch.where(input_ids, penalised, scores)


@dataclass(frozen=True)
class FusedPlan:
    """A chain as the tensor function runs it."""

    stages: tuple[LogitsProcessor, ...]  # the chain's, a repetition penalty as SeenPenalty
    greedy: bool
    last_n: int | None  # the penalty's window (0: every id); None: no stage reads the ids
    top_n: int
    key: tuple  # what a captured graph depends on (the stages' values)

    def width(self, vocab: int) -> int:
        return row_width(min(self.top_n, vocab), self.penalties)

    @property
    def penalties(self) -> bool:
        return self.last_n is not None


def plan_for(sampler: Sampler, top_n: int) -> FusedPlan | str:
    """The plan for ``sampler``'s chain, or why it has none (``fallback_reason``)."""
    reason = fallback_reason(sampler)
    if reason is not None:
        return reason
    stages: list[LogitsProcessor] = []
    last_n: int | None = None
    for stage in sampler.stages:  # type: ignore[attr-defined] - checked above
        if isinstance(stage, RepetitionPenalty):
            stage, last_n = SeenPenalty(stage), stage.last_n
        stages.append(stage)
    key = (sampler.greedy, top_n, *((type(s).__name__, *vars(s).values()) for s in stages))
    return FusedPlan(tuple(stages), sampler.greedy, last_n, top_n, key)


def window_seen(
    ids: torch.Tensor, length: torch.Tensor | int, last_n: int, vocab: int
) -> torch.Tensor:
    """ids: [capacity] long, valid below ``length`` -> [1, vocab] bool: the ids among the last
    ``last_n`` valid ones (all of them when 0), as ``RepetitionPenalty`` windows its ids."""
    pos = torch.arange(ids.shape[0], device=ids.device)
    inside = pos < length
    if last_n > 0:
        inside &= pos >= length - last_n
    counts = torch.zeros(vocab, device=ids.device).scatter_add(0, ids, inside.float())
    return (counts > 0)[None]


def token_stats(
    plan: FusedPlan,
    logits: torch.Tensor,
    finite: torch.Tensor,
    seen: torch.Tensor | None,
    generator: torch.Generator,
    forced: torch.Tensor | None,
    out: torch.Tensor,
) -> torch.Tensor:
    """One token: logits [1, vocab] float32 (finite; ``finite`` [1] bool says whether the
    model's own were), ``seen`` [1, vocab] bool (``window_seen``; None when no stage reads ids),
    the step's seeded generator, ``forced`` [1] long (>= 0: take that token; None: pick) ->
    the token [1] long, with its packed row written into ``out`` [width] float64. The
    generator must already hold the step's seed (``engine.decode.session.step_seed``)."""
    report = ChainReport()
    # no host tensor moves to the device in here: a CUDA graph may be capturing
    ids = seen if seen is not None else torch.zeros((1, 0), dtype=torch.bool, device=logits.device)
    scores, cut = apply_chain(plan.stages, ids, logits, track=True, report=report)
    probs = F.softmax(scores, dim=-1)  # [1, vocab]
    token = pick(probs[0], plan.greedy, generator)  # [1]
    if forced is not None:
        token = torch.where(forced >= 0, forced, token)
    n = min(plan.top_n, logits.shape[-1])
    # a session's own columns (the lab's op on the CPU), so the pipelined records are its
    columns, top_ids = record_columns(logits, probs, token, n, cut, finite)
    trace = report.record().penalties
    if plan.penalties and trace is not None:
        columns += [t.gather(1, top_ids) for t in (trace.before, trace.after, trace.changed_by)]
    torch.cat([c.double() for c in columns], dim=1, out=out.view(1, -1))
    return token
