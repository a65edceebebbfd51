"""The sampler contract: everything a session asks of its sampler, in the shape of llama.cpp's
``llama_sampler_i`` (name, accept, apply, reset, clone), and the typed records it hands back.

A step runs, in this order (``engine.decode.session.GenerationSession.step``)::

    sampler.prepare(generator)            # the step's seeded generator (XTC draws from it)
    probs, cut = sampler.probs(ids, logits)
    token = sampler.pick(probs[0], generator)          # or a forced token
    report = sampler.report()             # what the stages did, still on the device
    ... one host copy (engine.decode.measure) ...
    sampler.notes(report, values, show)   # the stages' notes in words
    sampler.accept(token, prob)           # stateful stages move on (mirostat's mu)
    step.mu = sampler.snapshot().mu       # kept in the record, so a rewind can restore it

``snapshot``/``restore`` are llama.cpp's clone/reset narrowed to what a rewind needs: the
session restores the state its history ends with after a rewind, undo, redo, resume, or new
settings (``SessionBase.sync_sampler``). Implementations: ``engine.sampling.chain.Chain`` and
``engine.drivers.compat.CompatSampler``; each inherits this protocol, so the type checker holds it
to every member, and ``tests/engine/test_sampler_contract.py`` runs them all through one suite.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from engine.records import StageNote


@dataclass(frozen=True)
class SamplerState:
    """What a sampler carries from one token to the next."""

    mu: float | None = None  # mirostat's target surprise for the next token; None: its start


@dataclass(frozen=True)
class PenaltyTrace:
    """What the penalty stages did, on the device, [batch, vocab] each."""

    before: torch.Tensor  # probability before the first penalty
    after: torch.Tensor  # probability after the last one
    changed_by: torch.Tensor  # int16: index of the stage that last changed the token, -1: none

    def head(self, rows: int) -> PenaltyTrace:
        return PenaltyTrace(self.before[:rows], self.after[:rows], self.changed_by[:rows])


@dataclass(frozen=True)
class StageNoteSlot:
    """One stage's note: numbers still on the device ([batch, width], worded by the stage once
    they reach the host with the step's one copy), or words already known on the host."""

    stage: int  # the stage's index in the chain
    note: torch.Tensor | str


@dataclass(frozen=True)
class StageReport:
    """What the stages did at one ``probs`` call."""

    penalties: PenaltyTrace | None = None
    notes: tuple[StageNoteSlot, ...] = ()
    # per row: why a binding stage (the grammar) cannot go on there; () when every row can
    stops: tuple[str | None, ...] = ()

    def stop(self, row: int = 0) -> str | None:
        """Why the run cannot go on from ``row`` (its probabilities are all 0), or None."""
        return self.stops[row] if row < len(self.stops) else None

    def note_block(self) -> torch.Tensor | None:
        """The numeric notes side by side, [batch, k] float64 (None: none)."""
        blocks = [s.note.double() for s in self.notes if isinstance(s.note, torch.Tensor)]
        return torch.cat(blocks, dim=-1) if blocks else None


NO_REPORT = StageReport()


class Sampler(Protocol):
    """Turns raw logits into probabilities and picks a token, for every session."""

    greedy: bool  # pick takes the argmax (temperature 0); a session's source says "greedy"
    # temperature 0 alone: a session may take the whole step in one op (measure.greedy_measured)
    plain_greedy: bool = False
    uses_ids: bool  # probs reads input_ids (a session builds them only then)
    labels: tuple[str, ...]  # stage names; ``cut`` and ``PenaltyTrace.changed_by`` index them
    stateful: bool  # accept changes what probs gives next (mirostat): rows go one at a time

    def prepare(self, generator: torch.Generator | None) -> None:
        """Before a step: the step's seeded generator for stages that draw (None: their own)."""
        ...

    def probs(
        self, input_ids: torch.Tensor | None, logits: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """input_ids: [batch, seq] (None unless ``uses_ids``); logits: [batch, vocab] ->
        probabilities [batch, vocab] and the stage that cut each token ([batch, vocab] int16,
        -1: kept; None when the sampler does not track it)."""
        ...

    def pick(self, probs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """probs: [vocab] -> token: [1]."""
        ...

    def report(self) -> StageReport:
        """What the stages did at the last ``probs`` call (nothing copied to the host)."""
        ...

    def notes(
        self, report: StageReport, values: Sequence[float], show: Callable[[int], str]
    ) -> tuple[StageNote, ...]:
        """``report``'s notes in words; ``values``: one row of the host copy of its
        ``note_block()``; ``show`` prints a token id."""
        ...

    def complete(self, generated: Sequence[int]) -> bool | None:
        """Whether a constraint (the grammar) accepts ``generated`` as a finished output;
        None without one. A run cut by its budget before that is marked incomplete."""
        ...

    def accept(self, token: int, prob: float) -> None:
        """The token taken at this position and its probability after the sampler (from the
        step's one host copy, so accepting costs no device sync): stateful stages move on."""
        ...

    def snapshot(self) -> SamplerState:
        """The state the next token starts from."""
        ...

    def restore(self, state: SamplerState) -> None:
        """Go back to a state ``snapshot`` gave (``SamplerState()``: the start)."""
        ...
