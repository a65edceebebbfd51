"""The decode loop every method shares: ``SessionBase``.

It owns the prompt and generated ids, the history of ``Step`` records, why the run stopped,
the text of each token, the sampler's state across rewinds (``sync_sampler``), and turning one
measured row into a ``Step``. ``stream()`` is the loop: it asks the method (``_advance``) for
the next records until the budget is spent, the model ends its answer or the context is full.
Stopping the iteration is how a caller cancels; the iteration's ``send`` is not used.

Sampling token by token (``engine.decode.session``), speculative decoding, beam search and
contrastive search are this base plus their strategy.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace
from typing import Any

import torch

from engine.decode.clock import RunClock
from engine.decode.measure import Measured
from engine.errors import GrammarStop, NonFiniteLogitsError
from engine.models.device import vocab_size
from engine.models.prompt import DecodeStart, decode_start
from engine.models.text import TextTrack
from engine.records import (
    GRAMMAR_STOP,
    KEEP_FULL,
    Candidate,
    Rewind,
    RunSummary,
    Step,
    lighten_old,
)
from engine.sampling.build import build_chain
from engine.sampling.sampler import NO_REPORT, Sampler, SamplerState, StageReport
from engine.sampling.settings import DEFAULT_SETTINGS, SamplerSettings
from engine.step.stepper import Stepper, make_stepper

Record = Any  # Step | Rewind | engine.records.BeamEvent | SpeculativeReport | ...


class SessionBase:
    """Ids, history, stop reasons and records; subclasses say how the next tokens are chosen."""

    method = ""

    def __init__(
        self,
        model: torch.nn.Module | None,
        prompt_ids: Sequence[int],
        sampler: SamplerSettings | Sampler = DEFAULT_SETTINGS,
        *,
        tokenizer: Any | None = None,
        eos_token_ids: int | Iterable[int] | None = None,
        top_n: int = 20,
        max_context: int | None = None,
        keep_candidates: int | None = KEEP_FULL,
        start: DecodeStart | None = None,
        vocab: int | None = None,
    ) -> None:
        """``model`` None: a served model, whose ``start`` (the checked prompt) and ``vocab``
        (0: unknown) the caller gives."""
        if top_n < 1:
            raise ValueError("top_n must be >= 1")
        if start is None or vocab is None:
            if model is None:
                raise ValueError("a session without a model needs its start and vocabulary")
            start = start or decode_start(model, prompt_ids, eos_token_ids, max_context)
            vocab = vocab if vocab is not None else vocab_size(model)
        self.model = model
        self.tokenizer = tokenizer
        self.top_n = top_n
        self.is_encoder_decoder = start.is_encoder_decoder
        self.eos_token_ids = start.eos_token_ids
        self.encoder_ids = start.encoder_ids
        self.ids = start.ids
        self.max_context = start.max_context
        self.prompt_length = len(self.ids)
        self.vocab_size = vocab
        # Only the newest `keep_candidates` records keep every candidate (memory on long runs).
        self.keep_candidates = keep_candidates
        self.text_track = TextTrack(tokenizer)
        self.history: list[Step] = []
        self.finished = False  # the model ended its answer or the context is full
        self.run_end: int | None = None  # the history's length where the current stream stops
        self.stop_reason: str | None = None
        self.stop_note = ""  # the grammar's reason when it stopped the run
        self._settings: SamplerSettings | None = None
        self.sampler: Sampler
        if isinstance(sampler, SamplerSettings):
            self.settings = sampler
        else:
            self.sampler = sampler
        self.clock = RunClock()

    def _make_stepper(self, use_cache: bool, fast: bool) -> Stepper:
        return make_stepper(self.model, self.encoder_ids or None, use_cache, fast, self.max_context)

    # -- settings: replaced between tokens ---------------------------------------------------

    @property
    def settings(self) -> SamplerSettings | None:
        return self._settings

    @settings.setter
    def settings(self, value: SamplerSettings) -> None:
        """Takes effect at the next token; the new chain goes on from the run's state."""
        self._settings = value
        self.sampler = self._chain_for(value)
        self.sync_sampler()

    def sync_sampler(self) -> None:
        """Give the sampler the state the history ends with (mirostat's mu, kept in each Step):
        after a rewind, undo, redo or resume, and for a new chain."""
        self.sampler.restore(SamplerState(self.history[-1].mu if self.history else None))

    def _chain_for(self, settings: SamplerSettings) -> Sampler:
        return build_chain(
            settings, self.prompt_length, self.eos_token_ids, tokenizer=self.tokenizer
        )

    # -- reading -----------------------------------------------------------------------------

    @property
    def generated_ids(self) -> list[int]:
        return self.ids[self.prompt_length :]

    @property
    def text(self) -> str:
        return "".join(s.text for s in self.history)

    def summary(self) -> RunSummary:
        c = self.clock
        return RunSummary(
            tokens=c.tokens, seconds=c.seconds, tokens_per_s=c.rate(),
            stop_reason=self.stop_reason or "stopped", text=self.text,
            token_ids=tuple(self.generated_ids), first_token_s=c.first_token_s,
            prompt_tokens=c.prompt_tokens, note=self.stop_note,
            incomplete=self.stop_reason != GRAMMAR_STOP and self.sampler.complete(
                self.generated_ids) is False,
        )  # fmt: skip

    def halt(self, message: str) -> GrammarStop:
        """The grammar cannot go on: the run ends here, keeping what it made (a rewind or a
        new choice goes on from an earlier step). Returns the exception to raise."""
        self.finished, self.stop_reason, self.stop_note = True, GRAMMAR_STOP, message
        return GrammarStop(message)

    # -- the loop ----------------------------------------------------------------------------

    def stream(self, max_new_tokens: int | None = None) -> Iterator[Record]:
        """Yield the records of up to ``max_new_tokens`` more tokens (default: the settings'
        value), stopping at EOS or at the end of the context. Close the generator (or stop
        iterating) to cancel."""
        if max_new_tokens is not None:
            budget = max_new_tokens
        else:
            budget = self._settings.max_new_tokens if self._settings is not None else 0
        self.clock = RunClock()
        if not self.finished:
            self.stop_reason = None
        # Tokens produced = how much the history grew: a method may replace steps on the way
        # (beam search shows its best beam, which changes), so yielded Steps are not counted.
        start = len(self.history)
        self.run_end = start + budget
        try:
            while not self.finished and len(self.history) - start < budget:
                yield from self._advance(budget - (len(self.history) - start))
        except GrammarStop:
            pass  # halt() recorded why; the records made so far stand
        finally:
            if self.stop_reason is None:
                done = len(self.history) - start >= budget
                self.stop_reason = "max_new_tokens" if done else "stopped"

    def _advance(self, room: int) -> Iterable[Record]:
        """The records of the next token(s): at least one Step, at most ``room``."""
        raise NotImplementedError

    def _append(
        self,
        m: Measured,
        elapsed: float,
        source: str,
        forced: bool = False,
        fed: int = 1,
        report: StageReport = NO_REPORT,
    ) -> Step:
        """Turn one measured token into a Step, let the sampler accept it and add it to the run.
        ``fed``: positions the forward pass read for it (more than one: the prompt, or a
        catch-up after an undo); ``report``: what the sampler's stages did for this row."""
        rate = self.clock.add(elapsed, fed)
        text = self.text_track.push(m.token_id) if m.finite else ""
        step = self._make_step(m, len(self.history), elapsed, rate, source, forced, text, report)
        self.sampler.accept(m.token_id, m.prob)
        mu = self.sampler.snapshot().mu  # kept in the record: a rewind restores it from there
        if fed > 1 or mu is not None:
            step = replace(step, prefill=fed > 1, mu=mu)
        self._add(step)
        return step

    def _make_step(
        self,
        m: Measured,
        index: int,
        elapsed: float,
        tokens_per_s: float,
        source: str,
        forced: bool = False,
        text: str = "",
        report: StageReport = NO_REPORT,
    ) -> Step:
        if not m.finite:
            raise NonFiniteLogitsError(index)
        show = self.text_track.show
        labels = self.sampler.labels

        def label(c: float) -> str:
            return labels[int(c)] if 0 <= c < len(labels) else ""

        # What the penalties did (before/after probability), when a penalty stage ran.
        pen, none = m.penalties, (None,) * len(m.top_ids)
        before, after, by = (
            (pen.before, pen.after, pen.changed_by) if pen is not None else (none, none, none)
        )
        candidates = tuple([  # a list, not a generator: a few microseconds a step
            Candidate(i, show(i), r, q, label(c))
            if b is None or b < 0
            else Candidate(i, show(i), r, q, label(c), label(b), p0, p1)
            for i, r, q, c, p0, p1, b in zip(
                m.top_ids, m.top_raw, m.top_prob, m.top_cut, before, after, by, strict=True
            )
        ])  # fmt: skip
        return Step(
            index=index,
            token_id=m.token_id,
            text=text,
            token_str=show(m.token_id),
            raw_prob=m.raw_prob,
            prob=m.prob,
            rank=m.rank,
            candidates=candidates,
            survivors=m.survivors,
            entropy_raw=m.entropy_raw,
            entropy=m.entropy,
            step_time=elapsed,
            tokens_per_s=tokens_per_s,
            forced=forced,
            is_eos=m.token_id in self.eos_token_ids,
            source=source,
            special=m.token_id in self.text_track.special_ids,
            stage_notes=self.sampler.notes(report, m.extra, show),
            other_p=m.other_p,
            entropy_lower_bound=m.entropy_lower_bound,
        )

    @property
    def mu(self) -> float | None:
        """Mirostat's mu for the next step (None without mirostat)."""
        return self.sampler.snapshot().mu

    def _add(self, step: Step) -> None:
        self.ids.append(step.token_id)
        self.history.append(step)
        lighten_old(self.history, 1, self.keep_candidates)
        if step.is_eos:
            self.finished, self.stop_reason = True, "eos"
        elif self.max_context is not None and len(self.ids) >= self.max_context:
            self.finished, self.stop_reason = True, "context"

    def resume(self, steps: Sequence[Step]) -> None:
        """Take over a run recorded earlier (an autosave): its steps become this session's
        history as they were; the next step reads prompt + tokens in one (chunked) prefill and
        goes on from there."""
        if self.history:
            raise ValueError("resume() needs a fresh session")
        for i, step in enumerate(steps):
            if step.index != i:
                raise ValueError(f"step {i} of the saved run has index {step.index}")
            self.text_track.push(step.token_id)
            self._add(step)
        self.sync_sampler()

    def rewind(self, step_index: int) -> Rewind:
        """Discard the tokens from ``step_index`` on."""
        if not 0 <= step_index <= len(self.history):
            raise ValueError(f"step_index must be in [0, {len(self.history)}], got {step_index}")
        del self.history[step_index:]
        del self.ids[self.prompt_length + step_index :]
        self.text_track.truncate(step_index)
        self._truncate_cache(len(self.ids) - 1)  # keep one id to feed for the next logits
        self.finished = False
        self.stop_reason, self.stop_note = None, ""
        self.sync_sampler()
        return Rewind(step_index)

    def _truncate_cache(self, length: int) -> None:
        """Forget cached positions from ``length`` on (methods with a cache)."""
