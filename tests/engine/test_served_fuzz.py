"""A hypothesis fuzz of ONE served step through the shared check (engine.validate.served_step),
in each backend's reply shape (vLLM, llama-server raw and post-sampling, Ollama, SGLang), read
by the backend's own client exactly as a run reads it (issue 56). Ids are drawn from a few so
they repeat, probabilities from masses that often add past 1, values are sometimes NaN, infinite,
positive or not numbers. Every accepted step must be a distribution's top-N; every refused one
is a ``RemoteError`` naming the server and saying what was wrong; no other exception escapes.
Each suite runs at least 300 cases and sees both outcomes."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from served_fakes import STEP_KINDS, step_client, step_reply

from engine.serve.remote import BAD_RESPONSE, RemoteError

VOCAB = 1000
TOLERANCE = 1e-3
FUZZ = settings(
    max_examples=320, deadline=None, derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)  # fmt: skip

ids = st.one_of(st.integers(0, 12), st.integers(0, 12), st.integers(13, 299),
                st.sampled_from([VOCAB, VOCAB + 5, -1]))  # fmt: skip
probs = st.one_of(
    st.floats(0.0, 1.0), st.floats(0.0, 0.2), st.sampled_from([0.0, 1.0, 0.3, 0.05, 0.99]),
)  # fmt: skip
oddities = st.sampled_from([math.nan, math.inf, -math.inf, 0.7, 3.0, "0.1", None, True])


@st.composite
def steps(draw, post: bool = False):
    """(chosen id, its value, [(id, value)]): values are log-probabilities (probabilities for
    llama-server's post-sampling view), now and then replaced by something odd."""

    def value():
        if draw(st.integers(0, 15)) == 0:
            return draw(oddities)
        p = draw(probs)
        if post:
            return p
        return math.log(p) if p > 0 else draw(st.sampled_from([None, -9999.0, -3.4e38]))

    top = [(draw(ids), value()) for _ in range(draw(st.integers(0, 6)))]
    if top and draw(st.booleans()):  # the chosen token is often one of the listed
        chosen, listed = top[draw(st.integers(0, len(top) - 1))]
        return chosen, listed if draw(st.integers(0, 3)) else value(), top
    return draw(ids), value(), top


def _p(lp: float) -> float:
    return math.exp(lp)


def assert_a_distribution(token, vocab: int) -> None:
    """What every accepted served step is: ids unique and in the vocabulary, probabilities
    finite in [0, 1], the listed mass (with an unlisted chosen token) at most 1, the chosen
    token's probability its own entry's (or no more than the least listed), above 0."""
    listed = [(t.token_id, t.logprob) for t in token.top]
    keys = [i for i, _lp in listed]
    assert len(keys) == len(set(keys))
    assert all(0 <= i < vocab for i in [token.token_id, *keys])
    for lp in [token.logprob, *(lp for _i, lp in listed)]:
        assert isinstance(lp, float) and not math.isnan(lp) and lp <= 0.0
    values = dict(listed)
    mass = math.fsum(_p(lp) for lp in values.values())
    if token.token_id in values:
        assert abs(_p(values[token.token_id]) - _p(token.logprob)) <= TOLERANCE
    else:
        mass += _p(token.logprob)
        if listed:
            assert _p(token.logprob) <= min(_p(lp) for lp in values.values()) + TOLERANCE
    assert mass <= 1 + TOLERANCE
    assert _p(token.logprob) > 0
    assert [lp for _i, lp in listed] == sorted((lp for _i, lp in listed), reverse=True)


def _read(client, kind: str, data, post: bool):
    if kind == "llama-server":
        return client._served(data, post=post)
    if kind == "sglang":
        return client._answer(data)
    return client._served(data)


@pytest.mark.parametrize("kind,post", [(k, False) for k in STEP_KINDS] + [("llama-server", True)])
def test_fuzz_one_served_step_through_the_shared_check(kind, post):
    client = step_client(kind, vocab=VOCAB)
    outcomes = {"accepted": 0, "refused": 0}

    @FUZZ
    @given(steps(post))
    def case(step):
        chosen, value, top = step
        data = step_reply(kind, chosen, value, top, post=post)
        try:
            got = _read(client, kind, data, post)
        except RemoteError as exc:
            outcomes["refused"] += 1
            assert exc.kind == BAD_RESPONSE and str(exc)
            assert client.base_url in str(exc) or "Ollama" in str(exc)
            return
        outcomes["accepted"] += 1
        assert len(got) == 1
        assert_a_distribution(got[0], VOCAB)

    case()
    assert sum(outcomes.values()) >= 300
    assert outcomes["accepted"] >= 20 and outcomes["refused"] >= 20, outcomes
