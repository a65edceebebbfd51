"""The decode loop: one session base, and sampling token by token on top of it.

``SessionBase`` owns what every method shares: the prompt and generated ids, the history of
``Step`` records, why the run stopped, the text of each token, and turning one row of logits
into a ``Step``. ``stream()`` is the loop: it asks the method (``_advance``) for the next
records until the budget is spent, the model ends its answer or the context is full. Stopping
the iteration is how a caller cancels; the iteration's ``send`` is not used.

``GenerationSession`` adds sampling: the sampler chain (replaced live through ``settings``),
forcing the next token, branching from an earlier step (the KV cache is cropped, not
recomputed) and undoing or redoing such a choice with the exact records it replaced.
Speculative decoding (``engine.decode.speculative``) and beam search (``engine.decode.beam``)
are the same base plus their strategy.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace
from typing import Any

import torch

from engine.decode.measure import Measured, measure
from engine.errors import NonFiniteLogitsError
from engine.models.device import vocab_size
from engine.models.prompt import decode_start
from engine.models.text import TextTrack
from engine.records import (
    KEEP_FULL,
    SAMPLING,
    Candidate,
    Rewind,
    RunSummary,
    StageNote,
    Step,
    lighten_old,
)
from engine.sampling.build import build_chain
from engine.sampling.chain import Sampler
from engine.sampling.settings import DEFAULT_SETTINGS, SamplerSettings
from engine.step.stepper import ModelStepper, Stepper, catch_up, make_stepper, to_feed

Record = Any  # Step | Rewind | engine.records.BeamEvent | SpeculativeReport | ...


class RunClock:
    """Time and tokens of one ``stream()``: the tokens/s it reports counts decode steps only;
    the step that read the prompt is timed on its own (time to first token)."""

    def __init__(self) -> None:
        self.tokens = 0
        self.seconds = 0.0
        self.decode_tokens = 0
        self.decode_seconds = 0.0
        self.first_token_s: float | None = None
        self.prompt_tokens = 0
        self.reading = 0.0  # seconds spent reading the prompt in chunks before the first token
        self.reading_tokens = 0

    def read(self, chunks: Iterator[Any], total: int) -> Iterator[Any]:
        """Pass ``catch_up``'s records through, timing the chunks (not the consumer);
        ``total``: the positions to read before the first token."""
        self.reading_tokens = total
        it = iter(chunks)
        while True:
            start = time.perf_counter()
            record = next(it, None)
            self.reading += time.perf_counter() - start
            if record is None:
                return
            yield record

    def add(self, elapsed: float, fed: int = 1) -> float:
        """Count one token; returns the running decode rate (0 before the first decode step)."""
        self.tokens += 1
        self.seconds += elapsed
        if fed > 1:
            if self.first_token_s is None:
                self.first_token_s = elapsed + self.reading
                self.prompt_tokens = max(fed, self.reading_tokens)
        else:
            self.decode_tokens += 1
            self.decode_seconds += elapsed
        return self.rate()

    def rate(self) -> float:
        if self.decode_seconds > 0:
            return self.decode_tokens / self.decode_seconds
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


def step_seed(seed: int, index: int) -> int:
    # One generator state per (seed, step): a branch replays the same randomness at each index.
    return (seed * 6364136223846793005 + index * 1442695040888963407 + 1) % (2**63 - 1)


class SessionBase:
    """Ids, history, stop reasons and records; subclasses say how the next tokens are chosen."""

    method = ""

    def __init__(
        self,
        model: torch.nn.Module,
        prompt_ids: Sequence[int],
        sampler: SamplerSettings | Sampler = DEFAULT_SETTINGS,
        *,
        tokenizer: Any | None = None,
        eos_token_ids: int | Iterable[int] | None = None,
        top_n: int = 20,
        max_context: int | None = None,
        keep_candidates: int | None = KEEP_FULL,
    ) -> None:
        if top_n < 1:
            raise ValueError("top_n must be >= 1")
        start = decode_start(model, prompt_ids, eos_token_ids, max_context)
        self.model = model
        self.tokenizer = tokenizer
        self.top_n = top_n
        self.is_encoder_decoder = start.is_encoder_decoder
        self.eos_token_ids = start.eos_token_ids
        self.encoder_ids = start.encoder_ids
        self.ids = start.ids
        self.max_context = start.max_context
        self.prompt_length = len(self.ids)
        self.vocab_size = vocab_size(model)
        # Only the newest `keep_candidates` records keep every candidate (memory on long runs).
        self.keep_candidates = keep_candidates
        self.text_track = TextTrack(tokenizer)
        self.history: list[Step] = []
        self.finished = False  # the model ended its answer or the context is full
        self.run_end: int | None = None  # the history's length where the current stream stops
        self.stop_reason: str | None = None
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
        """Takes effect at the next token."""
        self._settings = value
        self.sampler = self._chain_for(value)

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
            prompt_tokens=c.prompt_tokens,
        )  # fmt: skip

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
        finally:
            if self.stop_reason is None:
                done = len(self.history) - start >= budget
                self.stop_reason = "max_new_tokens" if done else "stopped"

    def _advance(self, room: int) -> Iterable[Record]:
        """The records of the next token(s): at least one Step, at most ``room``."""
        raise NotImplementedError

    def _append(
        self, m: Measured, elapsed: float, source: str, forced: bool = False, fed: int = 1
    ) -> Step:
        """Turn one measured token into a Step and add it to the run. ``fed``: positions the
        forward pass read for it (more than one: the prompt, or a catch-up after an undo)."""
        rate = self.clock.add(elapsed, fed)
        text = self.text_track.push(m.token_id) if m.finite else ""
        step = self._make_step(m, len(self.history), elapsed, rate, source, forced, text)
        if fed > 1:
            step = replace(step, prefill=True)
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
    ) -> Step:
        if not m.finite:
            raise NonFiniteLogitsError(index)
        show = self.text_track.show
        labels = self.sampler.labels

        def label(c: float) -> str:
            return labels[int(c)] if 0 <= c < len(labels) else ""

        # What the penalties did (before/after probability), when the chain reported it.
        penalties = m.top_extra if len(m.top_extra) == 3 else ((None,) * len(m.top_ids),) * 3
        notes_of = getattr(self.sampler, "notes", None)
        notes = notes_of(m.extra, show) if notes_of is not None else ()
        return Step(
            index=index,
            token_id=m.token_id,
            text=text,
            token_str=show(m.token_id),
            raw_prob=m.raw_prob,
            prob=m.prob,
            rank=m.rank,
            candidates=tuple(
                Candidate(i, show(i), r, q, label(c))
                if by is None or by < 0
                else Candidate(i, show(i), r, q, label(c), label(by), before, after)
                for i, r, q, c, before, after, by in zip(
                    m.top_ids, m.top_raw, m.top_prob, m.top_cut, *penalties, strict=True
                )
            ),
            survivors=m.survivors,
            entropy_raw=m.entropy_raw,
            entropy=m.entropy,
            step_time=elapsed,
            tokens_per_s=tokens_per_s,
            forced=forced,
            is_eos=m.token_id in self.eos_token_ids,
            source=source,
            special=m.token_id in self.text_track.special_ids,
            stage_notes=tuple(StageNote(stage, text) for stage, text in notes),
        )

    @property
    def mu(self) -> float | None:
        """Mirostat's mu for the next step: the last step's, None at the start (2·tau)."""
        return self.history[-1].mu if self.history else None

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

    def rewind(self, step_index: int) -> Rewind:
        """Discard the tokens from ``step_index`` on."""
        if not 0 <= step_index <= len(self.history):
            raise ValueError(f"step_index must be in [0, {len(self.history)}], got {step_index}")
        del self.history[step_index:]
        del self.ids[self.prompt_length + step_index :]
        self.text_track.truncate(step_index)
        self._truncate_cache(len(self.ids) - 1)  # keep one id to feed for the next logits
        self.finished = False
        self.stop_reason = None
        return Rewind(step_index)

    def _truncate_cache(self, length: int) -> None:
        """Forget cached positions from ``length`` on (methods with a cache)."""


class GenerationSession(SessionBase):
    """Token-by-token generation with full per-step records.

    ``prompt_ids`` are the decoder-only prompt, or the encoder input of an encoder-decoder model
    (whose decoder then starts at ``decoder_start_token_id``).
    """

    method = SAMPLING

    def __init__(
        self,
        model: torch.nn.Module,
        prompt_ids: Sequence[int],
        settings: SamplerSettings | Sampler = DEFAULT_SETTINGS,
        *,
        tokenizer: Any | None = None,
        eos_token_ids: int | Iterable[int] | None = None,
        top_n: int = 20,
        max_context: int | None = None,
        use_cache: bool = True,
        keep_candidates: int | None = KEEP_FULL,
        fast: bool = False,
        seed: int | None = None,
    ) -> None:
        super().__init__(
            model, prompt_ids, settings, tokenizer=tokenizer, eos_token_ids=eos_token_ids,
            top_n=top_n, max_context=max_context, keep_candidates=keep_candidates,
        )  # fmt: skip
        self.stepper = self._make_stepper(use_cache, fast)
        self.device = self.stepper.device
        self.fast = not isinstance(self.stepper, ModelStepper)
        self._seed = seed
        self._forced: int | None = None
        self._generator = torch.Generator(device=self.device)
        # Undo and redo of a token choice: (step index, the records that were replaced).
        self._undo: list[tuple[int, list[Step]]] = []
        self._redo: list[tuple[int, list[Step]]] = []

    @property
    def forward_passes(self) -> int:
        return self.stepper.forward_passes

    @property
    def seed(self) -> int:
        if self._seed is not None:
            return self._seed
        return self._settings.seed if self._settings is not None else 0

    # -- choices between tokens --------------------------------------------------------------

    def force_next(self, token_id: int) -> None:
        """The next step takes this token instead of sampling (manual choice)."""
        self._check_token(token_id)
        self._forced = int(token_id)

    def branch(self, step_index: int, token_id: int) -> Rewind:
        """Go back to ``step_index`` and take ``token_id`` there; the records from there on
        are kept for ``undo``. The KV cache is cropped to the kept prefix, not recomputed."""
        self._check_token(token_id)
        replaced = self.history[step_index:]
        rewind = self.rewind(step_index)
        self._undo.append((step_index, replaced))
        self._redo.clear()
        self._forced = int(token_id)
        return rewind

    def can_undo(self) -> bool:
        return bool(self._undo)

    def can_redo(self) -> bool:
        return bool(self._redo)

    def undo(self) -> list[Record]:
        """Put back the records the last branch replaced: ``[Rewind, *steps]``."""
        return self._swap(self._undo, self._redo)

    def redo(self) -> list[Record]:
        """Take the undone branch again: ``[Rewind, *steps]``."""
        return self._swap(self._redo, self._undo)

    def _swap(self, source: list, target: list) -> list[Record]:
        if not source:
            raise ValueError("There is no choice to undo or redo.")
        index, steps = source.pop()
        target.append((index, self.history[index:]))
        rewind = self.rewind(index)
        for step in steps:  # the same records; the cache catches up at the next forward pass
            self.text_track.push(step.token_id)
            self._add(step)
        return [rewind, *steps]

    def rewind(self, step_index: int) -> Rewind:
        self._forced = None
        return super().rewind(step_index)

    def _truncate_cache(self, length: int) -> None:
        self.stepper.truncate(length)

    def _check_token(self, token_id: int) -> None:
        if not 0 <= int(token_id) < self.vocab_size:
            raise ValueError(
                f"token id {token_id} is outside the vocabulary (0..{self.vocab_size - 1})"
            )

    # -- generating --------------------------------------------------------------------------

    def _advance(self, room: int) -> Iterator[Record]:
        total = to_feed(self.stepper, self.ids)
        yield from self.clock.read(catch_up(self.stepper, self.ids), total)
        yield self.step()

    @torch.inference_mode()
    def step(self) -> Step:
        """Generate one token and return its record."""
        if self.finished:
            raise RuntimeError("Generation has finished; branch or rewind to continue.")
        start = time.perf_counter()
        fed = to_feed(self.stepper, self.ids)
        logits = self.stepper.logits(self.ids)  # [1, vocab]
        # A broken model gives NaN/inf: sample from something harmless, then refuse the step
        # once the flag arrives with the one copy below (no extra device sync per token).
        finite = torch.isfinite(logits).all(dim=-1)  # [1]
        logits = torch.where(finite[:, None], logits, torch.zeros_like(logits))
        ids = self._ids_tensor() if self.sampler.uses_ids else None
        # The step's generator is seeded before the chain: XTC draws from it, then the pick.
        self._generator.manual_seed(step_seed(self.seed, len(self.history)))
        prepare = getattr(self.sampler, "prepare", None)
        if prepare is not None:
            prepare(self._generator, self.mu)
        probs, cut = self.sampler.probs(ids, logits)  # [1, vocab]
        forced, self._forced = self._forced, None
        if forced is not None:
            token = torch.tensor([forced], device=self.device)
            source = "forced"
        else:
            token = self.sampler.pick(probs[0], self._generator)
            source = "greedy" if self.sampler.greedy else "sample"
        report = getattr(self.sampler, "report", None)
        at_top, extra = report.tensors() if report is not None else ((), None)
        # one copy to the host
        m = measure(logits, probs, token, self.top_n, cut, finite, at_top, extra)[0]
        elapsed = time.perf_counter() - start  # after the copy, which waits for the device
        step = self._append(m, elapsed, source, forced=forced is not None, fed=fed)
        next_mu = getattr(self.sampler, "next_mu", None)
        mu = next_mu(m.prob) if next_mu is not None else None
        if mu is not None:  # mirostat's state lives in the history, so rewinds restore it
            step = self.history[-1] = replace(step, mu=mu)
        return step

    def _ids_tensor(self) -> torch.Tensor:
        return torch.tensor([self.ids], dtype=torch.long, device=self.device)  # [1, seq]


def stream_generate(
    model: torch.nn.Module,
    prompt_ids: Sequence[int],
    settings: SamplerSettings = DEFAULT_SETTINGS,
    **kwargs: Any,
) -> Iterator[Step]:
    """One generator for both model kinds: yields a ``Step`` per generated token."""
    session = GenerationSession(model, prompt_ids, settings, **kwargs)
    yield from session.stream()
