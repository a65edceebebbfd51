"""The stages whose reference is not in transformers (llama.cpp, text-generation-webui, the
papers): each branch of the rule written in its docstring, on small vocabularies, against
numbers worked out by hand."""

import math

import pytest
import torch
from torch.testing import assert_close
from transformers import ByT5Tokenizer

from engine.sampling.build import build_chain
from engine.sampling.chain import apply_chain
from engine.sampling.mirostat import Mirostat
from engine.sampling.penalties import DRY, FrequencyPresencePenalty
from engine.sampling.settings import (
    LLAMA_CPP_ORDER,
    STAGE_NAMES,
    TRANSFORMERS_ORDER,
    SamplerSettings,
    stage_order,
)
from engine.sampling.temperature import DynamicTemperature, Smoothing
from engine.sampling.truncation import XTC, TopA, TopNSigma

INF = float("inf")
NO_IDS = torch.empty((1, 0), dtype=torch.long)


def logits_of(probs):
    return torch.tensor([probs], dtype=torch.float32).log()


def kept(scores):
    return (scores[0] > -INF).nonzero().flatten().tolist()


# -- frequency and presence ------------------------------------------------------------------


def test_frequency_and_presence_subtract_per_count():
    s = torch.tensor([[1.0, 1.0, 1.0, 1.0, 1.0, 1.0]])
    ids = torch.tensor([[2, 2, 5]])
    out = FrequencyPresencePenalty(0.5, 1.0)(ids, s)
    # token 2: 2 × 0.5 + 1 = 2; token 5: 1 × 0.5 + 1 = 1.5
    assert_close(out, torch.tensor([[1.0, 1.0, -1.0, 1.0, 1.0, -0.5]]))
    window = FrequencyPresencePenalty(0.5, 1.0, last_n=1)(ids, s)  # only the last id counts
    assert_close(window, torch.tensor([[1.0, 1.0, 1.0, 1.0, 1.0, -0.5]]))
    assert_close(FrequencyPresencePenalty(-1.0, 0.0)(ids, s)[0, 2], torch.tensor(3.0))


# -- DRY -------------------------------------------------------------------------------------


def test_dry_penalises_the_token_that_extends_a_repeat():
    dry = DRY(multiplier=1.0, base=2.0, allowed_length=2)
    # "1 2 3" occurred before, followed by 4: the match has length 3 -> 1 × 2^(3 - 2) = 2
    assert dry.penalties([1, 2, 3, 4, 1, 2, 3]) == {4: 2.0}
    out = dry(torch.tensor([[1, 2, 3, 4, 1, 2, 3]]), torch.zeros(1, 6))
    assert_close(out, torch.tensor([[0.0, 0.0, 0.0, 0.0, -2.0, 0.0]]))


def test_dry_allowed_length_and_longest_match():
    ids = [5, 3, 9, 7, 3, 8, 5, 3]
    # 3 occurred at 1 (then 9; match "5 3", length 2) and at 4 (then 8; match "3", length 1)
    assert DRY(1.0, 2.0, allowed_length=2).penalties(ids) == {9: 1.0}
    assert DRY(1.0, 2.0, allowed_length=1).penalties(ids) == {9: 2.0, 8: 1.0}
    assert DRY(1.0, 2.0, allowed_length=3).penalties(ids) == {}


def test_dry_sequence_breakers():
    ids = [1, 2, 3, 4, 1, 2, 3]
    assert DRY(1.0, 2.0, 2, breaker_ids=[3]).penalties(ids) == {}  # the last token breaks
    assert DRY(1.0, 2.0, 2, breaker_ids=[4]).penalties(ids) == {}  # the next token breaks
    # a breaker inside the match stops it: "3" alone (length 1) is below the allowed length
    assert DRY(1.0, 2.0, 2, breaker_ids=[2]).penalties(ids) == {}
    assert DRY(1.0, 2.0, 1, breaker_ids=[2]).penalties(ids) == {4: 1.0}


def test_dry_range_and_cap():
    ids = [1, 2, 3, 4, 1, 2, 3]
    assert DRY(1.0, 2.0, 2, last_n=4).penalties(ids) == {}  # [4, 1, 2, 3]: no earlier 3
    assert DRY(1.0, 2.0, 2, last_n=7).penalties(ids) == {4: 2.0}
    run = [7] * 60  # a match can grow to 59 tokens; the rule caps it at 50
    assert DRY(1.0, 1.1, 2).penalties(run) == {7: pytest.approx(1.1**48)}


def test_dry_note_names_the_tokens():
    dry = DRY(1.0, 2.0, 2)
    before = torch.zeros(1, 6)
    after = dry(torch.tensor([[1, 2, 3, 4, 1, 2, 3]]), before)
    assert dry.note(before, after) == "DRY penalised #4 −2.00"


# -- truncation ------------------------------------------------------------------------------


def test_top_n_sigma_by_hand():
    s = torch.tensor([[0.0, 1.0, 2.0, 3.0, -INF]])
    sigma = math.sqrt((1.5**2 + 0.5**2 + 0.5**2 + 1.5**2) / 4)  # population σ of the live ones
    assert kept(TopNSigma(1.0)(NO_IDS, s)) == [2, 3]  # >= 3 - 1.118
    assert kept(TopNSigma(2.0)(NO_IDS, s)) == [1, 2, 3]  # >= 3 - 2.236
    assert kept(TopNSigma(3.0 / sigma)(NO_IDS, s)) == [0, 1, 2, 3]
    note = TopNSigma(1.0).note(s, s)
    assert_close(note, torch.tensor([[sigma]]))


def test_top_a_by_hand():
    s = logits_of([0.5, 0.3, 0.15, 0.05])
    assert kept(TopA(0.5)(NO_IDS, s)) == [0, 1, 2]  # threshold 0.5 × 0.25 = 0.125
    assert kept(TopA(1.0)(NO_IDS, s)) == [0, 1]  # 0.25
    assert kept(TopA(10.0)(NO_IDS, s)) == [0]  # above p_max: the top token stays


def test_xtc_removes_the_top_choices_but_the_last():
    s = logits_of([0.4, 0.3, 0.2, 0.1])
    assert kept(XTC(0.25, 1.0)(NO_IDS, s)) == [1, 2, 3]  # 0.4 and 0.3 above: keep 0.3
    assert kept(XTC(0.15, 1.0)(NO_IDS, s)) == [2, 3]
    assert kept(XTC(0.35, 1.0)(NO_IDS, s)) == [0, 1, 2, 3]  # one token above: nothing
    assert kept(XTC(0.6, 1.0)(NO_IDS, s)) == [0, 1, 2, 3]
    tie = logits_of([0.3, 0.3, 0.3, 0.1])  # documented: ties with the least one are kept
    assert kept(XTC(0.2, 1.0)(NO_IDS, tie)) == [0, 1, 2, 3]


def test_xtc_fires_with_its_probability_from_the_given_generator():
    s = logits_of([0.4, 0.3, 0.2, 0.1])
    for seed in range(20):
        xtc = XTC(0.25, 0.5)
        xtc.state.generator = torch.Generator().manual_seed(seed)
        draw = torch.rand((1, 1), generator=torch.Generator().manual_seed(seed)).item()
        assert kept(xtc(NO_IDS, s)) == ([1, 2, 3] if draw <= 0.5 else [0, 1, 2, 3])


def test_xtc_note_lists_removed_tokens():
    s = logits_of([0.4, 0.3, 0.2, 0.1])
    xtc = XTC(0.15, 1.0)
    note = xtc.note(s, xtc(NO_IDS, s))
    assert note.tolist() == [[2.0, 0.0, 1.0, -1.0]]
    assert (
        xtc.describe(note[0].tolist(), lambda i: "abcd"[i]) == "XTC removed 2 top tokens: 'a', 'b'"
    )


# -- temperature variants --------------------------------------------------------------------


def test_dynamic_temperature_by_hand():
    probs = [0.5, 0.3, 0.2]
    s = torch.tensor([[math.log(p) for p in probs] + [-INF]])  # 3 tokens still in
    h = -sum(p * math.log(p) for p in probs)
    t = 0.5 + (1.5 - 0.5) * (h / math.log(3)) ** 2.0  # t 1, range 0.5, exponent 2
    out = DynamicTemperature(1.0, 0.5, 2.0)(NO_IDS, s)
    assert_close(out.softmax(-1), (s / t).softmax(-1))
    assert DynamicTemperature(1.0, 0.5).describe([0.73], str) == "dynamic temperature 0.73"
    assert_close(DynamicTemperature(1.0, 0.5, 2.0).note(s, out), torch.tensor([[t]]))


def test_dynamic_temperature_one_token_and_zero():
    one = torch.tensor([[2.0, -INF, -INF]])
    assert_close(DynamicTemperature(1.0, 0.5)(NO_IDS, one), one)
    # entropy 0 (the second token's mass underflows) with t - range <= 0: temperature 0, greedy
    peaked = torch.tensor([[0.0, -200.0, -INF]])
    assert kept(DynamicTemperature(0.3, 0.5)(NO_IDS, peaked)) == [0]


def test_smoothing_by_hand():
    s = torch.tensor([[3.0, 2.0, 0.0, -INF]])
    assert_close(Smoothing(0.5)(NO_IDS, s), torch.tensor([[3.0, 2.5, -1.5, -INF]]))
    # curve 2: k = 0.5, s = 0.5: 3 - 0.25 d² + 0.25 d³
    assert_close(Smoothing(0.5, 2.0)(NO_IDS, s), torch.tensor([[3.0, 2.5, -6.0, -INF]]))


# -- mirostat --------------------------------------------------------------------------------


def test_mirostat_v2_keeps_surprise_up_to_mu():
    s = logits_of([0.5, 0.25, 0.15, 0.1])  # surprises 1, 2, 2.74, 3.32 bits
    m = Mirostat(2, tau=5.0)
    assert kept(m(NO_IDS, s)) == [0, 1, 2, 3]  # mu starts at 2 tau = 10
    m.state.mu = 2.5
    assert kept(m(NO_IDS, s)) == [0, 1]
    m.state.mu = 0.5
    assert kept(m(NO_IDS, s)) == [0]  # at least the top token


def test_mirostat_v1_k_from_the_zipf_estimate():
    probs = [0.5, 0.25, 0.15, 0.1]
    t = [math.log((i + 2) / (i + 1)) for i in range(3)]
    b = [math.log(probs[i] / probs[i + 1]) for i in range(3)]
    s_hat = sum(x * y for x, y in zip(t, b, strict=True)) / sum(x * x for x in t)
    for mu in (0.5, 1.5, 2.0, 3.0):
        eps = s_hat - 1
        k = max(1, int(((eps * 2**mu) / (1 - 4 ** (-eps))) ** (1 / s_hat)))
        m = Mirostat(1)
        m.state.mu = mu
        assert kept(m(NO_IDS, logits_of(probs))) == list(range(min(k, 4))), mu


def test_mirostat_mu_update():
    m = Mirostat(2, tau=5.0, eta=0.1)
    assert m.update_mu(10.0, 0.25) == pytest.approx(10.3)  # surprise 2: mu rises by 0.3
    assert m.update_mu(10.0, 2**-7) == pytest.approx(9.8)


# -- the chain: orders and words -------------------------------------------------------------


def test_preset_orders_hold_every_stage_once():
    for order in (TRANSFORMERS_ORDER, LLAMA_CPP_ORDER):
        assert sorted(order) == sorted(STAGE_NAMES)
    # llama.cpp's default chain, as listed in common/common.h
    llama_cpp = ("dry", "top_n_sigma", "top_k", "typical_p", "top_p", "min_p", "xtc", "temperature")
    assert tuple(n for n in LLAMA_CPP_ORDER if n in llama_cpp) == llama_cpp
    assert LLAMA_CPP_ORDER.index("logit_bias") < LLAMA_CPP_ORDER.index("repetition_penalty")
    # temperature, then mirostat; adaptive-p replaces llama.cpp's final draw, so it ends both
    assert LLAMA_CPP_ORDER[-3:] == ("temperature", "mirostat", "adaptive_p")
    assert TRANSFORMERS_ORDER[-1] == "adaptive_p"
    # transformers' _get_logits_processor, in order
    transformers = (
        "logit_bias", "repetition_penalty", "no_repeat_ngram_size", "banned_strings",
        "min_new_tokens", "suppress_tokens", "temperature", "top_k", "top_p", "min_p",
        "typical_p", "epsilon_cutoff", "eta_cutoff",
    )  # fmt: skip
    assert tuple(n for n in TRANSFORMERS_ORDER if n in transformers) == transformers


def test_user_stage_order_changes_the_result():
    s = logits_of([0.6, 0.25, 0.1, 0.05])
    base = SamplerSettings(temperature=2.0, top_p=0.6)
    user = base.with_(stage_order=("top_p", "temperature"))
    assert stage_order(user)[:2] == ("top_p", "temperature")
    assert [st.label for st in build_chain(user).stages] == ["top-p 0.60", "temperature 2"]
    assert kept(apply_chain(build_chain(base).stages, NO_IDS, s)[0]) == [0, 1]
    assert kept(apply_chain(build_chain(user).stages, NO_IDS, s)[0]) == [0]
    with pytest.raises(ValueError):
        SamplerSettings(stage_order=("top_p", "top_p"))
    with pytest.raises(ValueError):
        SamplerSettings(stage_order=("nonsense",))


def test_words_become_token_sequences():
    tok = ByT5Tokenizer()  # bytes + 3: "a" is 100, " " is 35
    chain = build_chain(
        SamplerSettings(logit_bias=(("a", 5.0), ("#7", -2.0)), banned_strings=("b",)),
        tokenizer=tok,
    )
    bias, banned = chain.stages
    assert bias.sequence_bias == {(100,): 5.0, (35, 100): 5.0, (7,): -2.0}
    assert banned.sequence_bias == {(101,): -INF, (35, 101): -INF}
    out = bias(torch.tensor([[35]]), torch.zeros(1, 384))
    assert out[0, 100] == 10.0  # alone and after a space
    with pytest.raises(ValueError, match="tokenizer"):
        build_chain(SamplerSettings(banned_strings=("b",)))


def test_settings_round_trip_through_json_lists():
    s = SamplerSettings(
        logit_bias=(("a", 1.5),), banned_strings=("x",), suppress_tokens=(3,),
        stage_order=("xtc",), dry_sequence_breakers=("\n",),
    )  # fmt: skip
    import json

    back = SamplerSettings.from_dict(json.loads(json.dumps(s.to_dict())))
    assert back == s


@pytest.mark.parametrize(
    "field, make, bad",
    [
        ("frequency_penalty", lambda v: FrequencyPresencePenalty(v, 0.0), float("nan")),
        ("penalty_last_n", lambda v: FrequencyPresencePenalty(0.5, 0.0, v), -1),
        ("dry_multiplier", lambda v: DRY(v), -0.1),
        ("dry_base", lambda v: DRY(1.0, v), 0.5),
        ("dry_allowed_length", lambda v: DRY(1.0, 1.75, v), 0),
        ("top_n_sigma", TopNSigma, -1.0),
        ("top_a", TopA, -0.5),
        ("xtc_threshold", lambda v: XTC(v, 0.5), 1.5),
        ("xtc_probability", lambda v: XTC(0.1, v), -0.1),
        ("dynatemp_range", lambda v: DynamicTemperature(1.0, v), -1.0),
        ("dynatemp_exponent", lambda v: DynamicTemperature(1.0, 0.5, v), 0.0),
        ("smoothing_factor", Smoothing, -1.0),
        ("smoothing_curve", lambda v: Smoothing(1.0, v), 4.0),
        ("mirostat_tau", lambda v: Mirostat(2, v), -1.0),
        ("mirostat_eta", lambda v: Mirostat(2, 5.0, v), float("inf")),
    ],
)
def test_new_stages_and_settings_refuse_the_same_values(field, make, bad):
    with pytest.raises(ValueError) as from_stage:
        make(bad)
    with pytest.raises(ValueError) as from_settings:
        SamplerSettings(**{field: bad})
    assert str(from_settings.value) == str(from_stage.value)
    assert field in str(from_settings.value)


def test_bias_refuses_nan_and_plus_infinity():
    from engine.sampling.penalties import SequenceBias

    for bad in (float("nan"), float("inf")):
        with pytest.raises(ValueError):
            SequenceBias({(3,): bad})
        with pytest.raises(ValueError):
            SamplerSettings(logit_bias=(("a", bad),))
    SamplerSettings(logit_bias=(("a", -INF),))  # -inf bans, and is fine
