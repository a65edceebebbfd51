"""Logits processors.

Two families live here:

* The sampler chain the GUI drives. Each processor follows the transformers protocol
  ``__call__(input_ids, scores) -> scores`` with ``input_ids: [batch, seq]`` and
  ``scores: [batch, vocab]``. A processor validates its arguments in ``__init__`` (``ValueError``)
  and never modifies ``scores`` in place: it returns a new tensor. Removed tokens get ``-inf``.
  Every filter keeps at least one token.

* The seed-compatible processors (``GreedyProcessor``, ``MultinomialProcessor``,
  ``TopKProcessor``, ``NucleusProcessor``, ``TopKNucleusProcessor``) with the seed's constructor
  arguments: calling one on logits returns probabilities; ``.sample(probs)`` returns the token
  id as a ``[batch, 1]`` long tensor (``int()`` works for batch 1). As in the seed, top-k / top-p
  are applied to the raw logits and the temperature afterwards.

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
from collections.abc import Sequence

import torch
import torch.nn.functional as F

from engine.checks import check_setting, is_number

NEG_INF = float("-inf")


def _check(cond: bool, message: str) -> None:
    if not cond:
        raise ValueError(message)


class LogitsProcessor:
    """Base of the transformers-protocol processors."""

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
    chain: Sequence[LogitsProcessor], input_ids: torch.Tensor, scores: torch.Tensor
) -> torch.Tensor:
    """Run the processors in order. scores: [batch, vocab] -> [batch, vocab].

    A stage that would remove every token of a row (no-repeat-ngram once every token has been
    used, say) is skipped for that row, so the distribution is never empty. torch.where keeps
    this free of device synchronisation."""
    for processor in chain:
        new = processor(input_ids, scores)
        emptied = (new == NEG_INF).all(dim=-1, keepdim=True)  # [batch, 1]
        scores = torch.where(emptied, scores, new)
    return scores


# --------------------------------------------------------------------------------------------
# Seed-compatible processors (romsto/Speculative-Decoding, utils/logits_processor.py contract)
# --------------------------------------------------------------------------------------------


class SeedLogitsProcessor:
    """Seed protocol: ``probs = proc(logits)``; ``token = proc.sample(probs)``.

    Filters run on the raw logits and the temperature comes last, as in the seed. Unlike the
    seed, the logits are never modified in place and sampling uses this processor's own seeded
    ``torch.Generator`` (pass ``seed=`` for reproducible runs), never the global RNG.
    """

    greedy = False

    def __init__(self, temperature: float = 1.0, *, seed: int | None = None) -> None:
        _check(
            is_number(temperature) and temperature > 0,
            f"temperature must be > 0, got {temperature!r}",
        )
        self.temperature = float(temperature)
        self.seed = seed
        self._generator: torch.Generator | None = None

    def filters(self) -> list[LogitsProcessor]:
        return []

    def __call__(self, logits: torch.Tensor) -> torch.Tensor:
        # logits: [batch, vocab] (or [vocab]) -> probabilities of the same shape
        scores = logits.float()
        ids = torch.empty((*scores.shape[:-1], 0), dtype=torch.long, device=scores.device)
        scores = apply_chain(self.filters(), ids, scores)
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


class GreedyProcessor(SeedLogitsProcessor):
    """Always the most probable token."""

    greedy = True


class MultinomialProcessor(SeedLogitsProcessor):
    """Sample from the full distribution at the given temperature."""


class TopKProcessor(SeedLogitsProcessor):
    def __init__(self, temperature: float, top_k: int, *, seed: int | None = None) -> None:
        super().__init__(temperature, seed=seed)
        self.top_k = TopK(top_k)

    def filters(self) -> list[LogitsProcessor]:
        return [self.top_k]


class NucleusProcessor(SeedLogitsProcessor):
    def __init__(self, temperature: float, top_p: float, *, seed: int | None = None) -> None:
        super().__init__(temperature, seed=seed)
        self.top_p = TopP(top_p)

    def filters(self) -> list[LogitsProcessor]:
        return [self.top_p]


class TopKNucleusProcessor(SeedLogitsProcessor):
    def __init__(
        self, temperature: float, top_k: int, top_p: float, *, seed: int | None = None
    ) -> None:
        super().__init__(temperature, seed=seed)
        self.top_k = TopK(top_k)
        self.top_p = TopP(top_p)

    def filters(self) -> list[LogitsProcessor]:
        return [self.top_k, self.top_p]
