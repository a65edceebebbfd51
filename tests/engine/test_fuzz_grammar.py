"""Issue 35, "Must show": a hypothesis fuzz of the grammar stage. Random grammars (JSON schemas
nested with objects, arrays, enums, oneOf and anyOf, self-references; regular expressions with
huge counts; choices; Lark grammars, some with no finite sentence), random settings around them
(min-new-tokens, greedy or sampled), a tiny model. Every grammar either constrains or stops
with a message:

* refused when it is built: a ValueError of one line naming the grammar kind;
* or the run ends at the end token: llguidance's own matcher (the reference) takes every
  token, the text parses (JSON, with no key twice in an object) or matches (Python's ``re``)
  or is one of the choices;
* or the budget ran out: every token taken is one the matcher allows, and the output is
  marked incomplete exactly when the matcher does not accept it yet;
* or the grammar stopped the run: a one-line reason, and every token before the stop is one
  the matcher allows.

Never an output the grammar forbids, never an exception. At least 300 cases, checked."""

from __future__ import annotations

import json
import random
import re

import llguidance
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import GenerationSession, SamplerSettings
from engine.records import GRAMMAR_STOP, Step
from engine.sampling.grammar import compile_grammar, ll_tokenizer
from tiny_models import VOCAB, tiny_fast_tokenizer, tiny_llama

pytestmark = pytest.mark.slow
CASES = 300
FUZZ = settings(
    max_examples=CASES, deadline=None, derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)  # fmt: skip
EOS = 1
KEYS = ["a", "b", "type", "name", "x y", "\u00e9"]
ATOMS = ["a", "b", "[a-c]", "[0-9]", "(ab|c)", "x", " ", "[a-z]"]


def schema(rnd: random.Random, depth: int = 0) -> dict:
    """A random JSON schema (the constructs a schema bench holds, and hostile ones)."""
    kinds = ["string", "integer", "boolean", "enum", "const", "null", "number"]
    if depth < 3:
        kinds += ["object", "object", "array", "oneOf", "anyOf", "ref"]
    kind = rnd.choice(kinds)
    if kind in ("string", "integer", "boolean", "null", "number"):
        out: dict = {"type": kind}
        if kind == "string" and rnd.random() < 0.5:
            out["maxLength"] = rnd.randint(0, 8)
        if kind == "integer" and rnd.random() < 0.5:
            out["minimum"], out["maximum"] = sorted(rnd.sample(range(-50, 50), 2))
        return out
    if kind == "enum":
        return {"enum": rnd.sample(["red", "green", 1, 2.5, True, None, "a b"], rnd.randint(1, 4))}
    if kind == "const":
        return {"const": rnd.choice(["x", 7, False, None])}
    if kind == "ref":
        return {"$ref": "#"}
    if kind == "array":
        out = {"type": "array", "items": schema(rnd, depth + 1)}
        if rnd.random() < 0.5:
            out["minItems"] = rnd.randint(0, 2)
            out["maxItems"] = out["minItems"] + rnd.randint(0, 2)
        return out
    if kind in ("oneOf", "anyOf"):
        return {kind: [schema(rnd, depth + 1) for _ in range(rnd.randint(1, 3))]}
    names = rnd.sample(KEYS, rnd.randint(0, 3))
    out = {"type": "object", "properties": {k: schema(rnd, depth + 1) for k in names}}
    out["required"] = [k for k in names if rnd.random() < 0.5]
    extra = rnd.choice([None, False, True, {"type": "integer"}])
    if extra is not None:
        out["additionalProperties"] = extra
    return out


def regex(rnd: random.Random) -> str:
    parts = []
    for _ in range(rnd.randint(1, 4)):
        quant = rnd.choice(["", "", "*", "+", "?", "{2,4}", "{3}", "{1000}", "{0,30}"])
        parts.append(rnd.choice(ATOMS) + quant)
    return "".join(parts)


def lark(rnd: random.Random) -> str:
    return rnd.choice([
        'start: "a" start',  # no finite sentence
        'start: "yes" | "no"',
        "start: item (\",\" item)*\nitem: /[a-c]+/",
        'start: "(" start ")" | "x"',
        "start: /[0-9]{2,3}/ \" \" /[a-z]+/",
        "start: undefined_rule",  # refused
        "start: ",  # refused
    ])  # fmt: skip


def spec(rnd: random.Random) -> str:
    kind = rnd.choice(["json", "json", "json", "regex", "choice", "lark"])
    if kind == "json":
        return "json:" + json.dumps(schema(rnd))
    if kind == "regex":
        return "regex:" + regex(rnd)
    if kind == "choice":
        words = ["yes", "no", "maybe", "a|b", "", "\u00e9t\u00e9", "  "]
        return "choice:" + "|".join(rnd.sample(words, rnd.randint(1, 4)))
    return "lark:" + lark(rnd)


@pytest.fixture(scope="module")
def tok():
    return tiny_fast_tokenizer()


@pytest.fixture(scope="module")
def models():
    return [tiny_llama(seed) for seed in range(3)]


def reference(tok, grammar: str):
    return llguidance.LLMatcher(ll_tokenizer(tok, VOCAB, (EOS,)), compile_grammar(grammar),
                                log_level=0)  # fmt: skip


def consumed(matcher, ids) -> int:
    """How many of ``ids`` the matcher takes, one by one (the end token too, once complete)."""
    for i, token in enumerate(ids):
        if not matcher.consume_token(token):
            return i
    return len(ids)


def unique_keys(pairs):
    keys = [k for k, _ in pairs]
    assert len(keys) == len(set(keys)), keys  # no key twice in one object
    return dict(pairs)


def finished_text_fits(grammar: str, text: str) -> None:
    """An independent check of a finished output: Python's own parsers."""
    kind, _, body = grammar.partition(":")
    if kind == "json":
        json.loads(text, object_pairs_hook=unique_keys)
    elif kind == "regex":
        assert re.fullmatch(body, text), (body, text)
    elif kind == "choice":
        assert text in body.split("|")


def test_every_grammar_constrains_or_stops_with_a_message(tok, models):
    seen = {"refused": 0, "eos": 0, "max_new_tokens": 0, GRAMMAR_STOP: 0}

    @FUZZ
    @given(st.integers(0, 2**32 - 1))
    def one(seed: int) -> None:
        rnd = random.Random(seed)
        grammar = spec(rnd)
        prompt = tok("Answer:", add_special_tokens=False)["input_ids"]
        try:
            settings = SamplerSettings(
                grammar=grammar, temperature=rnd.choice([0.0, 1.0]), seed=rnd.randint(0, 99),
                min_new_tokens=rnd.choice([0, 0, 3]), max_new_tokens=rnd.randint(1, 14),
            )  # fmt: skip
            session = GenerationSession(
                rnd.choice(models), prompt, settings, tokenizer=tok, eos_token_ids=(EOS,),
                top_n=3,
            )  # fmt: skip
        except ValueError as exc:  # refused when built: the grammar's own words
            assert str(exc) and "\n" not in str(exc) and str(exc).startswith("grammar")
            seen["refused"] += 1
            return
        steps = [r for r in session.stream() if isinstance(r, Step)]
        summary, ids = session.summary(), session.generated_ids
        matcher = reference(tok, grammar)
        taken = consumed(matcher, ids)
        seen[summary.stop_reason] += 1
        assert len(steps) == len(ids)
        if summary.stop_reason == GRAMMAR_STOP:
            assert summary.note and "\n" not in summary.note and "grammar" in summary.note
            assert taken >= len(ids) - 1  # only a token that broke the matcher is not taken
            return
        assert taken == len(ids), (grammar, tok.decode(ids))
        if summary.stop_reason == "eos":
            assert not summary.incomplete
            finished_text_fits(grammar, tok.decode(ids[:-1]))
        else:
            assert summary.stop_reason == "max_new_tokens"
            assert summary.incomplete == (not matcher.is_accepting())

    one()
    assert sum(seen.values()) >= CASES
    assert all(seen[k] >= 10 for k in seen), seen  # every way out was exercised
