"""Hostile-input fuzzing (issue 24, "Must show"): the lesson parser and the served-response
parser, fed hypothesis-generated input. Each may only answer with a result or its own error
type carrying a message: no other exception, no hang. Each suite runs at least 200 cases and
checks that it did."""

from __future__ import annotations

import json
import math

import httpx
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.classroom.lessons import Lesson, LessonError, parse_lesson
from engine.serve.remote import RemoteClient, RemoteError
from engine.validate import InputError
from engine.validate import served as check
from engine.validate.limits import LOGPROB_TOLERANCE, MAX_SERVED_TOKEN_ID

CASES = 300
FUZZ = settings(
    max_examples=CASES, deadline=None, derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)  # fmt: skip

GOOD_LESSON = """title: A lesson
model: smollm2-135m
stages:
  - title: First
    text: Some words.
    prompt: Hello
    settings:
      temperature: 0.5
      top_k: 10
    options:
      num_beams: 4
  - title: Second
    text: More words.
    method: beam
"""

WORDS = [
    "title", "model", "stages", "text", "prompt", "settings", "options", "method", "focus",
    "temperature", "top_k", "top_p", "num_beams", "gamma", "top_n", "limit", "max_new_tokens",
    "guess", "action", "draft_model", "smollm2-135m", "beam", "step", "&a", "*a",
    "!!python/name:os.system",
    "[", "]", "{", "}", ": ", "- ", "\n", "  ", "'", '"', "#", "<<: *a", "1e12", ".nan", "-.inf",
]  # fmt: skip

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(10**15), 10**15),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=30), st.sampled_from(WORDS),
)  # fmt: skip
yaml_values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(st.sampled_from(WORDS), st.text(max_size=8)), inner, max_size=4),
    ),
    max_leaves=25,
)


def _mutate(base: str, cuts: list[tuple[int, str]]) -> str:
    text = base
    for where, piece in cuts:
        i = where % (len(text) + 1)
        text = text[:i] + piece + text[i:]
    return text


def _nested(depth: int, shape: str) -> str:
    opening, closing = {"[": ("[", "]"), "{": ("{a: ", "}")}[shape]
    return "title: " + opening * depth + "x" + closing * depth + "\nmodel: smollm2-135m\n"


def _aliases(levels: int, width: int) -> str:
    items = ["&a0 [" + ", ".join(["lol"] * width) + "]"]
    items += [f"&a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]" for i in range(1, levels)]
    return "title: [" + ", ".join(items) + "]\nmodel: smollm2-135m\nstages: []\n"


lesson_texts = st.one_of(
    st.text(max_size=400),
    st.builds(_nested, st.integers(1, 3000), st.sampled_from(["[", "{"])),
    st.builds(_aliases, st.integers(1, 12), st.integers(1, 12)),
    st.lists(st.sampled_from(WORDS), max_size=60).map("".join),
    yaml_values.map(lambda v: yaml.safe_dump(v, allow_unicode=True)),
    st.lists(st.tuples(st.integers(0, 400), st.sampled_from(WORDS)), max_size=8).map(
        lambda cuts: _mutate(GOOD_LESSON, cuts)
    ),
    st.fixed_dictionaries({
        "title": yaml_values, "model": st.sampled_from(["smollm2-135m", "tiny-t5", "x"]),
        "stages": st.lists(st.dictionaries(st.sampled_from(WORDS), yaml_values, max_size=6),
                           max_size=3),
    }).map(lambda d: yaml.safe_dump(d, allow_unicode=True)),
)  # fmt: skip


@pytest.mark.timeout(600)
def test_fuzz_the_lesson_parser():
    ran = []

    @FUZZ
    @given(lesson_texts)
    def case(text):
        ran.append(1)
        try:
            lesson = parse_lesson(text, "fuzz.yaml")
        except LessonError as exc:
            assert str(exc).startswith("fuzz.yaml") and len(str(exc)) < 1000
            return
        assert isinstance(lesson, Lesson) and lesson.stages

    case()
    assert len(ran) >= 200


# -- the served-response parser ---------------------------------------------------------------

KEYS = ["choices", "logprobs", "tokens", "token_logprobs", "top_logprobs", "finish_reason",
        "data", "id", "error", "message", "text"]  # fmt: skip
ids = st.one_of(
    st.integers(0, 70_000), st.integers(-(10**13), 10**13), st.just(MAX_SERVED_TOKEN_ID)
).map(lambda i: f"token_id:{i}")
tokens = st.one_of(ids, st.text(max_size=12), st.sampled_from(["token_id:", "token_id:1e5"]))
logprobs = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True), st.floats(-30, 0), st.none(),
    st.text(max_size=5), st.integers(-5, 5),
)  # fmt: skip
json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(10**20), 10**20), st.floats(),
              st.text(max_size=12), tokens),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.sampled_from(KEYS), inner, max_size=4)
    ),
    max_leaves=20,
)  # fmt: skip


@st.composite
def completions(draw):
    n = draw(st.integers(0, 4))
    block = {
        "tokens": draw(st.lists(tokens, min_size=n, max_size=n)),
        "token_logprobs": draw(st.lists(logprobs, min_size=n, max_size=n + 1)),
        "top_logprobs": draw(st.one_of(
            st.none(), st.lists(st.one_of(st.none(), st.dictionaries(tokens, logprobs, max_size=5)),
                                min_size=n, max_size=n),
        )),
    }  # fmt: skip
    for key in draw(st.lists(st.sampled_from(list(block)), max_size=2)):
        block[key] = draw(json_values)  # a wrong shape where a list belongs
    choice = {"logprobs": block, "finish_reason": draw(st.one_of(st.none(), st.text(max_size=8)))}
    return {"choices": draw(st.sampled_from([[choice], [choice, choice], choice, []]))}


replies = st.one_of(completions(), json_values)


def _valid(served) -> bool:
    everything = [(served.token_id, served.logprob), *((t.token_id, t.logprob) for t in served.top)]
    return all(
        0 <= i < MAX_SERVED_TOKEN_ID and (lp == -math.inf or (math.isfinite(lp) and lp <= 0))
        for i, lp in everything
    )


@pytest.mark.timeout(600)
def test_fuzz_the_served_response_parser():
    ran = []

    @FUZZ
    @given(replies)
    def case(data):
        ran.append(1)
        try:
            rows = check.positions(data)
        except InputError as exc:
            assert str(exc)
        else:
            for p in rows:
                assert 0 <= p.token_id < MAX_SERVED_TOKEN_ID
                assert p.logprob <= 0 and not math.isnan(p.logprob)
        body = json.dumps(data)  # NaN and Infinity go out as a careless server writes them

        def handle(request):
            if request.url.path.endswith("/models"):
                return httpx.Response(200, json={"data": [{"id": "m"}]})
            return httpx.Response(200, text=body)

        client = RemoteClient("http://fuzz:1", "m", transport=httpx.MockTransport(handle))
        try:
            served = client.next_token([1, 2, 3], 5)
        except RemoteError as exc:
            assert str(exc)
        else:
            assert _valid(served)
        finally:
            client.close()

    case()
    assert len(ran) >= 200
    assert LOGPROB_TOLERANCE < 1e-2
