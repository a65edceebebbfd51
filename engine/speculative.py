"""Speculative decoding (Leviathan et al. 2023; Chen et al. 2023).

A drafter proposes up to ``gamma`` tokens; the target scores all of them in one forward pass.
Draft token x at position i is accepted with probability min(1, p_i(x) / q_i(x)), where p is
the target's distribution after the sampler chain and q the drafter's. At the first rejection
the next token is drawn from normalize(max(0, p_i - q_i)); when every draft is accepted, one
bonus token is drawn from the target's next distribution. This keeps the output distributed
exactly as the target alone would sample it. With greedy settings a draft is accepted while it
equals the target's argmax, so the output equals plain greedy decoding token for token.

Two drafters:
* ``ModelDrafter``: a smaller model that shares the target's tokenizer.
* ``NGramDrafter``: prompt lookup (the seed's NASD idea): the last n tokens are matched
  against the prompt and the text so far, and what followed the most recent match is proposed.
  Its proposal is a point mass (q(x) = 1), so acceptance is min(1, p(x)).

Rejected positions are removed from both KV caches by cropping (``ModelStepper`` keeps track
of which ids it has cached and crops to the common prefix).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

import torch
import torch.nn.functional as F

from engine.errors import DrafterMismatchError, NonFiniteLogitsError
from engine.generate import (
    ModelStepper,
    StepRecorder,
    context_length,
    decode_start,
    make_stepper,
    summarise,
)
from engine.processors import GreedyProcessor, SeedLogitsProcessor, apply_chain
from engine.records import Step
from engine.settings import SamplerSettings

# --------------------------------------------------------------------------------------------
# Samplers: one interface over SamplerSettings chains and the seed's processors
# --------------------------------------------------------------------------------------------


class Sampler(Protocol):
    greedy: bool

    def probs(self, ids: Sequence[int], logits: torch.Tensor) -> torch.Tensor: ...


class ChainSampler:
    """Probabilities from a ``SamplerSettings`` chain. logits: [vocab] -> probs: [vocab]."""

    def __init__(
        self, settings: SamplerSettings, prompt_length: int, eos_token_ids: Sequence[int]
    ) -> None:
        self.settings = settings
        self.greedy = settings.greedy
        self.chain = settings.build_chain(prompt_length, eos_token_ids)

    def probs(self, ids: Sequence[int], logits: torch.Tensor) -> torch.Tensor:
        input_ids = torch.tensor([list(ids)], dtype=torch.long, device=logits.device)
        return F.softmax(apply_chain(self.chain, input_ids, logits[None]), dim=-1)[0]


class SeedSampler:
    """Probabilities from a seed processor (``GreedyProcessor`` and friends)."""

    def __init__(self, processor: SeedLogitsProcessor) -> None:
        self.processor = processor
        self.greedy = bool(getattr(processor, "greedy", False))

    def probs(self, ids: Sequence[int], logits: torch.Tensor) -> torch.Tensor:
        return self.processor(logits[None])[0]


def draw(probs: torch.Tensor, greedy: bool, generator: torch.Generator) -> torch.Tensor:
    """probs: [vocab] -> token: [1]."""
    if greedy:
        return probs.argmax().reshape(1)
    return torch.multinomial(probs, 1, generator=generator)


# --------------------------------------------------------------------------------------------
# Drafters
# --------------------------------------------------------------------------------------------


class ModelDrafter:
    """Drafts with a smaller model, sampling from its own processed distribution."""

    kind = "model"

    def __init__(
        self,
        model: torch.nn.Module,
        encoder_input_ids: Sequence[int] | None = None,
        use_cache: bool = True,
    ) -> None:
        self.model = model
        self.stepper = ModelStepper(model, encoder_input_ids, use_cache=use_cache)

    @property
    def forward_passes(self) -> int:
        return self.stepper.forward_passes

    def propose(
        self, ids: Sequence[int], k: int, sampler: Sampler, generator: torch.Generator
    ) -> tuple[list[int], torch.Tensor | None]:
        """Returns k draft ids and their distributions q: [k, vocab]."""
        drafts: list[int] = []
        qs = []
        seq = list(ids)
        for _ in range(k):
            logits = self.stepper.logits(seq)[0]  # [vocab]
            q = sampler.probs(seq, logits)
            token = int(draw(q, sampler.greedy, generator))
            qs.append(q)
            drafts.append(token)
            seq.append(token)
        return drafts, (torch.stack(qs) if qs else None)


class NGramDrafter:
    """Prompt-lookup drafting: find the most recent earlier occurrence of the last n tokens
    (n from ``max_n`` down to ``min_n``) and propose what followed it. No second model."""

    kind = "ngram"
    forward_passes = 0

    def __init__(self, max_n: int = 3, min_n: int = 1) -> None:
        if not 1 <= min_n <= max_n:
            raise ValueError("need 1 <= min_n <= max_n")
        self.max_n, self.min_n = max_n, min_n
        self._seen: list[int] = []
        self._index: dict[tuple[int, ...], int] = {}  # n-gram -> where its continuation starts

    def _sync(self, ids: Sequence[int]) -> None:
        if list(ids[: len(self._seen)]) != self._seen:  # the text was rewound: rebuild
            self._seen, self._index = [], {}
        start = len(self._seen)
        self._seen = list(ids)
        # index every n-gram whose continuation lies inside the known text
        for cont in range(max(1, start), len(ids)):
            for n in range(self.min_n, self.max_n + 1):
                if cont - n >= 0:
                    self._index[tuple(ids[cont - n : cont])] = cont

    def propose(
        self, ids: Sequence[int], k: int, sampler: Sampler | None = None, generator: Any = None
    ) -> tuple[list[int], None]:
        self._sync(ids)
        for n in range(self.max_n, self.min_n - 1, -1):
            if len(ids) < n:
                continue
            cont = self._index.get(tuple(ids[len(ids) - n :]))
            if cont is not None:
                return list(ids[cont : cont + k]), None
        return [], None


# --------------------------------------------------------------------------------------------
# Statistics
# --------------------------------------------------------------------------------------------


@dataclass
class SpeculativeStats:
    gamma: int
    drafter: str
    drafted: int = 0
    accepted: int = 0
    rounds: int = 0
    target_passes: int = 0
    drafter_passes: int = 0
    generated: int = 0
    seconds: float = 0.0
    drafted_by_position: list[int] = field(default_factory=list)
    accepted_by_position: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.drafted_by_position = [0] * self.gamma
        self.accepted_by_position = [0] * self.gamma

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def mean_accepted_length(self) -> float:
        """Accepted drafts per target pass that verified drafts."""
        return self.accepted / self.rounds if self.rounds else 0.0

    @property
    def target_passes_per_token(self) -> float:
        return self.target_passes / self.generated if self.generated else 0.0

    @property
    def acceptance_by_position(self) -> list[float]:
        return [
            a / d if d else 0.0
            for a, d in zip(self.accepted_by_position, self.drafted_by_position, strict=True)
        ]

    @property
    def tokens_per_s(self) -> float:
        return self.generated / self.seconds if self.seconds > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.update(
            acceptance_rate=self.acceptance_rate,
            mean_accepted_length=self.mean_accepted_length,
            target_passes_per_token=self.target_passes_per_token,
            acceptance_by_position=self.acceptance_by_position,
            tokens_per_s=self.tokens_per_s,
        )
        return out


# --------------------------------------------------------------------------------------------
# The session
# --------------------------------------------------------------------------------------------


class SpeculativeSession:
    """Speculative generation that yields the same ``Step`` records as plain generation;
    accepted draft tokens have source "draft", tokens chosen by the target "target"."""

    def __init__(
        self,
        target: torch.nn.Module,
        prompt_ids: Sequence[int],
        drafter: ModelDrafter | NGramDrafter,
        sampler: Sampler | SamplerSettings,
        *,
        tokenizer: Any | None = None,
        eos_token_ids: int | Sequence[int] | None = None,
        gamma: int = 5,
        top_n: int = 20,
        seed: int = 0,
        use_cache: bool = True,
        first_target: bool = False,
        skip_sample_adjustment: bool = False,
        max_context: int | None = None,
        fast: bool = False,
    ) -> None:
        if gamma < 1:
            raise ValueError("gamma must be >= 1")
        start = decode_start(target, prompt_ids, eos_token_ids, max_context)
        self.target = target
        self.drafter = drafter
        self.gamma = gamma
        self.top_n = top_n
        self.is_encoder_decoder = start.is_encoder_decoder
        self.eos_token_ids = start.eos_token_ids
        self.ids = start.ids
        self.max_context = start.max_context
        self.prompt_length = len(self.ids)
        if isinstance(sampler, SamplerSettings):
            sampler = ChainSampler(sampler, self.prompt_length, self.eos_token_ids)
        self.sampler = sampler
        self.stepper = make_stepper(
            target, start.encoder_ids or None, use_cache, fast, self.max_context
        )
        self.device = self.stepper.device
        self.generator = torch.Generator(device=self.device).manual_seed(seed)
        self.recorder = StepRecorder(tokenizer, top_n)
        self.history: list[Step] = []
        self.stats = SpeculativeStats(gamma=gamma, drafter=drafter.kind)
        self.finished = False
        self.stop_reason: str | None = None
        self._first_target = first_target
        self._skip_adjustment = skip_sample_adjustment

    @property
    def generated_ids(self) -> list[int]:
        return self.ids[self.prompt_length :]

    @property
    def text(self) -> str:
        return "".join(s.text for s in self.history)

    def stream(self, max_new_tokens: int) -> Iterator[Step]:
        produced = 0
        self.stop_reason = None
        while not self.finished and produced < max_new_tokens:
            for step in self._round(max_new_tokens - produced):
                produced += 1
                yield step
        if self.stop_reason is None:
            self.stop_reason = "max_new_tokens" if produced >= max_new_tokens else "stopped"

    def run(self, max_new_tokens: int) -> list[int]:
        for _ in self.stream(max_new_tokens):
            pass
        return self.generated_ids

    @torch.inference_mode()
    def _round(self, limit: int) -> list[Step]:
        start = time.perf_counter()
        room = limit - 1  # the round always adds one token of the target's own
        if self.max_context is not None:
            room = min(room, self.max_context - len(self.ids) - 1)
        k = 0 if self._first_target else max(0, min(self.gamma, room))
        self._first_target = False
        passes_before = self.drafter.forward_passes
        drafts, q = (
            self.drafter.propose(self.ids, k, self.sampler, self.generator) if k else ([], None)
        )
        g = len(drafts)
        full = self.ids + drafts
        logits = self.stepper.logits(
            full, keep=g + 1
        )  # [g + 1, vocab]; row i predicts full[len(ids) + i]
        base = len(self.ids)
        p = [self.sampler.probs(full[: base + i], logits[i]) for i in range(g + 1)]
        self.stats.target_passes += 1
        self.stats.drafter_passes += self.drafter.forward_passes - passes_before

        accepted = 0
        hit_eos = False
        for i in range(g):
            x = drafts[i]
            if self.sampler.greedy:
                ok = bool(p[i].argmax() == x)
            else:
                qx = q[i, x] if q is not None else 1.0
                # accept with probability min(1, p(x) / q(x)); u < p/q  <=>  u * q < p
                ok = bool(
                    torch.rand(1, generator=self.generator, device=self.device)[0] * qx < p[i][x]
                )
            if not ok:
                break
            accepted += 1
            if x in self.eos_token_ids:
                hit_eos = True
                break
        if g:
            self.stats.rounds += 1
            self.stats.drafted += g
            self.stats.accepted += accepted
            for i in range(g):
                self.stats.drafted_by_position[i] += 1
                self.stats.accepted_by_position[i] += i < accepted

        tokens = [torch.tensor([x], device=self.device) for x in drafts[:accepted]]
        sources = ["draft"] * accepted
        if not hit_eos:
            tokens.append(
                self._next_token(
                    p[accepted],
                    q[accepted] if (q is not None and accepted < g) else None,
                    drafts[accepted] if accepted < g else None,
                )
            )
            sources.append("target")
        values = [summarise(logits[i], p[i], tok, self.top_n) for i, tok in enumerate(tokens)]
        elapsed = time.perf_counter() - start  # after the copies, which wait for the device
        for i, vals in enumerate(values):
            if vals[-1] != 1.0:
                raise NonFiniteLogitsError(len(self.history) + i)
        self.stats.seconds += elapsed
        per_token = elapsed / len(values)
        steps = []
        for vals, source in zip(values, sources, strict=True):
            self.stats.generated += 1
            step = self.recorder.record(
                len(self.history),
                vals,
                per_token,
                self.stats.tokens_per_s,
                self.eos_token_ids,
                source=source,
            )
            self.ids.append(step.token_id)
            self.history.append(step)
            steps.append(step)
            if step.is_eos:
                self.finished, self.stop_reason = True, "eos"
                break
        if not self.finished and self.max_context is not None and len(self.ids) >= self.max_context:
            self.finished, self.stop_reason = True, "context"
        return steps

    def _next_token(
        self, p: torch.Tensor, q: torch.Tensor | None, rejected: int | None
    ) -> torch.Tensor:
        """The target's token after ``accepted`` drafts. p: [vocab]."""
        if self.sampler.greedy or rejected is None or self._skip_adjustment:
            return draw(p, self.sampler.greedy, self.generator)
        # At a rejection, sample from normalize(max(0, p - q)); for a point-mass proposal
        # (n-gram) that is p with the rejected token removed.
        if q is None:
            residual = p.clone()
            residual[rejected] = 0
        else:
            residual = (p - q).clamp_min(0)
        total = residual.sum()
        if total <= 0:  # p == q exactly: any draw from p is exact
            return draw(p, False, self.generator)
        return draw(residual / total, False, self.generator)


# --------------------------------------------------------------------------------------------
# Checks and seed-compatible functions
# --------------------------------------------------------------------------------------------


def check_same_tokenizer(target_tokenizer: Any, draft_tokenizer: Any) -> None:
    """A draft model must share the target's tokenizer (same ids for the same strings)."""
    a, b = target_tokenizer.get_vocab(), draft_tokenizer.get_vocab()
    if a != b:
        only_a = len(set(a.items()) - set(b.items()))
        raise DrafterMismatchError(
            "The draft model uses a different tokenizer from the target "
            f"({len(a)} vs {len(b)} tokens, {only_a} entries differ): pick a draft model from "
            "the same family as the target."
        )


def _check_vocab(drafter: torch.nn.Module, target: torch.nn.Module) -> None:
    dv = drafter.get_output_embeddings().weight.shape[0]
    tv = target.get_output_embeddings().weight.shape[0]
    if dv != tv:
        raise DrafterMismatchError(
            f"The draft model's vocabulary ({dv} tokens) differs from the target's ({tv}): "
            "they must share a tokenizer."
        )


def _debug_round(session: SpeculativeSession, before: int, tokenizer: Any | None) -> None:
    new = session.history[before:]
    show = (lambda t: repr(tokenizer.decode([t]))) if tokenizer is not None else str
    parts = [f"{show(s.token_id)}{'*' if s.source == 'draft' else ''}" for s in new]
    print(f"round {session.stats.rounds}: {' '.join(parts)}  (* = accepted draft)")


def _seed_run(
    session: SpeculativeSession, max_gen_len: int, debug: bool, tokenizer: Any | None
) -> None:
    produced = 0
    while not session.finished and produced < max_gen_len:
        before = len(session.history)
        produced += len(session._round(max_gen_len - produced))
        if debug:
            _debug_round(session, before, tokenizer)


def _seed_session(
    target: torch.nn.Module,
    inputs: list[int],
    drafter: ModelDrafter | NGramDrafter,
    logits_processor: SeedLogitsProcessor,
    eos_tokens_id: int | list[int],
    gamma: int,
    use_cache: bool,
    first_target: bool,
    skip_sample_adjustment: bool = False,
) -> SpeculativeSession:
    return SpeculativeSession(
        target,
        inputs,
        drafter,
        SeedSampler(logits_processor),
        eos_token_ids=eos_tokens_id,
        gamma=gamma,
        use_cache=use_cache,
        first_target=first_target,
        skip_sample_adjustment=skip_sample_adjustment,
        seed=getattr(logits_processor, "seed", None) or 0,
    )


def _seed_steps(target: torch.nn.Module, inputs: list[int], max_gen_len: int) -> int:
    if getattr(target.config, "is_encoder_decoder", False):
        return max_gen_len  # the prompt is the encoder's input, not decoder context
    limit = context_length(target)
    return max_gen_len if limit is None else max(0, min(max_gen_len, limit - len(inputs)))


def speculative_generate(
    inputs: list[int],
    drafter: torch.nn.Module,
    target: torch.nn.Module,
    tokenizer: Any = None,
    gamma: int = 5,
    logits_processor: SeedLogitsProcessor = GreedyProcessor(),  # noqa: B008 - stateless, as in the seed
    max_gen_len: int = 40,
    eos_tokens_id: int | list[int] = 1,
    pad_token_id: int = 0,
    use_cache: bool = False,
    skip_sample_adjustment: bool = False,
    first_target: bool = True,
    debug: bool = False,
) -> tuple[list[int], float]:
    """Seed-compatible speculative decoding for decoder-only models.
    Returns (generated ids, acceptance rate = accepted drafts / drafted tokens)."""
    _check_vocab(drafter, target)
    session = _seed_session(
        target, inputs, ModelDrafter(drafter, use_cache=use_cache), logits_processor,
        eos_tokens_id, gamma, use_cache, first_target, skip_sample_adjustment,
    )  # fmt: skip
    _seed_run(session, _seed_steps(target, inputs, max_gen_len), debug, tokenizer)
    return session.generated_ids, session.stats.acceptance_rate


def speculative_generate_encoder_decoder(
    inputs: list[int],
    drafter: torch.nn.Module,
    target: torch.nn.Module,
    tokenizer: Any = None,
    gamma: int = 5,
    logits_processor: SeedLogitsProcessor = GreedyProcessor(),  # noqa: B008 - stateless, as in the seed
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
    _check_vocab(drafter, target)
    if drafter.config.decoder_start_token_id != target.config.decoder_start_token_id:
        raise DrafterMismatchError(
            "The draft and target models start decoding from different tokens."
        )
    session = _seed_session(
        target, inputs, ModelDrafter(drafter, inputs, use_cache=use_cache), logits_processor,
        eos_tokens_id, gamma, use_cache, first_target, skip_sample_adjustment,
    )  # fmt: skip
    _seed_run(session, max_gen_len, debug, tokenizer)
    return session.ids, session.stats.acceptance_rate


def ngram_assisted_speculative_generate(
    inputs: list[int],
    ngram: NGramDrafter | None,
    target: torch.nn.Module,
    tokenizer: Any = None,
    gamma: int = 5,
    filler_top_k: int = 3,
    logits_processor: SeedLogitsProcessor = GreedyProcessor(),  # noqa: B008 - stateless, as in the seed
    max_gen_len: int = 40,
    eos_tokens_id: int | list[int] = 1,
    pad_token_id: int = 0,
    use_cache: bool = False,
    first_target: bool = True,
    stop_if_unknown: bool = False,
    debug: bool = False,
) -> tuple[list[int], float]:
    """Seed-compatible n-gram speculative decoding (NASD). ``ngram`` may be None (a default
    prompt-lookup drafter). Unlike the seed's DynaGram, our drafter only looks up the text
    itself, so ``filler_top_k`` has no effect; without a match the round drafts nothing, as
    with the seed's ``stop_if_unknown``."""
    drafter = ngram if ngram is not None else NGramDrafter()
    enc = bool(getattr(target.config, "is_encoder_decoder", False))
    session = _seed_session(
        target, inputs, drafter, logits_processor, eos_tokens_id, gamma, use_cache, first_target
    )
    _seed_run(session, _seed_steps(target, inputs, max_gen_len), debug, tokenizer)
    return (session.ids if enc else session.generated_ids), session.stats.acceptance_rate


__all__ = [
    "ChainSampler",
    "DrafterMismatchError",
    "ModelDrafter",
    "NGramDrafter",
    "SeedSampler",
    "SpeculativeSession",
    "SpeculativeStats",
    "check_same_tokenizer",
    "ngram_assisted_speculative_generate",
    "speculative_generate",
    "speculative_generate_encoder_decoder",
]
