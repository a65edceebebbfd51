"""The chain built from a ``SamplerSettings`` record: the STAGES table (when a stage is
neutral, how to build it) and ``build_chain``. A new stage is one row in STAGES (and its name
in settings' STAGE_NAMES)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from engine.sampling.adaptive_p import AdaptiveP
from engine.sampling.base import LogitsProcessor
from engine.sampling.chain import Chain
from engine.sampling.mirostat import Mirostat
from engine.sampling.penalties import (
    DRY,
    BannedSequences,
    FrequencyPresencePenalty,
    MinNewTokens,
    NoRepeatNGram,
    RepetitionPenalty,
    SequenceBias,
    SuppressTokens,
    parse_bias_key,
)
from engine.sampling.settings import STAGE_NAMES, SamplerSettings, stage_order
from engine.sampling.temperature import DynamicTemperature, Smoothing, Temperature
from engine.sampling.truncation import (
    XTC,
    EpsilonCutoff,
    EtaCutoff,
    MinP,
    TopA,
    TopK,
    TopNSigma,
    TopP,
    TypicalP,
)


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
    from engine.sampling.grammar import Grammar  # llguidance loads only when a grammar is set

    return Grammar(s.grammar, info.tokenizer, info.prompt_length, info.eos_token_ids)


def _adaptive_p(s: SamplerSettings, info: BuildInfo) -> LogitsProcessor:
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


def build_chain(
    settings: SamplerSettings,
    prompt_length: int = 0,
    eos_token_ids: Sequence[int] = (),
    only: Sequence[str] | None = None,
    tokenizer: Any = None,
) -> Chain:
    """The stages of ``settings`` in its order, neutral and idle ones (``LogitsProcessor.idle``)
    left out; greedy at temperature 0.
    ``only`` keeps just the named stages (beam search takes the penalties). ``tokenizer``
    turns the words of logit bias, bans and DRY's breakers into token ids."""
    if settings.grammar and only is not None and "grammar" not in only:
        raise ValueError(
            "This method does not take a grammar (beam and contrastive search rank whole "
            "sequences): use sampling or speculative decoding, or clear the grammar"
        )
    info = BuildInfo(prompt_length, eos_token_ids, tokenizer)
    made = [
        make(settings, info)
        for name in stage_order(settings)
        for neutral, make in (STAGES[name],)
        if not neutral(settings) and (only is None or name in only)
    ]
    # an idle stage (min new tokens with no end ids) would cost a copy of the scores, the cut
    # marks and the input ids a token (~0.1 ms on SmolLM2's 49,152 tokens) for nothing
    return Chain([stage for stage in made if not stage.idle], greedy=settings.temperature == 0)
