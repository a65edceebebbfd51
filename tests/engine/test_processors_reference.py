"""Our stages against transformers' own processors, where transformers still ships one: same
scores (compared as log-probabilities, so a constant shift does not count) and the same removed
tokens, on random logits, on a tiny model's logits, with ties and extreme values."""

import pytest
import torch
from torch.testing import assert_close
from transformers.generation import logits_process as hf

from engine.sampling.penalties import (
    BannedSequences,
    MinNewTokens,
    NoRepeatNGram,
    RepetitionPenalty,
    SequenceBias,
    SuppressTokens,
)
from engine.sampling.temperature import Temperature
from engine.sampling.truncation import EpsilonCutoff, EtaCutoff, MinP, TopK, TopP, TypicalP
from tests.tiny_models import tiny_llama

INF = float("inf")
VOCAB = 64


def _random_rows() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    normal = torch.randn(3, VOCAB, generator=g) * 3
    with_inf = normal.clone()
    with_inf[:, ::5] = -INF  # tokens an earlier stage removed
    huge = normal * 1e3  # extreme but finite
    ties = torch.randint(0, 4, (3, VOCAB), generator=g).float()  # many exact ties
    _random_rows.ties = ties
    return [normal, with_inf, huge, ties]


def _model_rows() -> torch.Tensor:
    model = tiny_llama(0)
    ids = torch.tensor([[2, 70, 71, 72, 70, 71, 105, 33]])
    with torch.no_grad():
        return model(ids).logits[0, -3:]  # [3, 384]


def _ids(vocab: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(1)
    return torch.randint(0, vocab, (3, 12), generator=g)


# (ours, transformers') pairs; each builds its two processors for a vocabulary size
PAIRS = {
    "temperature": lambda v: (Temperature(0.7), hf.TemperatureLogitsWarper(0.7)),
    "top_k": lambda v: (TopK(7), hf.TopKLogitsWarper(7)),
    "top_p": lambda v: (TopP(0.8), hf.TopPLogitsWarper(0.8)),
    "min_p": lambda v: (MinP(0.1), hf.MinPLogitsWarper(0.1)),
    "typical_p": lambda v: (TypicalP(0.6), hf.TypicalLogitsWarper(0.6)),
    "epsilon": lambda v: (EpsilonCutoff(0.02), hf.EpsilonLogitsWarper(0.02)),
    "eta": lambda v: (EtaCutoff(0.05), hf.EtaLogitsWarper(0.05)),
    "repetition": lambda v: (RepetitionPenalty(1.3), hf.RepetitionPenaltyLogitsProcessor(1.3)),
    "no_repeat": lambda v: (NoRepeatNGram(2), hf.NoRepeatNGramLogitsProcessor(2)),
    "min_new_tokens": lambda v: (
        MinNewTokens(20, 4, [1, 5]),
        hf.MinNewTokensLengthLogitsProcessor(4, 20, [1, 5]),
    ),
    "sequence_bias": lambda v: (
        SequenceBias({(3,): 2.5, (9,): -1.0, (4, 7): 4.0, (1, 2, 6): -3.0}),
        hf.SequenceBiasLogitsProcessor([[[3], 2.5], [[9], -1.0], [[4, 7], 4.0], [[1, 2, 6], -3.0]]),
    ),
    "bad_words": lambda v: (
        BannedSequences([[3], [4, 7], [11, 12, 13], [1]], eos_token_ids=[1]),
        hf.NoBadWordsLogitsProcessor([[3], [4, 7], [11, 12, 13], [1]], eos_token_id=[1]),
    ),
    "suppress": lambda v: (
        SuppressTokens([0, 5, 17, v + 3]),
        hf.SuppressTokensLogitsProcessor([0, 5, 17, v + 3]),
    ),
}


def _same_up_to_ties(ours: torch.Tensor, theirs: torch.Tensor) -> None:
    """The same kept scores as a multiset: which of several tied tokens survives a boundary is
    a documented choice (ours keeps the lower token id)."""
    for a, b in zip(ours, theirs, strict=True):
        assert_close(a[a > -INF].sort().values, b[b > -INF].sort().values)


def _same(ours: torch.Tensor, theirs: torch.Tensor) -> None:
    assert torch.equal(ours == -INF, theirs == -INF)
    assert_close(ours.log_softmax(-1), theirs.log_softmax(-1), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", sorted(PAIRS))
def test_stage_equals_transformers_on_random_logits(name):
    ours, theirs = PAIRS[name](VOCAB)
    ids = _ids(VOCAB)
    ids[0, -1], ids[0, 4] = 4, 4  # sequence bias / bad words: prefix (4,) matches row 0
    ids[1, -2:] = torch.tensor([11, 12])  # bad words: prefix (11, 12) matches row 1
    for scores in _random_rows():
        before = scores.clone()
        if scores is _random_rows.ties and name == "top_p":
            _same_up_to_ties(ours(ids, scores), theirs(ids, scores.clone()))
        else:
            _same(ours(ids, scores), theirs(ids, scores.clone()))
        assert torch.equal(scores, before)


@pytest.mark.parametrize("name", sorted(PAIRS))
def test_stage_equals_transformers_on_a_model(name):
    logits = _model_rows()
    ours, theirs = PAIRS[name](logits.shape[-1])
    ids = _ids(logits.shape[-1])
    _same(ours(ids, logits), theirs(ids, logits.clone()))


def test_typical_p_with_huge_logits():
    # One token takes all the mass; both keep exactly it.
    scores = torch.tensor([[0.0, 5000.0, -3000.0, 10.0]])
    ids = torch.zeros(1, 0, dtype=torch.long)
    _same(TypicalP(0.6)(ids, scores), hf.TypicalLogitsWarper(0.6)(ids, scores.clone()))


def test_repetition_penalty_range_equals_transformers_on_the_window():
    scores = _random_rows()[0]
    ids = _ids(VOCAB)
    ours = RepetitionPenalty(1.5, last_n=4)(ids, scores)
    theirs = hf.RepetitionPenaltyLogitsProcessor(1.5)(ids[:, -4:], scores.clone())
    _same(ours, theirs)
    assert not torch.equal(ours, RepetitionPenalty(1.5)(ids, scores))  # the range matters


def test_sequence_bias_prefix_longer_than_the_text_is_skipped():
    # transformers skips a biased sequence whose prefix is longer than the text; so do we
    scores = torch.zeros(1, 8)
    ids = torch.tensor([[4]])
    ours = SequenceBias({(4, 7): 3.0, (2, 4, 7): 5.0})(ids, scores)
    theirs = hf.SequenceBiasLogitsProcessor([[[4, 7], 3.0], [[2, 4, 7], 5.0]])(ids, scores.clone())
    assert_close(ours, theirs)
    assert ours[0, 7] == 3.0  # (4,) matched; (2, 4) is longer than the text
