"""The chain: stages run in order, what each did (the report), and how a token is picked."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Protocol

import torch
import torch.nn.functional as F

from engine.sampling.base import NEG_INF, LogitsProcessor, StepState
from engine.sampling.mirostat import Mirostat
from engine.sampling.penalties import DRY


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
    used, say) is skipped for that row, so the distribution is never empty. torch.where keeps
    this free of device synchronisation."""
    cut = torch.full_like(scores, -1, dtype=torch.int16) if track else None
    for i, processor in enumerate(chain):
        new = processor(input_ids, scores)
        emptied = (new == NEG_INF).all(dim=-1, keepdim=True)  # [batch, 1]
        new = torch.where(emptied, scores, new)
        if cut is not None:
            removed_here = (new == NEG_INF) & (scores != NEG_INF) & (cut < 0)
            cut = cut.masked_fill(removed_here, i)
        if report is not None:
            report.add(i, processor, scores, new)
        scores = new
    return scores, cut


class ChainReport:
    """What the stages did at one step, kept on the device until the step's one host copy:
    each stage's note, and for the penalties (``reweights``) the scores before the first and
    after the last of them with the stage that last changed each token."""

    def __init__(self) -> None:
        self.notes: list[tuple[int, torch.Tensor | str]] = []
        self.before: torch.Tensor | None = None  # [batch, vocab] scores before the penalties
        self.after: torch.Tensor | None = None  # and after them
        self.changed_by: torch.Tensor | None = None  # [batch, vocab] stage index, -1: unchanged

    def add(self, i: int, stage: LogitsProcessor, before: torch.Tensor, after: torch.Tensor):
        note = stage.note(before, after)
        if note is not None:
            self.notes.append((i, note))
        if stage.reweights:
            if self.before is None:
                self.before = before
                self.changed_by = torch.full_like(before, -1, dtype=torch.int16)
            changed = (after != before) & (after != NEG_INF)
            self.changed_by = self.changed_by.masked_fill(changed, i)
            self.after = after

    def tensors(self) -> tuple[list[torch.Tensor], torch.Tensor | None]:
        """(per-token rows [batch, vocab] to read at the top-N ids: probability before and
        after the penalties, the stage that changed each; one [batch, k] block of notes)."""
        per_token: list[torch.Tensor] = []
        if self.before is not None and self.after is not None and self.changed_by is not None:
            per_token = [self.before.softmax(-1), self.after.softmax(-1), self.changed_by]
        blocks = [n.double() for _, n in self.notes if isinstance(n, torch.Tensor)]
        return per_token, (torch.cat(blocks, dim=-1) if blocks else None)


class Chain:
    """The stages a run's scores go through, and how a token is then picked."""

    def __init__(self, stages: Sequence[LogitsProcessor], greedy: bool) -> None:
        self.stages = list(stages)
        self.greedy = greedy
        self.uses_ids = any(stage.uses_ids for stage in self.stages)
        self.labels = tuple(stage.label for stage in self.stages)
        self.state = StepState()
        for stage in self.stages:
            if stage.needs_state:
                stage.state = self.state  # type: ignore[attr-defined]
        self.mirostat = next((s for s in self.stages if isinstance(s, Mirostat)), None)
        self.report: ChainReport | None = None

    def prepare(self, generator: torch.Generator | None, mu: float | None) -> None:
        """Before a step: the step's seeded generator, and mirostat's mu (None: its start)."""
        self.state.generator = generator
        self.state.mu = mu

    def probs(
        self, input_ids: torch.Tensor | None, logits: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """input_ids: [batch, seq] (None when no stage reads them); logits: [batch, vocab] ->
        probabilities [batch, vocab] and the stage that cut each token ([batch, vocab])."""
        ids = input_ids if input_ids is not None else _NO_IDS.to(logits.device)
        self.report = ChainReport()
        scores, cut = apply_chain(self.stages, ids, logits, track=True, report=self.report)
        return F.softmax(scores, dim=-1), cut

    def pick(self, probs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """probs: [vocab] -> token: [1]."""
        return pick(probs, self.greedy, generator)

    def next_mu(self, chosen_prob: float) -> float | None:
        """Mirostat's mu after this step's token (None without mirostat)."""
        if self.mirostat is None:
            return None
        return self.mirostat.update_mu(self.mirostat.mu, chosen_prob)

    def notes(
        self, extra: Sequence[float], show: Callable[[int], str]
    ) -> tuple[tuple[str, str], ...]:
        """The last step's notes as (stage label, text), from the host copy of the note block
        (one row of ``ChainReport.tensors()[1]``)."""
        if self.report is None:
            return ()
        out, at = [], 0
        for i, note in self.report.notes:
            stage = self.stages[i]
            if isinstance(note, str):
                text = note
            else:
                width = note.shape[-1]
                text = stage.describe(extra[at : at + width], show)
                at += width
            if isinstance(stage, DRY):  # token ids in the host note become their text
                text = _name_ids(text, show)
            out.append((stage.label, text))
        return tuple(out)


def _name_ids(text: str, show: Callable[[int], str]) -> str:
    return re.sub(r"#(\d+)", lambda m: repr(show(int(m.group(1)))), text)


_NO_IDS = torch.empty((1, 0), dtype=torch.long)


class Sampler(Protocol):
    """Turns raw logits into probabilities and picks a token (``Chain``, or
    the seed-compatible processors through ``engine.drivers.compat.CompatSampler``)."""

    greedy: bool
    uses_ids: bool
    labels: tuple[str, ...]

    def probs(
        self, input_ids: torch.Tensor | None, logits: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor | None]: ...

    def pick(self, probs: torch.Tensor, generator: torch.Generator) -> torch.Tensor: ...


def pick(probs: torch.Tensor, greedy: bool, generator: torch.Generator) -> torch.Tensor:
    """probs: [vocab] -> token: [1]; the argmax when greedy, else a draw."""
    if greedy:
        return probs.argmax().reshape(1)
    return torch.multinomial(probs, 1, generator=generator)
