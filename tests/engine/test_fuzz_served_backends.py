"""Hostile-input fuzzing of the three new reply parsers (llama-server, Ollama, SGLang), as
test_fuzz_hostile.py does for vLLM's: near-valid replies with numbers, ids and shapes broken
at random. Each may only answer checked positions or its own ``InputError`` with a message:
no other exception. Each suite runs at least 200 cases and checks that it did."""

from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.validate import InputError, served_llama, served_ollama, served_sglang
from engine.validate.limits import MAX_SERVED_TOKEN_ID

FUZZ = settings(
    max_examples=300, deadline=None, derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)  # fmt: skip
numbers = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True), st.floats(-30, 0), st.floats(0, 1),
    st.none(), st.text(max_size=4), st.integers(-5, 5), st.booleans(),
)  # fmt: skip
ids = st.one_of(st.integers(0, 500), st.integers(-(10**13), 10**13), st.text(max_size=3),
                st.booleans(), st.none())  # fmt: skip
junk = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=8)),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=12,
)  # fmt: skip


def _ok_logprob(lp: float | None) -> bool:
    return lp is None or lp == -math.inf or (math.isfinite(lp) and lp <= 0)


def _run(parse, check_out, data) -> None:
    try:
        out = parse(data)
    except InputError as exc:
        assert str(exc)
    else:
        check_out(out)


@st.composite
def llama_replies(draw):
    def cand():
        return {
            "id": draw(ids),
            "token": draw(st.text(max_size=4)),
            draw(st.sampled_from(["logprob", "prob"])): draw(numbers),
        }

    rows = [
        {
            **cand(),
            draw(st.sampled_from(["top_logprobs", "top_probs"])): [
                cand() for _ in range(draw(st.integers(0, 4)))
            ],
        }
        for _ in range(draw(st.integers(0, 3)))
    ]
    reply = {
        "completion_probabilities": rows,
        "stop": draw(st.booleans()),
        "stop_type": draw(st.sampled_from(["eos", "limit", "word", "none", 5])),
    }
    if draw(st.booleans()):
        reply[draw(st.sampled_from(list(reply)))] = draw(junk)
    return reply  # fmt: skip


def test_fuzz_llama_server_replies():
    ran = []

    @FUZZ
    @given(llama_replies(), st.booleans())
    def case(data, post):
        ran.append(1)

        def valid(rows):
            for p in rows:
                assert 0 <= p.token_id < MAX_SERVED_TOKEN_ID
                values = [p.value, *(v for _i, v in p.top)]
                assert all(0 <= v <= 1 for v in values) if post else all(map(_ok_logprob, values))

        _run(lambda d: served_llama.positions(d, post), valid, data)

    case()
    assert len(ran) >= 200


@st.composite
def ollama_replies(draw):
    def entry():
        return {
            "token": draw(st.text(max_size=4)),
            "logprob": draw(numbers),
            "bytes": draw(st.one_of(st.none(), st.lists(st.integers(-3, 300), max_size=4))),
        }

    rows = [
        {**entry(), "top_logprobs": [entry() for _ in range(draw(st.integers(0, 22)))]}
        for _ in range(draw(st.integers(0, 3)))
    ]
    reply = {
        "response": draw(st.text(max_size=4)),
        "done": draw(st.booleans()),
        "done_reason": draw(st.sampled_from(["stop", "length", None])),
        "logprobs": rows,
    }
    if draw(st.booleans()):
        reply[draw(st.sampled_from(list(reply)))] = draw(junk)
    return reply  # fmt: skip


def test_fuzz_ollama_replies():
    ran = []

    @FUZZ
    @given(ollama_replies())
    def case(data):
        ran.append(1)

        def valid(rows):
            for p in rows:
                assert _ok_logprob(p.logprob) and all(_ok_logprob(lp) for _t, lp in p.top)
                assert len(p.top) <= served_ollama.MAX_OLLAMA_TOP

        _run(served_ollama.positions, valid, data)

    case()
    assert len(ran) >= 200


@st.composite
def sglang_replies(draw):
    def triple():
        return [draw(numbers), draw(ids), draw(st.one_of(st.none(), st.text(max_size=3)))]

    n = draw(st.integers(0, 3))
    meta = {
        "output_token_logprobs": [triple() for _ in range(n)],
        "output_top_logprobs": [
            [triple() for _ in range(draw(st.integers(0, 3)))] if draw(st.booleans()) else None
            for _ in range(draw(st.integers(n, n + 1)))
        ],
        "finish_reason": draw(st.sampled_from([None, {"type": "length"}, {"type": "abort"}])),
    }
    if draw(st.booleans()):
        meta[draw(st.sampled_from(list(meta)))] = draw(junk)
    return {"meta_info": meta} if draw(st.integers(0, 9)) else draw(junk)  # fmt: skip


def test_fuzz_sglang_replies():
    ran = []

    @FUZZ
    @given(sglang_replies())
    def case(data):
        ran.append(1)

        def valid(rows):
            for p in rows:
                assert 0 <= p.token_id < MAX_SERVED_TOKEN_ID and _ok_logprob(p.logprob)
                assert all(_ok_logprob(lp) and 0 <= t < MAX_SERVED_TOKEN_ID for t, lp, _w in p.top)

        _run(served_sglang.output_positions, valid, data)
        _run(served_sglang.finish_reason, lambda r: None, data)

    case()
    assert len(ran) >= 200
