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
import re
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import torch
import torch.nn.functional as F

from engine.sampling.checks import check_setting
from engine.sampling.settings import (  # noqa: F401 - the orders are part of this module's API
    LLAMA_CPP_ORDER,
    ORDER_OF,
    ORDER_TEMPERATURE_FIRST,
    ORDER_TEMPERATURE_LAST,
    STAGE_NAMES,
    TRANSFORMERS_ORDER,
    SamplerSettings,
    stage_order,
)

NEG_INF = float("-inf")


def _check(cond: bool, message: str) -> None:
    if not cond:
        raise ValueError(message)


class LogitsProcessor:
    """Base of the transformers-protocol processors."""

    uses_ids = False  # whether the stage reads input_ids (the chain builds them only if so)
    reweights = False  # a penalty: changes scores without removing tokens (before/after shown)
    needs_state = False  # reads the run's per-step state (generator, mirostat's mu)

    @property
    def label(self) -> str:
        return type(self).__name__

    def note(self, before: torch.Tensor, after: torch.Tensor) -> torch.Tensor | str | None:
        """What this stage did at this step, for the Step record: a small tensor ``[batch, k]``
        that goes to the host with the step's one copy (``describe`` words it), a string
        already known on the host, or None. ``before``/``after``: the stage's input and output."""
        return None

    def describe(self, values: Sequence[float], show: Callable[[int], str]) -> str:
        """Word the host copy of ``note``'s tensor (one row); ``show`` prints a token id."""
        return ""

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
    the entropy until their mass reaches ``mass`` (tokens tied with the last one kept, as in
    transformers' ``TypicalLogitsWarper``); 1 is off."""

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
        # The token whose mass reaches ``mass`` is the boundary; every token at least as
        # typical as it is kept, ties included (transformers' TypicalLogitsWarper).
        last = ((sorted_p.cumsum(dim=-1) < self.mass - 1e-6).sum(-1, keepdim=True)).clamp(
            max=scores.shape[-1] - 1
        )
        remove_sorted = sorted_distance > sorted_distance.gather(-1, last)
        remove_sorted |= torch.isinf(sorted_distance)  # already removed tokens stay removed
        remove_sorted[..., : self.min_tokens_to_keep] = False
        remove = torch.zeros_like(remove_sorted).scatter(-1, order, remove_sorted)
        return scores.masked_fill(remove, NEG_INF)


class RepetitionPenalty(LogitsProcessor):
    """CTRL-style penalty on every token already in the sequence (transformers'
    ``RepetitionPenaltyLogitsProcessor``; llama.cpp's ``penalty_repeat``): positive scores are
    divided by the penalty, negative ones multiplied. 1 is off; > 1 discourages repeats.
    ``last_n`` > 0 looks only at the last N ids (llama.cpp's ``penalty_last_n``)."""

    reweights = True

    def __init__(self, penalty: float, last_n: int = 0) -> None:
        check_setting("repetition_penalty", penalty)
        check_setting("penalty_last_n", last_n)
        self.penalty = float(penalty)
        self.last_n = last_n

    uses_ids = True

    @property
    def label(self) -> str:
        return f"repetition penalty {self.penalty:g}"

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        input_ids = _window(input_ids, self.last_n)
        if self.penalty == 1 or input_ids.shape[-1] == 0:
            return scores.clone()
        seen = scores.gather(-1, input_ids)
        penalised = torch.where(seen < 0, seen * self.penalty, seen / self.penalty)
        return scores.scatter(-1, input_ids, penalised)


def _window(input_ids: torch.Tensor, last_n: int) -> torch.Tensor:
    return input_ids[..., -last_n:] if last_n > 0 else input_ids


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


# --------------------------------------------------------------------------------------------
# Penalties and bans (reweight or remove tokens by what the sequence already holds)
# --------------------------------------------------------------------------------------------


class FrequencyPresencePenalty(LogitsProcessor):
    """OpenAI's and llama.cpp's additive penalties (llama.cpp ``src/llama-sampling.cpp``,
    ``llama_sampler_penalties_apply``): a token seen c times in the last ``last_n`` ids (0: all
    of them) loses ``c * frequency + (c > 0) * presence`` from its logit. 0/0 is off; negative
    values encourage repeats."""

    reweights = True
    uses_ids = True

    def __init__(self, frequency: float = 0.0, presence: float = 0.0, last_n: int = 0) -> None:
        check_setting("frequency_penalty", frequency)
        check_setting("presence_penalty", presence)
        check_setting("penalty_last_n", last_n)
        self.frequency, self.presence, self.last_n = float(frequency), float(presence), last_n

    @property
    def label(self) -> str:
        return f"frequency {self.frequency:g} / presence {self.presence:g}"

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        ids = _window(input_ids, self.last_n)
        counts = torch.zeros_like(scores).scatter_add(
            -1, ids, torch.ones(ids.shape, dtype=scores.dtype, device=scores.device)
        )  # [batch, vocab]
        return scores - counts * self.frequency - (counts > 0).to(scores.dtype) * self.presence


class DRY(LogitsProcessor):
    """ "Don't Repeat Yourself" (text-generation-webui pull request #5677, by p-e-w; ported to
    llama.cpp in #9702). If the text ends with a sequence that occurred before and was then
    followed by token t, t would extend the repeat: its logit loses
    ``multiplier * base ** (L - allowed_length)`` where L is the longest such earlier match
    (L >= allowed_length; L is capped at 50). Matches never cross a sequence breaker, and no
    penalty applies when the last token is a breaker. Only the last ``last_n`` ids count (0: all).
    This is the webui rule (breakers are single token ids); llama.cpp's port also matches
    breakers that span tokens."""

    reweights = True
    uses_ids = True
    MAX_MATCH = 50

    def __init__(
        self,
        multiplier: float,
        base: float = 1.75,
        allowed_length: int = 2,
        last_n: int = 0,
        breaker_ids: Sequence[int] = (),
    ) -> None:
        check_setting("dry_multiplier", multiplier)
        check_setting("dry_base", base)
        check_setting("dry_allowed_length", allowed_length)
        check_setting("dry_penalty_last_n", last_n)
        self.multiplier, self.base = float(multiplier), float(base)
        self.allowed_length, self.last_n = allowed_length, last_n
        self.breakers = frozenset(int(i) for i in breaker_ids)
        self._last: list[dict[int, float]] = []

    @property
    def label(self) -> str:
        return f"DRY ×{self.multiplier:g}"

    def penalties(self, ids: Sequence[int]) -> dict[int, float]:
        """The penalty of each token that would extend a repeat, for one row of ids."""
        if self.last_n > 0:
            ids = ids[-self.last_n :]
        n = len(ids)
        if n == 0 or ids[-1] in self.breakers:
            return {}
        longest: dict[int, int] = {}
        for i in range(n - 1):  # every earlier occurrence of the last token
            if ids[i] != ids[-1] or ids[i + 1] in self.breakers:
                continue
            length = 1  # grow the match backwards from both ends
            while length < self.MAX_MATCH and i - length >= 0:
                earlier, recent = ids[i - length], ids[n - 1 - length]
                if earlier != recent or recent in self.breakers:
                    break
                length += 1
            following = ids[i + 1]
            longest[following] = max(length, longest.get(following, 0))
        return {
            t: self.multiplier * self.base ** (length - self.allowed_length)
            for t, length in longest.items()
            if length >= self.allowed_length
        }

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        self._last = [self.penalties(row) for row in input_ids.tolist()]  # ids live on the host
        if not any(self._last):
            return scores.clone()
        delta = torch.zeros(scores.shape, dtype=scores.dtype)
        for row, found in enumerate(self._last):
            for token, penalty in found.items():
                if token < scores.shape[-1]:
                    delta[row, token] = penalty
        return scores - delta.to(scores.device)

    def note(self, before: torch.Tensor, after: torch.Tensor) -> str | None:
        found = self._last[0] if self._last else {}
        if not found:
            return None
        worst = sorted(found.items(), key=lambda kv: -kv[1])[:3]
        return "DRY penalised " + ", ".join(f"#{t} −{p:.2f}" for t, p in worst)


def parse_bias_key(key: str, encode: Callable[[str], list[int]] | None) -> list[tuple[int, ...]]:
    """A logit-bias or ban entry -> the token sequences it stands for. ``"#123"`` is token 123;
    a word is its tokens as written and, when it has no leading space, also with one (the
    form it takes mid-sentence in BPE vocabularies)."""
    if key.startswith("#") and key[1:].isdigit():
        return [(int(key[1:]),)]
    if encode is None:
        raise ValueError(f"{key!r} needs a tokenizer (or write a token id as '#123')")
    forms = [key] if key.startswith(" ") else [key, " " + key]
    seqs = [tuple(encode(f)) for f in forms]
    return list(dict.fromkeys(s for s in seqs if s))


class SequenceBias(LogitsProcessor):
    """Add a bias to a token, or to the last token of a sequence when the text already ends
    with the rest of it (transformers' ``SequenceBiasLogitsProcessor``; OpenAI's and
    llama.cpp's ``logit_bias`` for one-token entries). -inf bans the token."""

    reweights = True
    uses_ids = True

    def __init__(self, sequence_bias: dict[tuple[int, ...], float]) -> None:
        _check(bool(sequence_bias), "sequence_bias must not be empty")
        for seq, bias in sequence_bias.items():
            _check(
                len(seq) > 0 and all(isinstance(t, int) and t >= 0 for t in seq),
                f"sequence_bias keys must be non-empty tuples of token ids >= 0, got {seq!r}",
            )
            _check(
                isinstance(bias, (int, float)) and bias == bias and bias != float("inf"),
                f"a bias must be a number below +inf (-inf bans), got {bias!r}",
            )
        self.sequence_bias = {tuple(k): float(v) for k, v in sequence_bias.items()}

    @property
    def label(self) -> str:
        return f"logit bias ({len(self.sequence_bias)})"

    def _bias(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        bias = torch.zeros_like(scores)  # [batch, vocab]
        seq_len = input_ids.shape[-1]
        for seq, value in self.sequence_bias.items():
            last = seq[-1]
            if last >= scores.shape[-1] or len(seq) - 1 > seq_len:
                continue  # a prefix longer than the text so far cannot match yet
            if len(seq) == 1:
                bias[:, last] += value
                continue
            prefix = torch.tensor(seq[:-1], dtype=input_ids.dtype, device=input_ids.device)
            match = (input_ids[:, -len(prefix) :] == prefix).all(dim=-1)  # [batch]
            bias[:, last] += torch.where(match, value, 0.0).to(bias.dtype)
        return bias

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        return scores + self._bias(input_ids, scores)


class BannedSequences(SequenceBias):
    """Never complete one of these token sequences (transformers' ``NoBadWordsLogitsProcessor``:
    a one-token entry is always removed, a longer one's last token once the text ends with the
    rest; a one-token entry equal to an EOS id is ignored, as there)."""

    reweights = False

    def __init__(self, sequences: Sequence[Sequence[int]], eos_token_ids: Sequence[int] = ()):
        eos = {int(e) for e in eos_token_ids}
        kept = [tuple(s) for s in sequences if not (len(s) == 1 and int(s[0]) in eos)]
        _check(bool(kept), "no sequences to ban")
        super().__init__(dict.fromkeys(kept, NEG_INF))

    @property
    def label(self) -> str:
        return f"banned ({len(self.sequence_bias)})"

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        return scores.masked_fill(self._bias(input_ids, scores) == NEG_INF, NEG_INF)


class SuppressTokens(LogitsProcessor):
    """Remove these token ids at every step (transformers' ``SuppressTokensLogitsProcessor``);
    ids outside the vocabulary are ignored."""

    def __init__(self, token_ids: Sequence[int]) -> None:
        _check(
            all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in token_ids),
            f"suppress_tokens must be token ids >= 0, got {token_ids!r}",
        )
        self.token_ids = tuple(token_ids)

    @property
    def label(self) -> str:
        return f"suppressed ({len(self.token_ids)})"

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        out = scores.clone()
        out[..., [t for t in self.token_ids if t < scores.shape[-1]]] = NEG_INF
        return out


# --------------------------------------------------------------------------------------------
# Truncation
# --------------------------------------------------------------------------------------------


class TopNSigma(LogitsProcessor):
    """Top-nσ (Tang et al. 2024; llama.cpp ``llama_sampler_top_n_sigma_apply``): keep logits
    >= max - n·σ, where σ is the population standard deviation of the logits still in (those
    not -inf). Works on logits, so it ignores temperature. 0 is off."""

    def __init__(self, n: float) -> None:
        check_setting("top_n_sigma", n)
        self.n = float(n)

    @property
    def label(self) -> str:
        return f"top-nσ {self.n:g}"

    def _sigma(self, scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        live = scores != NEG_INF
        count = live.sum(-1, keepdim=True).clamp_min(1)
        x = torch.where(live, scores, 0.0)
        mean = x.sum(-1, keepdim=True) / count
        var = (torch.where(live, scores - mean, 0.0) ** 2).sum(-1, keepdim=True) / count
        return scores.amax(-1, keepdim=True), var.sqrt()

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self.n <= 0 or scores.shape[-1] <= 1:
            return scores.clone()
        top, sigma = self._sigma(scores)
        return scores.masked_fill(scores < top - self.n * sigma, NEG_INF)

    def note(self, before: torch.Tensor, after: torch.Tensor) -> torch.Tensor:
        return self._sigma(before)[1]

    def describe(self, values: Sequence[float], show: Callable[[int], str]) -> str:
        return f"σ {values[0]:.2f}: kept logits ≥ max − {self.n * values[0]:.2f}"


def _keep_top(remove: torch.Tensor, scores: torch.Tensor, k: int = 1) -> torch.Tensor:
    """``remove`` without the ``k`` highest scores (transformers' min_tokens_to_keep)."""
    kth = torch.topk(scores, min(k, scores.shape[-1]), dim=-1).values[..., -1:]
    return remove & (scores < kth)


class EpsilonCutoff(LogitsProcessor):
    """Epsilon sampling (Hewitt et al. 2022; transformers' ``EpsilonLogitsWarper``): remove
    tokens with probability < epsilon, keeping the most probable one. 0 is off."""

    def __init__(self, epsilon: float, min_tokens_to_keep: int = 1) -> None:
        check_setting("epsilon_cutoff", epsilon)
        self.epsilon, self.min_tokens_to_keep = float(epsilon), min_tokens_to_keep

    @property
    def label(self) -> str:
        return f"epsilon {self.epsilon:g}"

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self.epsilon <= 0:
            return scores.clone()
        remove = _keep_top(scores.softmax(-1) < self.epsilon, scores, self.min_tokens_to_keep)
        return scores.masked_fill(remove, NEG_INF)


class EtaCutoff(LogitsProcessor):
    """Eta sampling (Hewitt et al. 2022; transformers' ``EtaLogitsWarper``): remove tokens with
    probability < min(eta, sqrt(eta) · exp(-H)), H the entropy in nats; the most probable is
    kept. 0 is off."""

    def __init__(self, eta: float, min_tokens_to_keep: int = 1) -> None:
        check_setting("eta_cutoff", eta)
        self.eta, self.min_tokens_to_keep = float(eta), min_tokens_to_keep

    @property
    def label(self) -> str:
        return f"eta {self.eta:g}"

    def _cutoff(self, scores: torch.Tensor) -> torch.Tensor:
        logp = scores.log_softmax(-1)
        entropy = -torch.nan_to_num(logp.exp() * logp).sum(-1, keepdim=True)
        eta = torch.tensor(self.eta, dtype=scores.dtype, device=scores.device)
        return torch.minimum(eta, eta.sqrt() * torch.exp(-entropy))  # [batch, 1]

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self.eta <= 0:
            return scores.clone()
        remove = scores.softmax(-1) < self._cutoff(scores)
        return scores.masked_fill(_keep_top(remove, scores, self.min_tokens_to_keep), NEG_INF)

    def note(self, before: torch.Tensor, after: torch.Tensor) -> torch.Tensor:
        return self._cutoff(before)

    def describe(self, values: Sequence[float], show: Callable[[int], str]) -> str:
        return f"cutoff p < {values[0]:.2g}"


class TopA(LogitsProcessor):
    """Top-a (BlinkDL; koboldcpp and text-generation-webui): remove tokens with probability
    < a · p_max², keeping the most probable. 0 is off."""

    def __init__(self, a: float) -> None:
        check_setting("top_a", a)
        self.a = float(a)

    @property
    def label(self) -> str:
        return f"top-a {self.a:g}"

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self.a <= 0:
            return scores.clone()
        probs = scores.softmax(-1)
        p_max = probs.amax(-1, keepdim=True)
        remove = _keep_top(probs < self.a * p_max * p_max, scores)
        return scores.masked_fill(remove, NEG_INF)


class StepState:
    """What a chain's stateful stages read at each step: the step's seeded generator (XTC's
    draw) and mirostat's running target surprise mu. The session fills it before each step."""

    def __init__(self) -> None:
        self.generator: torch.Generator | None = None
        self.mu: float | None = None


class XTC(LogitsProcessor):
    """Exclude Top Choices (p-e-w, text-generation-webui #6335; llama.cpp
    ``llama_sampler_xtc_apply``): with chance ``probability`` (one uniform draw from the step's
    generator, fires when draw <= probability), if at least two tokens have probability
    >= ``threshold``, remove all of them except the least probable one. Ties with that least
    probable one are kept. probability 0 is off."""

    needs_state = True

    def __init__(self, threshold: float, probability: float, seed: int = 0) -> None:
        check_setting("xtc_threshold", threshold)
        check_setting("xtc_probability", probability)
        self.threshold, self.probability = float(threshold), float(probability)
        self.state = StepState()
        self.seed = seed

    @property
    def label(self) -> str:
        return f"XTC {self.threshold:g}/{self.probability:g}"

    def _generator(self, device: torch.device) -> torch.Generator:
        g = self.state.generator
        if g is None or g.device.type != device.type:
            g = self.state.generator = torch.Generator(device=device).manual_seed(self.seed)
        return g

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self.probability <= 0:
            return scores.clone()
        draw = torch.rand(
            (scores.shape[0], 1), generator=self._generator(scores.device), device=scores.device
        )
        probs = scores.softmax(-1)
        above = probs >= self.threshold
        least = torch.where(above, probs, 2.0).amin(-1, keepdim=True)
        fire = (draw <= self.probability) & (above.sum(-1, keepdim=True) >= 2)
        return scores.masked_fill(above & (probs > least) & fire, NEG_INF)

    def note(self, before: torch.Tensor, after: torch.Tensor) -> torch.Tensor:
        removed = (after == NEG_INF) & (before != NEG_INF)
        k = min(3, before.shape[-1])
        top = torch.topk(torch.where(removed, before, NEG_INF), k, dim=-1)
        ids = torch.where(top.values > NEG_INF, top.indices, -1)
        return torch.cat([removed.sum(-1, keepdim=True), ids], dim=-1)

    def describe(self, values: Sequence[float], show: Callable[[int], str]) -> str:
        n = int(values[0])
        if n == 0:
            return "XTC did not fire"
        names = ", ".join(repr(show(int(i))) for i in values[1:] if i >= 0)
        return f"XTC removed {n} top token{'s' if n > 1 else ''}: {names}"


# --------------------------------------------------------------------------------------------
# Temperature variants
# --------------------------------------------------------------------------------------------


class DynamicTemperature(LogitsProcessor):
    """Entropy-based dynamic temperature (llama.cpp ``llama_sampler_temp_ext_apply``, by
    kalomaze): with the N tokens still in, H their entropy and H_max = ln N, the temperature is
    ``max(0, t - range) + 2·range·(H / H_max) ** exponent`` (from t - range to t + range); one
    token left: unchanged. A temperature of 0 keeps only the argmax."""

    def __init__(self, temperature: float, temp_range: float, exponent: float = 1.0) -> None:
        check_setting("temperature", temperature)
        check_setting("dynatemp_range", temp_range)
        check_setting("dynatemp_exponent", exponent)
        self.temperature, self.range, self.exponent = float(temperature), temp_range, exponent

    @property
    def label(self) -> str:
        return f"dynamic temperature {self.temperature:g}±{self.range:g}"

    def _temperature(self, scores: torch.Tensor) -> torch.Tensor:
        low = max(0.0, self.temperature - self.range)
        high = self.temperature + self.range
        n = (scores != NEG_INF).sum(-1, keepdim=True)
        logp = scores.float().log_softmax(-1)
        entropy = -torch.nan_to_num(logp.exp() * logp).sum(-1, keepdim=True)
        ratio = entropy / torch.log(n.clamp_min(2).float())
        return (low + (high - low) * ratio.clamp(0, 1) ** self.exponent).to(scores.dtype)

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        t = self._temperature(scores)  # [batch, 1]
        single = (scores != NEG_INF).sum(-1, keepdim=True) <= 1
        top = scores.amax(-1, keepdim=True)
        scaled = (scores - top) / t.clamp_min(1e-30)
        greedy = Temperature(0)(input_ids, scores)
        out = torch.where(t > 0, scaled, greedy)
        return torch.where(single, scores, out)

    def note(self, before: torch.Tensor, after: torch.Tensor) -> torch.Tensor:
        return self._temperature(before)

    def describe(self, values: Sequence[float], show: Callable[[int], str]) -> str:
        return f"dynamic temperature {values[0]:.2f}"


class Smoothing(LogitsProcessor):
    """Quadratic sampling / smoothing factor (kalomaze; text-generation-webui
    ``QuadraticSamplingLogitsWarper``): with d = logit - max, logit' = max - k·f·d² + s·f·d³ where
    k = (3 - curve) / 2 and s = (curve - 1) / 2 (curve 1: a plain parabola). Larger f makes the
    distribution sharper around the top; 0 is off. -inf stays -inf."""

    def __init__(self, factor: float, curve: float = 1.0) -> None:
        check_setting("smoothing_factor", factor)
        check_setting("smoothing_curve", curve)
        self.factor, self.curve = float(factor), float(curve)

    @property
    def label(self) -> str:
        return f"smoothing {self.factor:g}"

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self.factor <= 0:
            return scores.clone()
        top = scores.amax(-1, keepdim=True)
        d = torch.where(scores == NEG_INF, 0.0, scores - top)
        k, s = (3 - self.curve) / 2, (self.curve - 1) / 2
        out = top - k * self.factor * d * d + s * self.factor * d * d * d
        return torch.where(scores == NEG_INF, scores, out)


class Mirostat(LogitsProcessor):
    """Mirostat (Basu et al., ICLR 2021; llama.cpp ``llama_sampler_mirostat_apply`` (v1) and
    ``llama_sampler_mirostat_v2_apply`` (v2)), aiming at a target surprise ``tau`` (bits).

    v2 keeps the tokens whose surprise -log2 p is <= mu (at least the top one). v1 estimates
    the Zipf exponent s from the top m = 100 probabilities (least squares of
    ln(p_i / p_i+1) on ln((i + 2) / (i + 1))), then keeps the top
    k = ((s - 1) · 2^mu / (1 - N^(1 - s))) ^ (1 / s) tokens (N the vocabulary size, k >= 1).
    After the token is drawn, mu <- mu - eta · (surprise of the drawn token - tau): the session
    does this with the drawn token's final probability (``update_mu``); mu starts at 2·tau.
    Ties at v1's cut: the lower token id ranks first."""

    needs_state = True
    M = 100

    def __init__(self, version: int, tau: float = 5.0, eta: float = 0.1) -> None:
        _check(version in (1, 2), f"mirostat must be 1 or 2, got {version!r}")
        check_setting("mirostat_tau", tau)
        check_setting("mirostat_eta", eta)
        self.version, self.tau, self.eta = version, float(tau), float(eta)
        self.state = StepState()

    @property
    def label(self) -> str:
        return f"mirostat v{self.version} τ {self.tau:g}"

    @property
    def mu(self) -> float:
        return self.state.mu if self.state.mu is not None else 2 * self.tau

    def update_mu(self, mu: float, chosen_prob: float) -> float:
        """mu after drawing a token of (final) probability ``chosen_prob``."""
        surprise = -math.log2(chosen_prob) if chosen_prob > 0 else 64.0
        return mu - self.eta * (surprise - self.tau)

    def _k(self, sorted_p: torch.Tensor, vocab: int) -> torch.Tensor:
        m = min(self.M, sorted_p.shape[-1])
        p = sorted_p[..., :m].double()  # [batch, m]
        i = torch.arange(m - 1, device=p.device, dtype=torch.float64)
        t = torch.log((i + 2) / (i + 1))  # [m - 1]
        valid = p[..., 1:] > 0  # only tokens still in (llama.cpp's array has no others)
        b = torch.where(valid, torch.log(p[..., :-1] / p[..., 1:].clamp_min(1e-300)), 0.0)
        tt = torch.where(valid, t * t, 0.0)
        s_hat = (t * b).sum(-1, keepdim=True) / tt.sum(-1, keepdim=True)
        eps = s_hat - 1
        k = ((eps * 2.0**self.mu) / (1 - float(vocab) ** (-eps))) ** (1 / s_hat)
        k = torch.nan_to_num(k, nan=1.0, posinf=float(vocab)).clamp(1, vocab)
        return k.floor().long()  # [batch, 1]

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self.version == 2:
            # Cutting the sorted list at the first surprise > mu is a threshold on p: no sort.
            surprise = -scores.float().log_softmax(-1) / math.log(2)
            remove = surprise > self.mu
            top = scores.argmax(-1, keepdim=True)
            return scores.masked_fill(remove.scatter(-1, top, False), NEG_INF)
        sorted_scores, order = torch.sort(scores, dim=-1, descending=True, stable=True)
        sorted_p = sorted_scores.float().softmax(-1)
        rank = torch.arange(scores.shape[-1], device=scores.device)
        remove_sorted = rank >= self._k(sorted_p, scores.shape[-1])
        remove_sorted[..., 0] = False
        remove = torch.zeros_like(remove_sorted).scatter(-1, order, remove_sorted)
        return scores.masked_fill(remove, NEG_INF)

    def note(self, before: torch.Tensor, after: torch.Tensor) -> torch.Tensor:
        return (after != NEG_INF).sum(-1, keepdim=True)

    def describe(self, values: Sequence[float], show: Callable[[int], str]) -> str:
        return f"mu {self.mu:.2f}: kept {int(values[0])}"


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


# --------------------------------------------------------------------------------------------
# The chain built from settings
# --------------------------------------------------------------------------------------------


class BuildInfo:
    """What a stage may need besides the settings: the prompt's length, the EOS ids and the
    tokenizer (to turn words into token ids)."""

    def __init__(
        self, prompt_length: int = 0, eos_token_ids: Sequence[int] = (), tokenizer: Any = None
    ) -> None:
        self.prompt_length = prompt_length
        self.eos_token_ids = tuple(eos_token_ids)
        self.tokenizer = tokenizer

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def sequences(self, keys: Sequence[str]) -> dict[str, list[tuple[int, ...]]]:
        encode = self.encode if self.tokenizer is not None else None
        return {k: parse_bias_key(k, encode) for k in keys}

    def breaker_ids(self, breakers: Sequence[str]) -> list[int]:
        """Each breaker's last token, as text-generation-webui does (encoded after an "a" so
        a SentencePiece tokenizer adds no leading space)."""
        if self.tokenizer is None:
            return []
        return [self.encode("a" + b)[-1] for b in breakers if self.encode("a" + b)]


def _logit_bias(s: SamplerSettings, info: BuildInfo) -> SequenceBias:
    found = info.sequences([k for k, _ in s.logit_bias])
    bias: dict[tuple[int, ...], float] = {}
    for key, value in s.logit_bias:
        for seq in found[key]:
            bias[seq] = bias.get(seq, 0.0) + value
    return SequenceBias(bias)


def _banned(s: SamplerSettings, info: BuildInfo) -> BannedSequences:
    found = info.sequences(s.banned_strings)
    return BannedSequences([q for k in s.banned_strings for q in found[k]], info.eos_token_ids)


def _temperature(s: SamplerSettings, info: BuildInfo) -> LogitsProcessor:
    if s.dynatemp_range > 0 and s.temperature > 0:
        return DynamicTemperature(s.temperature, s.dynatemp_range, s.dynatemp_exponent)
    return Temperature(s.temperature)


def _grammar(s: SamplerSettings, info: BuildInfo) -> LogitsProcessor:
    from engine.sampling.grammar import Grammar  # its own module, which imports this one

    return Grammar(s.grammar, info.tokenizer, info.prompt_length, info.eos_token_ids)


def _adaptive_p(s: SamplerSettings, info: BuildInfo) -> LogitsProcessor:
    from engine.sampling.adaptive_p import AdaptiveP  # its own module, which imports this one

    return AdaptiveP(s.adaptive_p_target, s.adaptive_p_decay)


Factory = Callable[[SamplerSettings, BuildInfo], LogitsProcessor]

# Each stage: when its value is neutral, and how to build it.
STAGES: dict[str, tuple[Callable[[SamplerSettings], bool], Factory]] = {
    "logit_bias": (lambda s: not s.logit_bias, _logit_bias),
    "repetition_penalty": (
        lambda s: s.repetition_penalty == 1.0,
        lambda s, _i: RepetitionPenalty(s.repetition_penalty, s.penalty_last_n),
    ),
    "frequency_presence": (
        lambda s: s.frequency_penalty == 0 and s.presence_penalty == 0,
        lambda s, _i: FrequencyPresencePenalty(
            s.frequency_penalty, s.presence_penalty, s.penalty_last_n
        ),
    ),
    "dry": (
        lambda s: s.dry_multiplier == 0,
        lambda s, i: DRY(
            s.dry_multiplier,
            s.dry_base,
            s.dry_allowed_length,
            s.dry_penalty_last_n,
            i.breaker_ids(s.dry_sequence_breakers),
        ),  # fmt: skip
    ),
    "no_repeat_ngram_size": (
        lambda s: s.no_repeat_ngram_size == 0,
        lambda s, _i: NoRepeatNGram(s.no_repeat_ngram_size),
    ),
    "banned_strings": (lambda s: not s.banned_strings, _banned),
    "min_new_tokens": (
        lambda s: s.min_new_tokens == 0,
        lambda s, i: MinNewTokens(s.min_new_tokens, i.prompt_length, i.eos_token_ids),
    ),
    "suppress_tokens": (
        lambda s: not s.suppress_tokens,
        lambda s, _i: SuppressTokens(s.suppress_tokens),
    ),
    "top_n_sigma": (lambda s: s.top_n_sigma <= 0, lambda s, _i: TopNSigma(s.top_n_sigma)),
    "smoothing_factor": (
        lambda s: s.smoothing_factor <= 0,
        lambda s, _i: Smoothing(s.smoothing_factor, s.smoothing_curve),
    ),
    "temperature": (
        lambda s: s.temperature == 1.0 and s.dynatemp_range == 0,
        _temperature,
    ),
    "top_k": (lambda s: s.top_k == 0, lambda s, _i: TopK(s.top_k)),
    "top_p": (lambda s: s.top_p >= 1.0, lambda s, _i: TopP(s.top_p)),
    "min_p": (lambda s: s.min_p <= 0.0, lambda s, _i: MinP(s.min_p)),
    "typical_p": (lambda s: s.typical_p >= 1.0, lambda s, _i: TypicalP(s.typical_p)),
    "epsilon_cutoff": (
        lambda s: s.epsilon_cutoff <= 0,
        lambda s, _i: EpsilonCutoff(s.epsilon_cutoff),
    ),
    "eta_cutoff": (lambda s: s.eta_cutoff <= 0, lambda s, _i: EtaCutoff(s.eta_cutoff)),
    "top_a": (lambda s: s.top_a <= 0, lambda s, _i: TopA(s.top_a)),
    "xtc": (
        lambda s: s.xtc_probability <= 0,
        lambda s, _i: XTC(s.xtc_threshold, s.xtc_probability, s.seed),
    ),
    "mirostat": (
        lambda s: s.mirostat == 0,
        lambda s, _i: Mirostat(s.mirostat, s.mirostat_tau, s.mirostat_eta),
    ),
    "grammar": (lambda s: not s.grammar, _grammar),
    "adaptive_p": (lambda s: s.adaptive_p_target < 0, _adaptive_p),
}
assert tuple(sorted(STAGES)) == tuple(sorted(STAGE_NAMES))
# The stages beam search takes (they reweight or ban; they do not sample).
PENALTIES = (
    "logit_bias", "repetition_penalty", "frequency_presence", "dry", "no_repeat_ngram_size",
    "banned_strings", "min_new_tokens", "suppress_tokens",
)  # fmt: skip


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


def build_chain(
    settings: SamplerSettings,
    prompt_length: int = 0,
    eos_token_ids: Sequence[int] = (),
    only: Sequence[str] | None = None,
    tokenizer: Any = None,
) -> Chain:
    """The stages of ``settings`` in its order, neutral ones left out; greedy at temperature 0.
    ``only`` keeps just the named stages (beam search takes the penalties). ``tokenizer``
    turns the words of logit bias, bans and DRY's breakers into token ids."""
    info = BuildInfo(prompt_length, eos_token_ids, tokenizer)
    stages = [
        make(settings, info)
        for name in stage_order(settings)
        for neutral, make in (STAGES[name],)
        if not neutral(settings) and (only is None or name in only)
    ]
    return Chain(stages, greedy=settings.temperature == 0)
