"""Drop-in API of romsto/Speculative-Decoding (the project this lab grew from; "the reference
API" below), built on the same sessions as everything else.

* Processors with its constructor arguments: ``GreedyProcessor``, ``MultinomialProcessor``,
  ``TopKProcessor``, ``NucleusProcessor``, ``TopKNucleusProcessor``. Calling one on logits
  returns probabilities; ``.sample(probs)`` returns the token id as a ``[batch, 1]`` long tensor
  (``int()`` works for batch 1). As in the reference, top-k / top-p are applied to the raw
  logits and the temperature afterwards. Unlike it, the logits are never modified in place and
  sampling uses the processor's own ``torch.Generator`` (``seed=`` makes runs reproducible),
  never the global RNG.
* ``autoregressive_generate``, ``autoregressive_generate_encoder_decoder``,
  ``speculative_generate``, ``speculative_generate_encoder_decoder`` and
  ``ngram_assisted_speculative_generate`` with its signatures (see REFERENCE.md).

Differences from the reference, on purpose: the encoder runs once per call; the cached path
feeds only the new token (the reference re-fed the whole prefix); greedy speculative decoding
accepts a draft only when it is the target's argmax; ``pad_token_id`` is accepted but unused (no
padded buffer is preallocated).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from engine.decode.session import GenerationSession
from engine.decode.speculative import (
    ModelDrafter,
    NGramDrafter,
    SpeculativeSession,
    check_same_vocab,
)
from engine.errors import DrafterMismatchError, EmptyPromptError
from engine.models.device import context_length
from engine.records import SpeculativeReport, StageNote, Step
from engine.sampling.base import LogitsProcessor
from engine.sampling.chain import apply_chain
from engine.sampling.checks import is_number
from engine.sampling.sampler import NO_REPORT, Sampler, SamplerState, StageReport
from engine.sampling.truncation import TopK, TopP


class CompatProcessor:
    """Reference protocol: ``probs = proc(logits)``; ``token = proc.sample(probs)``."""

    greedy = False

    def __init__(self, temperature: float = 1.0, *, seed: int | None = None) -> None:
        if not (is_number(temperature) and temperature > 0):
            raise ValueError(f"temperature must be > 0, got {temperature!r}")
        self.temperature = float(temperature)
        self.seed = seed
        self._generator: torch.Generator | None = None

    def filters(self) -> list[LogitsProcessor]:
        return []

    def __call__(self, logits: torch.Tensor) -> torch.Tensor:
        # logits: [batch, vocab] (or [vocab]) -> probabilities of the same shape
        scores = logits.float()
        ids = torch.empty((*scores.shape[:-1], 0), dtype=torch.long, device=scores.device)
        scores, _ = apply_chain(self.filters(), ids, scores)
        return F.softmax(scores / self.temperature, dim=-1)

    def generator_for(self, device: torch.device) -> torch.Generator:
        if self._generator is None or self._generator.device != device:
            self._generator = torch.Generator(device=device)
            if self.seed is None:
                self._generator.seed()
            else:
                self._generator.manual_seed(self.seed)
        return self._generator

    def sample(self, probs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        # probs: [batch, vocab] -> [batch, 1]
        if self.greedy:
            return probs.argmax(dim=-1, keepdim=True)
        gen = generator if generator is not None else self.generator_for(probs.device)
        return torch.multinomial(probs, num_samples=1, generator=gen)


class GreedyProcessor(CompatProcessor):
    """Always the most probable token."""

    greedy = True


class MultinomialProcessor(CompatProcessor):
    """Sample from the full distribution at the given temperature."""


class TopKProcessor(CompatProcessor):
    def __init__(self, temperature: float, top_k: int, *, seed: int | None = None) -> None:
        super().__init__(temperature, seed=seed)
        self.top_k = TopK(top_k)

    def filters(self) -> list[LogitsProcessor]:
        return [self.top_k]


class NucleusProcessor(CompatProcessor):
    def __init__(self, temperature: float, top_p: float, *, seed: int | None = None) -> None:
        super().__init__(temperature, seed=seed)
        self.top_p = TopP(top_p)

    def filters(self) -> list[LogitsProcessor]:
        return [self.top_p]


class TopKNucleusProcessor(CompatProcessor):
    def __init__(
        self, temperature: float, top_k: int, top_p: float, *, seed: int | None = None
    ) -> None:
        super().__init__(temperature, seed=seed)
        self.top_k = TopK(top_k)
        self.top_p = TopP(top_p)

    def filters(self) -> list[LogitsProcessor]:
        return [self.top_k, self.top_p]


class CompatSampler(Sampler):
    """A reference processor as a session's sampler: it draws with its own generator and has
    no stages to report and no state to carry."""

    uses_ids = False
    stateful = False
    labels: tuple[str, ...] = ()

    def __init__(self, processor: CompatProcessor) -> None:
        self.processor = processor
        self.greedy = processor.greedy

    def prepare(self, generator: torch.Generator | None) -> None:
        """Nothing to seed: the processor keeps its own generator (the reference's rule)."""

    def probs(self, input_ids: torch.Tensor | None, logits: torch.Tensor) -> tuple[Any, None]:
        return self.processor(logits), None

    def pick(self, probs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        return self.processor.sample(probs[None]).reshape(1)

    def report(self) -> StageReport:
        return NO_REPORT

    def notes(
        self, report: StageReport, values: Sequence[float], show: Callable[[int], str]
    ) -> tuple[StageNote, ...]:
        return ()

    def complete(self, generated: Sequence[int]) -> bool | None:
        return None  # no constraint

    def accept(self, token: int, prob: float) -> None:
        """Stateless."""

    def snapshot(self) -> SamplerState:
        return SamplerState()

    def restore(self, state: SamplerState) -> None:
        """Stateless."""


# --------------------------------------------------------------------------------------------
# Generation functions
# --------------------------------------------------------------------------------------------


def _budget(model: torch.nn.Module, inputs: list[int], max_gen_len: int) -> int:
    """Tokens that fit: a decoder-only prompt counts against the context."""
    if len(inputs) == 0:
        raise EmptyPromptError("The prompt is empty: type something for the model to continue.")
    limit = None if model.config.is_encoder_decoder else context_length(model)
    return max_gen_len if limit is None else max(0, min(max_gen_len, limit - len(inputs)))


def _print_step(step: Step) -> None:
    print(f"step {step.index}: token {step.token_id} p={step.prob:.4f}")


def _generate(
    inputs: list[int], model: torch.nn.Module, max_gen_len: int,
    logits_processor: CompatProcessor, eos_tokens_id: int | list[int], use_cache: bool,
    debug: bool,
) -> list[int]:  # fmt: skip
    """The decoder ids after a plain run (prompt or decoder start included)."""
    steps = _budget(model, inputs, max_gen_len)
    session = GenerationSession(
        model, inputs, CompatSampler(logits_processor), eos_token_ids=eos_tokens_id, top_n=1,
        use_cache=use_cache, fast=use_cache, keep_candidates=0,
    )  # fmt: skip
    if steps == 0:
        return session.ids
    for step in session.stream(steps):
        if debug:
            _print_step(step)
    return session.ids


def autoregressive_generate(
    inputs: list[int],
    model: torch.nn.Module,
    max_gen_len: int = 40,
    logits_processor: CompatProcessor = GreedyProcessor(),  # noqa: B008 - stateless, as in the reference
    eos_tokens_id: int | list[int] = 1,
    pad_token_id: int = 0,
    use_cache: bool = False,
    debug: bool = False,
) -> list[int]:
    """Decoder-only generation; returns the generated ids (not the prompt), EOS included.
    ``use_cache`` True and False give the same tokens."""
    ids = _generate(inputs, model, max_gen_len, logits_processor, eos_tokens_id, use_cache, debug)
    return ids[len(inputs) :]


def autoregressive_generate_encoder_decoder(
    inputs: list[int],
    model: torch.nn.Module,
    max_gen_len: int = 40,
    logits_processor: CompatProcessor = GreedyProcessor(),  # noqa: B008 - stateless, as in the reference
    eos_tokens_id: int | list[int] = 1,
    pad_token_id: int = 0,
    use_cache: bool = False,
    debug: bool = False,
) -> list[int]:
    """Encoder-decoder generation. The encoder runs once; the decoder starts at
    ``model.config.decoder_start_token_id``. Returns the decoder ids: the start id, then up to
    ``max_gen_len`` generated ids, EOS included when produced."""
    if model.config.decoder_start_token_id is None:
        raise ValueError("This encoder-decoder model has no decoder_start_token_id in its config.")
    return _generate(inputs, model, max_gen_len, logits_processor, eos_tokens_id, use_cache, debug)


def _speculate(
    target: torch.nn.Module,
    inputs: list[int],
    drafter: ModelDrafter | NGramDrafter,
    processor: CompatProcessor,
    eos_tokens_id: int | list[int],
    gamma: int,
    max_gen_len: int,
    use_cache: bool,
    first_target: bool,
    skip_sample_adjustment: bool,
    debug: bool,
    tokenizer: Any | None,
) -> SpeculativeSession:
    session = SpeculativeSession(
        target, inputs, drafter, CompatSampler(processor), eos_token_ids=eos_tokens_id,
        gamma=gamma, use_cache=use_cache, first_target=first_target,
        skip_sample_adjustment=skip_sample_adjustment, seed=processor.seed or 0, top_n=1,
        fast=use_cache, keep_candidates=0,
    )  # fmt: skip
    show = (lambda t: repr(tokenizer.decode([t]))) if tokenizer is not None else str
    round_steps: list[Step] = []
    for record in session.stream(_budget(target, inputs, max_gen_len)):
        if isinstance(record, Step):
            round_steps.append(record)
        elif isinstance(record, SpeculativeReport) and debug:
            parts = [f"{show(s.token_id)}{'*' if s.source == 'draft' else ''}" for s in round_steps]
            print(f"round {record.rounds}: {' '.join(parts)}  (* = accepted draft)")
            round_steps = []
    return session


def speculative_generate(
    inputs: list[int],
    drafter: torch.nn.Module,
    target: torch.nn.Module,
    tokenizer: Any = None,
    gamma: int = 5,
    logits_processor: CompatProcessor = GreedyProcessor(),  # noqa: B008 - stateless, as in the reference
    max_gen_len: int = 40,
    eos_tokens_id: int | list[int] = 1,
    pad_token_id: int = 0,
    use_cache: bool = False,
    skip_sample_adjustment: bool = False,
    first_target: bool = True,
    debug: bool = False,
) -> tuple[list[int], float]:
    """Speculative decoding for decoder-only models. Returns (generated ids, acceptance rate =
    accepted drafts / drafted tokens)."""
    check_same_vocab(drafter, target)
    session = _speculate(
        target, inputs, ModelDrafter(drafter, use_cache=use_cache), logits_processor,
        eos_tokens_id, gamma, max_gen_len, use_cache, first_target, skip_sample_adjustment,
        debug, tokenizer,
    )  # fmt: skip
    return session.generated_ids, session.stats.acceptance_rate


def speculative_generate_encoder_decoder(
    inputs: list[int],
    drafter: torch.nn.Module,
    target: torch.nn.Module,
    tokenizer: Any = None,
    gamma: int = 5,
    logits_processor: CompatProcessor = GreedyProcessor(),  # noqa: B008 - stateless, as in the reference
    max_gen_len: int = 40,
    eos_tokens_id: int | list[int] = 1,
    pad_token_id: int = 0,
    use_cache: bool = False,
    skip_sample_adjustment: bool = False,
    first_target: bool = True,
    debug: bool = False,
) -> tuple[list[int], float]:
    """Encoder-decoder twin: each model's encoder runs once; returns (decoder ids starting with
    the decoder start id, acceptance rate)."""
    check_same_vocab(drafter, target)
    if drafter.config.decoder_start_token_id != target.config.decoder_start_token_id:
        raise DrafterMismatchError(
            "The draft and target models start decoding from different tokens."
        )
    session = _speculate(
        target, inputs, ModelDrafter(drafter, inputs, use_cache=use_cache), logits_processor,
        eos_tokens_id, gamma, max_gen_len, use_cache, first_target, skip_sample_adjustment,
        debug, tokenizer,
    )  # fmt: skip
    return session.ids, session.stats.acceptance_rate


def ngram_assisted_speculative_generate(
    inputs: list[int],
    ngram: NGramDrafter | None,
    target: torch.nn.Module,
    tokenizer: Any = None,
    gamma: int = 5,
    filler_top_k: int = 3,
    logits_processor: CompatProcessor = GreedyProcessor(),  # noqa: B008 - stateless, as in the reference
    max_gen_len: int = 40,
    eos_tokens_id: int | list[int] = 1,
    pad_token_id: int = 0,
    use_cache: bool = False,
    first_target: bool = True,
    stop_if_unknown: bool = False,
    debug: bool = False,
) -> tuple[list[int], float]:
    """N-gram speculative decoding (the reference's NASD). ``ngram`` may be None (a default
    prompt-lookup drafter). Unlike the reference's DynaGram, our drafter only looks up the text
    itself, so ``filler_top_k`` has no effect; without a match the round drafts nothing, as
    with the reference's ``stop_if_unknown``."""
    drafter = ngram if ngram is not None else NGramDrafter()
    session = _speculate(
        target, inputs, drafter, logits_processor, eos_tokens_id, gamma, max_gen_len, use_cache,
        first_target, False, debug, tokenizer,
    )  # fmt: skip
    enc = bool(getattr(target.config, "is_encoder_decoder", False))
    return (session.ids if enc else session.generated_ids), session.stats.acceptance_rate
