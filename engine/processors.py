"""The sampler chain: logits processors with the transformers protocol, and the chain built
from a ``SamplerSettings`` record.

Each processor follows ``__call__(input_ids, scores) -> scores`` with ``input_ids: [batch,
seq]`` and ``scores: [batch, vocab]``. A processor validates its arguments in ``__init__``
(``ValueError``) and never modifies ``scores`` in place: it returns a new tensor. Removed tokens
get ``-inf``. Every filter keeps at least one token. ``label`` names the stage as a person reads
it ("top-p 0.90"); the plots say which stage cut a token.

``build_chain`` adds a stage only when its value is not neutral (as transformers builds its
list), so no stage needs an "off" branch. It is the one place greedy is decided: temperature 0
makes the chain greedy, and ``Chain.pick`` then takes the argmax.

Boundary rules (documented because implementations differ):

* top-k keeps every token whose score is >= the k-th largest score, so tokens tied with the
  k-th are kept (transformers' rule; more than k can survive on exact ties).
* top-p keeps the smallest set of most-probable tokens whose mass reaches p: a token is kept
  when the mass of the tokens ranked above it is < p. The token that crosses p is therefore
  kept, and a set whose mass is exactly p keeps no extra token. Equal probabilities are ranked
  by token id (stable sort), so at a tie on the boundary the lower id is kept.
  ``top_p == 0`` keeps only the most probable token; ``top_p == 1`` is off.
* min-p keeps tokens with ``p >= min_p * p_max`` (ties with the threshold kept).
* temperature 0 means greedy: every token but the first maximal one is removed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Protocol

import torch
import torch.nn.functional as F

from engine.checks import check_setting
from engine.settings import ORDER_TEMPERATURE_FIRST, ORDER_TEMPERATURE_LAST, SamplerSettings

NEG_INF = float("-inf")


def _check(cond: bool, message: str) -> None:
    if not cond:
        raise ValueError(message)


class LogitsProcessor:
    """Base of the transformers-protocol processors."""

    uses_ids = False  # whether the stage reads input_ids (the chain builds them only if so)

    @property
    def label(self) -> str:
        return type(self).__name__

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({args})"


class Temperature(LogitsProcessor):
    """Divide the scores by the temperature; 0 keeps only the argmax (greedy)."""

    def __init__(self, temperature: float) -> None:
        check_setting("temperature", temperature)
        self.temperature = float(temperature)

    @property
    def label(self) -> str:
        return (
            "greedy (temperature 0)"
            if self.temperature == 0
            else f"temperature {self.temperature:g}"
        )

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self.temperature == 0:
            keep = torch.zeros_like(scores, dtype=torch.bool)
            keep.scatter_(-1, scores.argmax(dim=-1, keepdim=True), True)
            return scores.masked_fill(~keep, NEG_INF)
        if self.temperature == 1:
            return scores.clone()
        # Shift by the max first: tiny temperatures then give -inf, never inf - inf = NaN.
        top = scores.amax(dim=-1, keepdim=True)
        return (scores - top) / self.temperature


class TopK(LogitsProcessor):
    """Keep the k highest scores (ties with the k-th kept); 0 is off."""

    def __init__(self, top_k: int) -> None:
        check_setting("top_k", top_k)
        self.top_k = top_k

    @property
    def label(self) -> str:
        return f"top-k {self.top_k}"

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        k = min(self.top_k, scores.shape[-1])
        if k == 0 or k == scores.shape[-1]:
            return scores.clone()
        kth = torch.topk(scores, k, dim=-1).values[..., -1:]  # [batch, 1]
        return scores.masked_fill(scores < kth, NEG_INF)


class TopP(LogitsProcessor):
    """Nucleus filter: keep the smallest set of top tokens whose probability mass reaches p."""

    def __init__(self, top_p: float, min_tokens_to_keep: int = 1) -> None:
        check_setting("top_p", top_p)
        _check(
            isinstance(min_tokens_to_keep, int) and min_tokens_to_keep >= 1,
            "min_tokens_to_keep must be >= 1",
        )
        self.top_p = float(top_p)
        self.min_tokens_to_keep = min_tokens_to_keep

    @property
    def label(self) -> str:
        return f"top-p {self.top_p:.2f}"

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self.top_p >= 1:
            return scores.clone()
        sorted_scores, order = torch.sort(scores, dim=-1, descending=True, stable=True)
        probs = sorted_scores.float().softmax(dim=-1)
        mass_before = probs.cumsum(dim=-1) - probs  # mass of the tokens ranked above each one
        # Tolerance: float32 sums of probabilities that are "exactly p" land a few ulps either side.
        remove_sorted = mass_before >= self.top_p - 1e-6
        remove_sorted[..., : self.min_tokens_to_keep] = False
        remove = torch.zeros_like(remove_sorted).scatter(-1, order, remove_sorted)
        return scores.masked_fill(remove, NEG_INF)


class MinP(LogitsProcessor):
    """Keep tokens whose probability is at least min_p times the top probability; 0 is off."""

    def __init__(self, min_p: float) -> None:
        check_setting("min_p", min_p)
        self.min_p = float(min_p)

    @property
    def label(self) -> str:
        return f"min-p {self.min_p:.2f}"

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self.min_p <= 0:
            return scores.clone()
        # In log space: log p - log p_max = score - score_max, so no softmax is needed.
        gap = scores - scores.amax(dim=-1, keepdim=True)
        return scores.masked_fill(gap < math.log(self.min_p) - 1e-6, NEG_INF)


class TypicalP(LogitsProcessor):
    """Locally typical sampling (Meister et al. 2022): keep tokens whose surprisal is closest to
    the entropy until their mass reaches ``mass``; 1 is off."""

    def __init__(self, mass: float, min_tokens_to_keep: int = 1) -> None:
        check_setting("typical_p", mass)
        self.mass = float(mass)
        self.min_tokens_to_keep = min_tokens_to_keep

    @property
    def label(self) -> str:
        return f"typical-p {self.mass:.2f}"

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self.mass >= 1:
            return scores.clone()
        logp = scores.float().log_softmax(dim=-1)
        p = logp.exp()
        entropy = -torch.nan_to_num(p * logp).sum(dim=-1, keepdim=True)
        distance = (-logp - entropy).abs()
        sorted_distance, order = torch.sort(distance, dim=-1, stable=True)
        sorted_p = p.gather(-1, order)
        mass_before = sorted_p.cumsum(dim=-1) - sorted_p
        remove_sorted = mass_before >= self.mass - 1e-6
        remove_sorted |= torch.isinf(sorted_distance)  # already removed tokens stay removed
        remove_sorted[..., : self.min_tokens_to_keep] = False
        remove = torch.zeros_like(remove_sorted).scatter(-1, order, remove_sorted)
        return scores.masked_fill(remove, NEG_INF)


class RepetitionPenalty(LogitsProcessor):
    """CTRL-style penalty on every token already in the sequence: positive scores are divided
    by the penalty, negative ones multiplied. 1 is off; > 1 discourages repeats."""

    def __init__(self, penalty: float) -> None:
        check_setting("repetition_penalty", penalty)
        self.penalty = float(penalty)

    uses_ids = True

    @property
    def label(self) -> str:
        return f"repetition penalty {self.penalty:g}"

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self.penalty == 1 or input_ids.shape[-1] == 0:
            return scores.clone()
        seen = scores.gather(-1, input_ids)
        penalised = torch.where(seen < 0, seen * self.penalty, seen / self.penalty)
        return scores.scatter(-1, input_ids, penalised)


class NoRepeatNGram(LogitsProcessor):
    """Forbid any token that would repeat an n-gram already present in the sequence; 0 is off."""

    def __init__(self, n: int) -> None:
        check_setting("no_repeat_ngram_size", n)
        self.n = n

    uses_ids = True

    @property
    def label(self) -> str:
        return f"no repeated {self.n}-grams"

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        n = self.n
        if n == 0 or input_ids.shape[-1] + 1 < n:
            return scores.clone()
        banned = torch.zeros_like(scores, dtype=torch.bool)
        for row, ids in enumerate(input_ids.tolist()):
            prefix = tuple(ids[len(ids) - n + 1 :]) if n > 1 else ()
            for start in range(len(ids) - n + 1):
                if tuple(ids[start : start + n - 1]) == prefix:
                    banned[row, ids[start + n - 1]] = True
        return scores.masked_fill(banned, NEG_INF)


class MinNewTokens(LogitsProcessor):
    """Suppress the end-of-sequence ids until ``min_new_tokens`` tokens have been generated."""

    def __init__(
        self, min_new_tokens: int, prompt_length: int, eos_token_ids: Sequence[int]
    ) -> None:
        check_setting("min_new_tokens", min_new_tokens)
        _check(prompt_length >= 0, "prompt_length must be >= 0")
        self.min_new_tokens = min_new_tokens
        self.prompt_length = prompt_length
        self.eos_token_ids = tuple(int(i) for i in eos_token_ids)

    uses_ids = True

    @property
    def label(self) -> str:
        return f"min new tokens {self.min_new_tokens}"

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        generated = input_ids.shape[-1] - self.prompt_length
        if generated >= self.min_new_tokens or not self.eos_token_ids:
            return scores.clone()
        eos = torch.tensor(self.eos_token_ids, device=scores.device)
        eos = eos[eos < scores.shape[-1]]
        out = scores.clone()
        out[..., eos] = NEG_INF
        return out


def apply_chain(
    chain: Sequence[LogitsProcessor],
    input_ids: torch.Tensor,
    scores: torch.Tensor,
    track: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Run the processors in order. scores: [batch, vocab] -> ([batch, vocab], cut) where
    ``cut`` ([batch, vocab], with ``track``) holds the index of the stage that removed each
    token, -1 for the tokens still in.

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
        scores = new
    return scores, cut


# --------------------------------------------------------------------------------------------
# The chain built from settings
# --------------------------------------------------------------------------------------------

Factory = Callable[[SamplerSettings, int, Sequence[int]], LogitsProcessor]

# Each stage: when its value is neutral, and how to build it (settings, prompt length, EOS ids).
STAGES: dict[str, tuple[Callable[[SamplerSettings], bool], Factory]] = {
    "repetition_penalty": (
        lambda s: s.repetition_penalty == 1.0,
        lambda s, _n, _e: RepetitionPenalty(s.repetition_penalty),
    ),
    "no_repeat_ngram_size": (
        lambda s: s.no_repeat_ngram_size == 0,
        lambda s, _n, _e: NoRepeatNGram(s.no_repeat_ngram_size),
    ),
    "min_new_tokens": (
        lambda s: s.min_new_tokens == 0,
        lambda s, n, eos: MinNewTokens(s.min_new_tokens, n, eos),
    ),
    "temperature": (lambda s: s.temperature == 1.0, lambda s, _n, _e: Temperature(s.temperature)),
    "top_k": (lambda s: s.top_k == 0, lambda s, _n, _e: TopK(s.top_k)),
    "top_p": (lambda s: s.top_p >= 1.0, lambda s, _n, _e: TopP(s.top_p)),
    "min_p": (lambda s: s.min_p <= 0.0, lambda s, _n, _e: MinP(s.min_p)),
    "typical_p": (lambda s: s.typical_p >= 1.0, lambda s, _n, _e: TypicalP(s.typical_p)),
}
PENALTIES = ("repetition_penalty", "no_repeat_ngram_size", "min_new_tokens")
# Penalties always come first; then temperature before the filters (transformers) or after
# them (the seed, llama.cpp).
ORDER_OF = {
    ORDER_TEMPERATURE_FIRST: (*PENALTIES, "temperature", "top_k", "top_p", "min_p", "typical_p"),
    ORDER_TEMPERATURE_LAST: (*PENALTIES, "top_k", "typical_p", "top_p", "min_p", "temperature"),
}


class Chain:
    """The stages a run's scores go through, and how a token is then picked."""

    def __init__(self, stages: Sequence[LogitsProcessor], greedy: bool) -> None:
        self.stages = list(stages)
        self.greedy = greedy
        self.uses_ids = any(stage.uses_ids for stage in self.stages)
        self.labels = tuple(stage.label for stage in self.stages)

    def probs(
        self, input_ids: torch.Tensor | None, logits: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """input_ids: [batch, seq] (None when no stage reads them); logits: [batch, vocab] ->
        probabilities [batch, vocab] and the stage that cut each token ([batch, vocab])."""
        ids = input_ids if input_ids is not None else _NO_IDS.to(logits.device)
        scores, cut = apply_chain(self.stages, ids, logits, track=True)
        return F.softmax(scores, dim=-1), cut

    def pick(self, probs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """probs: [vocab] -> token: [1]."""
        return pick(probs, self.greedy, generator)


_NO_IDS = torch.empty((1, 0), dtype=torch.long)


class Sampler(Protocol):
    """Turns raw logits into probabilities and picks a token (``Chain``, or
    the seed-compatible processors through ``engine.compat.CompatSampler``)."""

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


def build_chain(
    settings: SamplerSettings,
    prompt_length: int = 0,
    eos_token_ids: Sequence[int] = (),
    only: Sequence[str] | None = None,
) -> Chain:
    """The stages of ``settings`` in its order, neutral ones left out; greedy at temperature 0.
    ``only`` keeps just the named stages (beam search takes the penalties)."""
    stages = [
        make(settings, prompt_length, eos_token_ids)
        for name in ORDER_OF[settings.order]
        for neutral, make in (STAGES[name],)
        if not neutral(settings) and (only is None or name in only)
    ]
    return Chain(stages, greedy=settings.temperature == 0)
