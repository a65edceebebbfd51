"""Sampling token by token: ``GenerationSession``, on ``engine.decode.base.SessionBase``.

It adds the sampler chain (replaced live through ``settings``), forcing the next token,
branching from an earlier step (the KV cache is cropped, not recomputed) and undoing or redoing
such a choice with the exact records it replaced. The step body is transformers' ``_sample``:
logits, the sampler, a pick, one host copy. Where the logits come from is the one thing a
source changes (``_open_source``, ``_logits``, ``_measure``): the local model here, a served
model in ``engine.serve.remote_session``.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from engine.decode.base import Record, SessionBase
from engine.decode.measure import Measured, finite_rows, greedy_measured, measure
from engine.models.prompt import DecodeStart
from engine.records import KEEP_FULL, SAMPLING, Rewind, Step
from engine.sampling.sampler import NO_REPORT, Sampler, StageReport
from engine.sampling.settings import DEFAULT_SETTINGS, SamplerSettings
from engine.step.stepper import ModelStepper, catch_up, to_feed


@dataclass(frozen=True)
class StepLogits:
    """What a logits source gives one step."""

    logits: torch.Tensor  # [1, vocab] float32, finite
    finite: torch.Tensor  # [1] bool: the source's own logits had no NaN or inf
    fed: int  # positions the source read for them (more than one: the prompt, a catch-up)


def step_seed(seed: int, index: int) -> int:
    # One generator state per (seed, step): a branch replays the same randomness at each index.
    return (seed * 6364136223846793005 + index * 1442695040888963407 + 1) % (2**63 - 1)


class GenerationSession(SessionBase):
    """Token-by-token generation with full per-step records.

    ``prompt_ids`` are the decoder-only prompt, or the encoder input of an encoder-decoder model
    (whose decoder then starts at ``decoder_start_token_id``). ``model`` None: a source with no
    local model (a served one), which gives ``start`` and ``vocab`` and overrides the source.
    """

    method = SAMPLING
    # a greedy step may be taken whole from the logits (measure.greedy_measured): not where a
    # source measures its logits its own way (a served model's top-N)
    whole_greedy = True

    def __init__(
        self,
        model: torch.nn.Module | None,
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
        start: DecodeStart | None = None,
        vocab: int | None = None,
    ) -> None:
        super().__init__(
            model, prompt_ids, settings, tokenizer=tokenizer, eos_token_ids=eos_token_ids,
            top_n=top_n, max_context=max_context, keep_candidates=keep_candidates, start=start,
            vocab=vocab,
        )  # fmt: skip
        self.device = self._open_source(use_cache, fast)
        self._seed = seed
        self._forced: int | None = None
        self._generator = torch.Generator(device=self.device)
        # Undo and redo of a token choice: (step index, the records that were replaced).
        self._undo: list[tuple[int, list[Step]]] = []
        self._redo: list[tuple[int, list[Step]]] = []

    @classmethod
    def over(
        cls, bundle: Any, prompt_ids: Sequence[int], settings: SamplerSettings, **options: Any
    ) -> GenerationSession:
        """A session on a loaded model (``engine.models.loading.ModelBundle``): its model,
        tokenizer and end-of-text ids; ``options`` as the constructor takes them."""
        options = {"tokenizer": bundle.tokenizer, "eos_token_ids": bundle.eos_token_ids, **options}
        return cls(bundle.model, prompt_ids, settings, **options)

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
        self.sync_sampler()
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

    # -- generating: one step body; a source says where the logits come from ----------------

    def _open_source(self, use_cache: bool, fast: bool) -> torch.device:
        """Set up the logits source; returns its device. Here: the local model's stepper."""
        self.stepper = self._make_stepper(use_cache, fast)
        self.fast = not isinstance(self.stepper, ModelStepper)
        return self.stepper.device

    def _advance(self, room: int) -> Iterator[Record]:
        total = to_feed(self.stepper, self.ids)
        if total > 1:  # a prompt or a catch-up: read in chunks before the token
            yield from self.clock.read(catch_up(self.stepper, self.ids), total)
        yield self.step()

    def _logits(self) -> StepLogits:
        """The logits source: the next position's logits from the local model."""
        logits, fed, _ = self._model_logits()
        return self._checked(logits, fed)

    def _model_logits(
        self, greedy_n: int | None = None
    ) -> tuple[torch.Tensor, int, torch.Tensor | None]:
        """The local model's logits for the next position [1, vocab], as it gives them, the
        positions it read for them, and, where ``greedy_n`` is given and the stepper makes
        both in one call (``FastStepper.greedy_logits``), a greedy step's packed record of the
        top ``greedy_n`` (else None). A wrapper of the stepper (lockstep's recorder) sees
        both ways."""
        fed = to_feed(self.stepper, self.ids)
        whole = getattr(self.stepper, "greedy_logits", None) if greedy_n is not None else None
        both = whole(self.ids, greedy_n) if whole is not None else None
        if both is not None:
            return both[0], fed, both[1]
        return self.stepper.logits(self.ids), fed, None

    @staticmethod
    def _checked(logits: torch.Tensor, fed: int) -> StepLogits:
        # A broken model gives NaN/inf: sample from something harmless, then refuse the step
        # once the flag arrives with the one copy (engine.decode.measure.finite_rows).
        logits, finite = finite_rows(logits)
        return StepLogits(logits, finite, fed)

    def _measure(
        self,
        source: StepLogits,
        probs: torch.Tensor,
        token: torch.Tensor,
        cut: torch.Tensor | None,
        report: StageReport,
    ) -> Measured:
        """The step's numbers, in one copy to the host (a source that shows only part of the
        distribution reads them its own way)."""
        return measure(
            source.logits, probs, token, self.top_n, cut, source.finite, report.penalties,
            report.note_block(),
        )[0]  # fmt: skip

    @torch.inference_mode()
    def step(self) -> Step:
        """Generate one token and return its record (transformers' ``_sample`` body: logits,
        processors, pick; only ``_logits``/``_measure`` differ between sources, and a greedy
        step whole, where ``whole_greedy`` allows it, reads ``_model_logits``)."""
        if self.finished:
            raise RuntimeError("Generation has finished; branch or rewind to continue.")
        start = time.perf_counter()
        if self._forced is None and self.whole_greedy and self.sampler.plain_greedy:
            # the greedy step whole from the model's logits (with them, where the stepper
            # makes both in one call), their finiteness read in its first pass; logits with a
            # NaN or an inf take the chain's way below
            logits, fed, row = self._model_logits(self.top_n)
            m = greedy_measured(logits, self.top_n, row=row)
            if m is not None and m.finite:
                elapsed = time.perf_counter() - start
                return self._append(m, elapsed, "greedy", False, fed, NO_REPORT)
            source = self._checked(logits, fed)
        else:
            source = self._logits()
        ids = self._ids_tensor() if self.sampler.uses_ids else None
        # The step's generator is seeded before the chain: XTC draws from it, then the pick.
        self._generator.manual_seed(step_seed(self.seed, len(self.history)))
        self.sampler.prepare(self._generator)
        probs, cut = self.sampler.probs(ids, source.logits)  # [1, vocab]
        report = self.sampler.report()
        forced, self._forced = self._forced, None
        if forced is not None:  # the user's choice stands even where the grammar has none
            token = torch.tensor([forced], device=self.device)
            how = "forced"
        elif report.stop(0) is not None:  # nothing the grammar allows is left: end here
            raise self.halt(report.stop(0) or "")
        else:
            token = self.sampler.pick(probs[0], self._generator)
            how = "greedy" if self.sampler.greedy else "sample"
        m = self._measure(source, probs, token, cut, report)
        elapsed = time.perf_counter() - start  # after the copy, which waits for the device
        return self._append(m, elapsed, how, forced is not None, source.fed, report)

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
