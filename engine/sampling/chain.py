"""The chain: stages run in order, what each did (the report), and how a token is picked; the
sampler every session uses (``engine.sampling.sampler.Sampler``)."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from itertools import zip_longest

import torch

from engine.records import StageNote
from engine.sampling import greedy
from engine.sampling.base import NEG_INF, LogitsProcessor, StepState
from engine.sampling.mirostat import Mirostat
from engine.sampling.penalties import DRY
from engine.sampling.sampler import (
    NO_REPORT,
    PenaltyTrace,
    Sampler,
    SamplerState,
    StageNoteSlot,
    StageReport,
)
from engine.sampling.temperature import Temperature


def apply_chain(
    chain: Sequence[LogitsProcessor],
    input_ids: torch.Tensor,
    scores: torch.Tensor,
    track: bool = False,
    report: ChainReport | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Run the processors in order. scores: [batch, vocab] -> ([batch, vocab], cut) where
    ``cut`` ([batch, vocab], with ``track``) holds the index of the stage that removed each
    token, -1 for the tokens still in. ``report``, when given, collects what each stage did
    (its note, the scores around the penalties) without copying anything to the host.

    A stage that would remove every token of a row (no-repeat-ngram once every token has been
    used, say) is skipped for that row, so the distribution is never empty; torch.where keeps
    this free of device synchronisation. A binding stage (the grammar, a contract) is never
    skipped: a row it empties stays empty (all -inf), the later stages leave it alone, and
    the stage's ``stops()`` say why (``ChainReport.stops``)."""
    cut = None
    if track:  # contiguous, whatever the scores' strides: the lab's op marks it in place
        cut = torch.full_like(scores, -1, dtype=torch.int16, memory_format=torch.contiguous_format)
    dead: torch.Tensor | None = None  # [batch, 1]: rows a binding stage emptied
    for i, processor in enumerate(chain):
        new = processor(input_ids, scores)
        emptied, cut_here = _emptied(i, processor, scores, new, cut)
        skip = dead if processor.binding else emptied if dead is None else emptied | dead
        # on the CPU the host may look (no device to wait for): a row is rarely skipped
        if skip is not None and (new.device.type != "cpu" or bool(skip.any())):
            new = torch.where(skip, scores, new)
        if processor.binding:
            dead = emptied if dead is None else dead | emptied
            if report is not None:
                report.stops = _merge(report.stops, processor.stops())
        if cut is not None and not cut_here:
            removed_here = (new == NEG_INF) & (scores != NEG_INF) & (cut < 0)
            cut = cut.masked_fill(removed_here, i)
        if report is not None:
            report.add(i, processor, scores, new)
        scores = new
    return scores, cut


def _emptied(
    i: int,
    stage: LogitsProcessor,
    scores: torch.Tensor,
    new: torch.Tensor,
    cut: torch.Tensor | None,
) -> tuple[torch.Tensor, bool]:
    """[batch, 1] bool: the rows stage ``i`` left all -inf; and whether ``cut`` was updated
    here already. On float32 CPU rows the lab's op (``engine/quant/csrc/stats.cpp``) does
    both in one pass where torch takes eight (~100 us on 49,152 tokens, 300 on 151,936),
    the same marks as ``apply_chain``'s own (``tests/engine/test_step_stats.py``)."""
    from engine.quant import native

    if native.takes_rows(scores, new) and new.shape == scores.shape:
        none = torch.empty(0, dtype=torch.int16)
        emptied = torch.ops.decoding_lab.stage_cut(
            scores.contiguous(), new.contiguous(), none if cut is None else cut, i,
            stage.binding,
        )  # fmt: skip
        return emptied, cut is not None
    return new.amax(dim=-1, keepdim=True) == NEG_INF, False


def _merge(old: list[str | None], new: list[str | None]) -> list[str | None]:
    """Per row, the first binding stage's reason to stop."""
    return [a or b for a, b in zip_longest(old, new)]


class ChainReport:
    """Collects what the stages do during one ``apply_chain`` (kept on the device): each
    stage's note, and for the penalties (``reweights``) the scores before the first and after
    the last of them with the stage that last changed each token. ``record()`` is the result."""

    def __init__(self) -> None:
        self.notes: list[StageNoteSlot] = []
        self.before: torch.Tensor | None = None  # [batch, vocab] scores before the penalties
        self.after: torch.Tensor | None = None  # and after them
        self.changed_by: torch.Tensor | None = None  # [batch, vocab] stage index, -1: unchanged
        self.stops: list[str | None] = []  # per row: why a binding stage cannot go on

    def add(self, i: int, stage: LogitsProcessor, before: torch.Tensor, after: torch.Tensor):
        note = stage.note(before, after)
        if note is not None:
            self.notes.append(StageNoteSlot(i, note))
        if stage.reweights:
            if self.before is None or self.changed_by is None:
                self.before = before
                self.changed_by = torch.full_like(before, -1, dtype=torch.int16)
            changed = (after != before) & (after != NEG_INF)
            self.changed_by = self.changed_by.masked_fill(changed, i)
            self.after = after

    def record(self) -> StageReport:
        penalties = None
        if self.before is not None and self.after is not None and self.changed_by is not None:
            before, after = self.before.softmax(-1), self.after.softmax(-1)
            penalties = PenaltyTrace(before, after, self.changed_by)
        return StageReport(penalties, tuple(self.notes), tuple(self.stops))


class Chain(Sampler):
    """The stages a run's scores go through, and how a token is then picked. Mirostat's mu
    lives here (``accept`` moves it, ``snapshot``/``restore`` carry it across rewinds)."""

    def __init__(self, stages: Sequence[LogitsProcessor], greedy: bool) -> None:
        self.stages = list(stages)
        self.greedy = greedy
        only = self.stages[0] if len(self.stages) == 1 else None
        self.plain_greedy = greedy and isinstance(only, Temperature) and only.temperature == 0
        self.uses_ids = any(stage.uses_ids for stage in self.stages)
        self.labels = tuple(stage.label for stage in self.stages)
        self.state = StepState()  # shared with the stages that read it (XTC, mirostat)
        for stage in self.stages:
            if stage.needs_state:
                stage.state = self.state  # type: ignore[attr-defined]
        self.mirostat = next((s for s in self.stages if isinstance(s, Mirostat)), None)
        self.stateful = self.mirostat is not None
        self._report = NO_REPORT

    def prepare(self, generator: torch.Generator | None) -> None:
        self.state.generator = generator

    def probs(
        self, input_ids: torch.Tensor | None, logits: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        ids = input_ids if input_ids is not None else _NO_IDS.to(logits.device)
        collector = ChainReport()
        scores, cut = apply_chain(self.stages, ids, logits, track=True, report=collector)
        self._report = collector.record()
        probs = greedy.softmax(scores)
        if any(collector.stops):  # a row the grammar emptied: probabilities 0, not NaN
            probs = probs.nan_to_num(0.0)
        return probs, cut

    def pick(self, probs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        return pick(probs, self.greedy, generator)

    def report(self) -> StageReport:
        return self._report

    def complete(self, generated: Sequence[int]) -> bool | None:
        """Whether every binding stage (the grammar) accepts ``generated`` as finished; None
        when the chain has none."""
        bound = [s for s in self.stages if s.binding]
        if not bound:
            return None
        return all(s.complete(generated) for s in bound)  # type: ignore[attr-defined]

    def accept(self, token: int, prob: float) -> None:
        if self.mirostat is not None:
            self.state.mu = self.mirostat.update_mu(self.mirostat.mu, prob)

    def snapshot(self) -> SamplerState:
        return SamplerState(self.mirostat.mu if self.mirostat is not None else None)

    def restore(self, state: SamplerState) -> None:
        self.state.mu = state.mu

    def notes(
        self, report: StageReport, values: Sequence[float], show: Callable[[int], str]
    ) -> tuple[StageNote, ...]:
        out, at = [], 0
        for slot in report.notes:
            stage = self.stages[slot.stage]
            if isinstance(slot.note, str):
                text = slot.note
            else:
                width = slot.note.shape[-1]
                text = stage.describe(values[at : at + width], show)
                at += width
            if isinstance(stage, DRY):  # token ids in the host note become their text
                text = _name_ids(text, show)
            out.append(StageNote(stage.label, text))
        return tuple(out)


def _name_ids(text: str, show: Callable[[int], str]) -> str:
    return re.sub(r"#(\d+)", lambda m: repr(show(int(m.group(1)))), text)


_NO_IDS = torch.empty((1, 0), dtype=torch.long)


def pick(probs: torch.Tensor, take_max: bool, generator: torch.Generator) -> torch.Tensor:
    """probs: [vocab] -> token: [1]; the argmax when greedy, else a draw."""
    if take_max:  # the first maximum, as argmax
        return greedy.first_max(probs)
    return draw(probs, generator)


def draw(probs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """probs: [vocab] -> [1], the token ``torch.multinomial(probs, 1, generator=generator)``
    draws, from the same random numbers (what transformers' sampling calls, so seeded runs
    reproduce it): one Exp(1) per token, the largest p / q. Written out because multinomial
    first checks the row on the host (``.item()`` in the torch releases before its checks
    became asynchronous), which a CUDA graph cannot capture. The callers' rows need no check:
    a softmax of scores made finite first (``engine.decode.measure.finite_rows``; -inf where
    a stage cut a token), or speculative decoding's residual, drawn only when its sum is
    positive. ``tests/engine/test_draw.py`` holds it to multinomial, token and generator
    state."""
    q = torch.empty_like(probs).exponential_(1, generator=generator)
    return (probs / q).argmax(-1, keepdim=True)
