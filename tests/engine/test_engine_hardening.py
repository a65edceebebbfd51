"""Bad input and broken models: clear errors, never NaN distributions."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from engine import GenerationSession, NonFiniteLogitsError, SamplerSettings
from engine.decode.speculative import NGramDrafter, SpeculativeSession
from engine.sampling.build import build_chain
from engine.sampling.settings import ORDERS
from tiny_models import tiny_llama

PROMPT = [5, 17, 33, 90, 41, 7]


def break_after(model, calls: int, value: float):
    """Make the output layer return `value` everywhere from the `calls`-th forward pass on."""
    count = {"n": 0}

    def hook(_module, _inputs, output):
        count["n"] += 1
        return output * value if count["n"] > calls else output

    return model.get_output_embeddings().register_forward_hook(hook)


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_nan_or_inf_logits_stop_naming_the_step(value):
    model = tiny_llama()
    break_after(model, 3, value)
    session = GenerationSession(
        model, PROMPT, SamplerSettings(temperature=1.0, max_new_tokens=10), eos_token_ids=[]
    )
    with pytest.raises(NonFiniteLogitsError, match="step 4"):
        list(session.stream())
    assert len(session.history) == 3  # the good steps are kept


def test_nan_logits_in_speculative_decoding():
    model = tiny_llama()
    break_after(model, 2, float("nan"))
    spec = SpeculativeSession(
        model, PROMPT * 2, NGramDrafter(), SamplerSettings(temperature=0), eos_token_ids=[]
    )
    with pytest.raises(NonFiniteLogitsError):
        spec.run(20)


def test_prompt_longer_than_the_context_is_refused_with_sizes():
    model = tiny_llama()  # 256 positions
    with pytest.raises(ValueError, match="300 tokens but the model's context holds 256"):
        GenerationSession(model, [5] * 300, SamplerSettings())


@pytest.mark.parametrize("max_new", [0, 1, 10**6])
def test_max_new_tokens_extremes(max_new):
    model = tiny_llama()
    session = GenerationSession(
        model, PROMPT, SamplerSettings(temperature=0, max_new_tokens=max_new), eos_token_ids=[]
    )
    steps = list(session.stream())
    expected = min(max_new, 256 - len(PROMPT))
    assert len(steps) == expected
    if max_new == 10**6:
        assert session.stop_reason == "context"


slider_settings = st.builds(
    SamplerSettings,
    temperature=st.one_of(st.just(0.0), st.floats(1e-6, 2.5), st.just(100.0)),
    top_k=st.one_of(st.just(0), st.integers(1, 300)),
    top_p=st.one_of(st.just(0.0), st.just(1.0), st.floats(0.0, 1.0)),
    min_p=st.one_of(st.just(0.0), st.just(1.0), st.floats(0.0, 1.0)),
    typical_p=st.one_of(st.just(1.0), st.floats(0.01, 1.0)),
    repetition_penalty=st.floats(1.0, 2.0),
    no_repeat_ngram_size=st.integers(0, 3),
    order=st.sampled_from(ORDERS),
)
logit_rows = st.integers(2, 60).flatmap(
    lambda v: st.lists(
        st.one_of(st.floats(-1e4, 1e4), st.floats(-30, 30), st.just(0.0)), min_size=v, max_size=v
    )
)


@settings(max_examples=400, deadline=None)
@given(s=slider_settings, row=logit_rows, history=st.lists(st.integers(0, 59), max_size=8))
def test_every_reachable_setting_gives_a_proper_distribution(s, row, history):
    logits = torch.tensor([row], dtype=torch.float32)
    ids = torch.tensor([[i % len(row) for i in history]], dtype=torch.long)
    before = logits.clone()
    probs = build_chain(s).probs(ids, logits)[0]
    assert torch.isfinite(probs).all()
    assert (probs >= 0).all()
    assert math.isclose(float(probs.sum()), 1.0, abs_tol=1e-4)
    assert int((probs > 0).sum()) >= 1
    assert torch.equal(logits, before)
    if s.temperature == 0:
        assert int((probs > 0).sum()) == 1


@settings(max_examples=60, deadline=None)
@given(s=slider_settings)
def test_every_reachable_setting_runs_a_real_model(s):
    model = tiny_llama()
    session = GenerationSession(model, PROMPT, s.with_(max_new_tokens=3), eos_token_ids=[])
    steps = list(session.stream())
    assert len(steps) == 3
    for step in steps:
        assert 0 < step.prob <= 1 and step.survivors >= 1 and math.isfinite(step.entropy)
