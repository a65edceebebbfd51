"""Each processor on small hand-made logits against hand-computed results."""

import math

import pytest
import torch
from torch.testing import assert_close

from engine import (
    GreedyProcessor,
    MinNewTokens,
    MinP,
    MultinomialProcessor,
    NoRepeatNGram,
    NucleusProcessor,
    RepetitionPenalty,
    SamplerSettings,
    Temperature,
    TopK,
    TopKNucleusProcessor,
    TopKProcessor,
    TopP,
    TypicalP,
)
from engine.sampling.build import build_chain
from engine.sampling.chain import apply_chain

INF = float("inf")
NO_IDS = torch.empty((1, 0), dtype=torch.long)


def logits_of(probs):
    return torch.tensor([probs], dtype=torch.float32).log()


def kept(scores):
    return (scores[0] > -INF).nonzero().flatten().tolist()


def test_temperature_divides_and_zero_is_argmax():
    s = torch.tensor([[1.0, 3.0, 2.0]])
    out = Temperature(2.0)(NO_IDS, s)
    assert_close(out.softmax(-1), (s / 2).softmax(-1))
    g = Temperature(0)(NO_IDS, s)
    assert kept(g) == [1]
    assert_close(g.softmax(-1), torch.tensor([[0.0, 1.0, 0.0]]))


def test_temperature_near_zero_is_finite_and_greedy():
    s = torch.tensor([[1.0, 3.0, 2.9999]])
    p = Temperature(1e-6)(NO_IDS, s).softmax(-1)
    assert torch.isfinite(p).all()
    assert_close(p, torch.tensor([[0.0, 1.0, 0.0]]))


def test_temperature_zero_tie_keeps_first():
    s = torch.tensor([[2.0, 5.0, 5.0]])
    assert kept(Temperature(0)(NO_IDS, s)) == [1]


def test_top_k_basic_and_ties_kept():
    s = torch.tensor([[1.0, 4.0, 3.0, 2.0]])
    assert kept(TopK(2)(NO_IDS, s)) == [1, 2]
    tie = torch.tensor([[1.0, 3.0, 3.0, 2.0]])
    assert kept(TopK(1)(NO_IDS, tie)) == [1, 2]  # documented: ties with the k-th are kept


def test_top_k_larger_than_vocab_and_zero_are_noops():
    s = torch.tensor([[1.0, 4.0, 3.0]])
    assert_close(TopK(10)(NO_IDS, s), s)
    assert_close(TopK(0)(NO_IDS, s), s)


def test_top_p_keeps_the_crossing_token():
    s = logits_of([0.5, 0.3, 0.15, 0.05])
    assert kept(TopP(0.6)(NO_IDS, s)) == [0, 1]  # 0.5 < 0.6, so 0.3 crosses and is kept
    assert kept(TopP(0.5)(NO_IDS, s)) == [0]  # mass exactly p: no extra token
    assert kept(TopP(0.81)(NO_IDS, s)) == [0, 1, 2]


def test_top_p_one_and_tiny():
    s = logits_of([0.2, 0.5, 0.3])
    assert_close(TopP(1.0)(NO_IDS, s), s)
    assert kept(TopP(1e-9)(NO_IDS, s)) == [1]
    assert kept(TopP(0.0)(NO_IDS, s)) == [1]


def test_top_p_tie_on_boundary_keeps_lower_id():
    s = logits_of([0.25, 0.25, 0.5])
    assert kept(TopP(0.6)(NO_IDS, s)) == [0, 2]


def test_min_p():
    s = logits_of([0.5, 0.3, 0.15, 0.05])
    assert kept(MinP(0.3)(NO_IDS, s)) == [0, 1, 2]  # threshold 0.15, ties kept
    assert kept(MinP(0.5)(NO_IDS, s)) == [0, 1]
    assert kept(MinP(1.0)(NO_IDS, s)) == [0]


def test_typical_p_by_hand():
    probs = [0.5, 0.3, 0.15, 0.05]
    h = -sum(p * math.log(p) for p in probs)
    distance = [abs(-math.log(p) - h) for p in probs]
    order = sorted(range(4), key=lambda i: distance[i])
    out = kept(TypicalP(0.4)(NO_IDS, logits_of(probs)))
    # first token in typicality order already reaches 0.4? take tokens until mass >= 0.4
    expected, mass = [], 0.0
    for i in order:
        if mass >= 0.4:
            break
        expected.append(i)
        mass += probs[i]
    assert out == sorted(expected)


def test_repetition_penalty():
    s = torch.tensor([[2.0, -2.0, 1.0]])
    ids = torch.tensor([[0, 1, 1]])
    out = RepetitionPenalty(2.0)(ids, s)
    assert_close(out, torch.tensor([[1.0, -4.0, 1.0]]))


def test_no_repeat_ngram():
    ids = torch.tensor([[3, 4, 5, 3, 4]])
    s = torch.zeros(1, 8)
    out = NoRepeatNGram(3)(ids, s)  # "3 4" was followed by 5: 5 is banned
    assert kept(out) == [0, 1, 2, 3, 4, 6, 7]
    assert_close(NoRepeatNGram(0)(ids, s), s)


def test_min_new_tokens_suppresses_eos():
    s = torch.zeros(1, 5)
    p = MinNewTokens(2, prompt_length=3, eos_token_ids=[1, 4])
    assert kept(p(torch.zeros(1, 4, dtype=torch.long), s)) == [0, 2, 3]
    assert kept(p(torch.zeros(1, 5, dtype=torch.long), s)) == [0, 1, 2, 3, 4]


@pytest.mark.parametrize(
    "proc",
    [
        Temperature(0.7),
        Temperature(0),
        TopK(2),
        TopP(0.5),
        MinP(0.2),
        TypicalP(0.5),
        RepetitionPenalty(1.3),
        NoRepeatNGram(2),
        MinNewTokens(5, 0, [1]),
    ],
)
def test_no_processor_changes_its_input(proc):
    s = torch.tensor([[0.5, 2.0, -1.0, 1.5, 0.0]])
    ids = torch.tensor([[1, 3, 1, 3]])
    before_s, before_ids = s.clone(), ids.clone()
    out = proc(ids, s)
    assert_close(s, before_s)
    assert torch.equal(ids, before_ids)
    assert out.data_ptr() != s.data_ptr()


@pytest.mark.parametrize(
    "make, bad",
    [
        (Temperature, -1),
        (TopK, -1),
        (TopK, 1.5),
        (TopP, 1.5),
        (TopP, -0.1),
        (MinP, 2),
        (TypicalP, 0),
        (RepetitionPenalty, 0),
        (NoRepeatNGram, -2),
        (Temperature, float("nan")),
    ],
)
def test_validation_in_init(make, bad):
    with pytest.raises(ValueError):
        make(bad)


def test_order_switch_changes_top_p_result():
    # temperature 2 flattens the distribution: applied first, top-p 0.6 keeps more tokens.
    s = logits_of([0.6, 0.25, 0.1, 0.05])
    first = SamplerSettings(temperature=2.0, top_p=0.6, order="temperature_first")
    last = SamplerSettings(temperature=2.0, top_p=0.6, order="temperature_last")
    kf = kept(apply_chain(build_chain(first).stages, NO_IDS, s)[0])
    kl = kept(apply_chain(build_chain(last).stages, NO_IDS, s)[0])
    assert kl == [0]
    assert kf == [0, 1]


def test_sampled_frequencies_match_processed_distribution():
    s = logits_of([0.4, 0.3, 0.2, 0.1])
    chain = build_chain(SamplerSettings(temperature=1.0, top_k=3))
    probs = chain.probs(None, s)[0][0]
    gen = torch.Generator().manual_seed(1)
    n = 40000
    draws = torch.multinomial(probs, n, replacement=True, generator=gen)
    freq = torch.bincount(draws, minlength=4).float() / n
    assert_close(freq, probs, atol=0.01, rtol=0)
    assert freq[3] == 0


def test_seed_processors_contract():
    logits = torch.tensor([[1.0, 3.0, 2.0, 0.5]])
    before = logits.clone()
    g = GreedyProcessor()
    probs = g(logits)
    assert_close(probs.sum(-1), torch.tensor([1.0]))
    assert int(g.sample(probs)) == 1
    p = TopKProcessor(1.0, 2)(logits)
    assert (p[0, [0, 3]] == 0).all()
    n = NucleusProcessor(0.5, 0.9)(logits)
    assert_close(n.sum(-1), torch.tensor([1.0]))
    tkn = TopKNucleusProcessor(1.0, 3, 0.5)
    assert kept(tkn(logits).log()) == [1]
    assert_close(logits, before)  # unlike the seed, never modified in place


def test_seed_processor_temperature_applied_after_filters():
    logits = torch.tensor([[0.0, 1.0, 2.0]])
    probs = TopKProcessor(2.0, 2)(logits)
    expected = torch.tensor([[-INF, 1.0, 2.0]]) / 2.0
    assert_close(probs, expected.softmax(-1))


def test_multinomial_processor_seeded():
    logits = torch.zeros(1, 50)
    a = [int(MultinomialProcessor(1.0, seed=3).sample(logits.softmax(-1))) for _ in range(3)]
    b = [int(MultinomialProcessor(1.0, seed=3).sample(logits.softmax(-1))) for _ in range(3)]
    assert a == b


def test_a_stage_that_would_remove_every_token_is_skipped():
    # every token of a 3-token vocabulary has been used: no-repeat-ngram 1 would ban them all
    chain = build_chain(SamplerSettings(temperature=0.0, no_repeat_ngram_size=1)).stages
    scores = torch.tensor([[0.1, 0.5, 0.2]])
    out, _ = apply_chain(chain, torch.tensor([[0, 1, 2]]), scores)
    assert kept(out) == [1]  # the ban was skipped; greedy still picks the argmax
    # with one unused token left, the ban applies and that token is the only choice
    out, _ = apply_chain(chain, torch.tensor([[0, 1]]), scores)
    assert kept(out) == [2]


@pytest.mark.parametrize(
    "field, make, bad",
    [
        ("temperature", Temperature, -0.5),
        ("top_k", TopK, 2.5),
        ("top_p", TopP, 1.01),
        ("min_p", MinP, -1),
        ("typical_p", TypicalP, 0.0),
        ("repetition_penalty", RepetitionPenalty, 0),
        ("no_repeat_ngram_size", NoRepeatNGram, True),
    ],
)
def test_settings_and_processors_refuse_the_same_values_alike(field, make, bad):
    # SamplerSettings checks without building processors (no torch before the window shows);
    # both must refuse the same values with the same message.
    with pytest.raises(ValueError) as from_processor:
        make(bad)
    with pytest.raises(ValueError) as from_settings:
        SamplerSettings(**{field: bad})
    assert str(from_settings.value) == str(from_processor.value)
    assert field in str(from_settings.value)
