"""Penalties and bans: reweight or remove tokens by what the sequence already holds."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from engine.sampling.base import NEG_INF, LogitsProcessor, _check, _window
from engine.sampling.checks import check_setting


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

    @property
    def idle(self) -> bool:
        """No end ids to hold back (a fixed-length run, as the bench's): a plain copy."""
        return not self.eos_token_ids

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        generated = input_ids.shape[-1] - self.prompt_length
        if generated >= self.min_new_tokens or self.idle:
            return scores.clone()
        eos = torch.tensor(self.eos_token_ids, device=scores.device)
        eos = eos[eos < scores.shape[-1]]
        out = scores.clone()
        out[..., eos] = NEG_INF
        return out


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
