"""The grammar stage: what it cuts is exactly llguidance's own mask, cut tokens are named
"grammar" in the step records, and every JSON output it constrains parses and validates
against its schema (20 prompts, SmolLM2's tokenizer on a tiny random model so it stays fast;
a random model tests the grammar harder than a trained one: it never heads for the closing
brace by itself)."""

import json

import llguidance
import pytest
import torch

from engine import GenerationSession, SamplerSettings
from engine.models.catalog import load_bundled
from engine.sampling.build import build_chain
from engine.sampling.grammar import compile_grammar, ll_tokenizer, unpack_bitmask
from tiny_models import tiny_llama

pytestmark = pytest.mark.slow

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 20},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}
WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 16},
        "sky": {"enum": ["sunny", "cloudy", "rainy"]},
        "celsius": {"type": "integer", "minimum": -50, "maximum": 60},
    },
    "required": ["city", "sky", "celsius"],
    "additionalProperties": False,
}
LIST = {
    "type": "object",
    "properties": {
        "colours": {
            "type": "array",
            "items": {"type": "string", "maxLength": 12},
            "minItems": 1,
            "maxItems": 3,
        },
        "ok": {"type": "boolean"},
    },
    "required": ["colours", "ok"],
    "additionalProperties": False,
}
PROMPTS = [
    (PERSON, "Give a person's name and age as JSON."),
    (PERSON, "Describe your favourite author as JSON with name and age."),
    (PERSON, "A child called Tom, aged 7, as JSON."),
    (PERSON, "Invent a pirate captain. Answer in JSON."),
    (PERSON, "Who is the oldest person you know of? JSON please."),
    (PERSON, "A scientist's name and age, JSON."),
    (PERSON, "Write a JSON record for a teacher."),
    (WEATHER, "What is the weather in Paris? Answer as JSON."),
    (WEATHER, "Weather report for London in JSON."),
    (WEATHER, "Give me the weather in Tokyo as JSON."),
    (WEATHER, "JSON weather for a desert town."),
    (WEATHER, "A rainy day in Oslo, as JSON."),
    (WEATHER, "Tell me tomorrow's weather in Rome in JSON."),
    (WEATHER, "Summer weather in Madrid as JSON."),
    (LIST, "List the colours of the rainbow you like as JSON."),
    (LIST, "Colours of a sunset, JSON please."),
    (LIST, "Name up to three colours of a forest in JSON."),
    (LIST, "Which colours are on a flag? JSON."),
    (LIST, "Colours of the sea as JSON."),
    (LIST, "Pick two colours for a room, in JSON."),
]


def conforms(value, schema) -> bool:
    """A small JSON-schema check for the keywords the schemas above use."""
    if "enum" in schema:
        return value in schema["enum"]
    kind = schema["type"]
    if kind == "object":
        props = schema["properties"]
        return (
            isinstance(value, dict)
            and all(k in value for k in schema.get("required", ()))
            and (schema.get("additionalProperties", True) or set(value) <= set(props))
            and all(conforms(v, props[k]) for k, v in value.items() if k in props)
        )
    if kind == "array":
        return (
            isinstance(value, list)
            and schema.get("minItems", 0) <= len(value) <= schema.get("maxItems", 10**9)
            and all(conforms(v, schema["items"]) for v in value)
        )
    if kind == "string":
        return isinstance(value, str) and len(value) <= schema.get("maxLength", 10**9)
    if kind == "boolean":
        return isinstance(value, bool)
    ok = {"integer": int, "number": (int, float)}[kind]
    return (
        isinstance(value, ok)
        and not isinstance(value, bool)
        and schema.get("minimum", -(10**9)) <= value <= schema.get("maximum", 10**9)
    )


@pytest.fixture(scope="module")
def smol():
    return load_bundled("smollm2-135m", device="cpu")


def test_the_cut_is_the_librarys_mask(smol):
    spec = "json:" + json.dumps(WEATHER)
    settings = SamplerSettings(grammar=spec, temperature=1.0)
    vocab = smol.model.get_output_embeddings().weight.shape[0]
    reference = llguidance.LLMatcher(
        ll_tokenizer(smol.tokenizer, vocab, smol.eos_token_ids), compile_grammar(spec)
    )
    prompt = [1, 2, 3]
    chain = build_chain(settings, len(prompt), smol.eos_token_ids, tokenizer=smol.tokenizer)
    assert chain.labels == ("grammar",)
    generator = torch.Generator().manual_seed(0)
    ids = list(prompt)
    for _ in range(25):
        scores = torch.randn(1, vocab, generator=generator)
        probs, cut = chain.probs(torch.tensor([ids]), scores)
        allowed = unpack_bitmask(reference.compute_bitmask(), vocab)
        assert torch.equal(cut[0] == 0, ~allowed)  # stage 0 cut exactly what the library bans
        assert torch.equal(probs[0] > 0, allowed)
        token = int(torch.multinomial(probs[0], 1, generator=generator))
        assert reference.consume_token(token)
        ids.append(token)
        if reference.is_stopped():
            break
    # A rewind: the stage rolls back with the ids it is shown.
    consumed = len(ids) - len(prompt)
    assert consumed > 4
    ids = ids[: len(prompt) + 2]
    assert reference.rollback(consumed - 2)
    _probs, cut = chain.probs(torch.tensor([ids]), torch.randn(1, vocab, generator=generator))
    assert torch.equal(cut[0] == 0, ~unpack_bitmask(reference.compute_bitmask(), vocab))


def test_twenty_json_outputs_parse_and_validate(smol):
    model = tiny_llama(seed=0, vocab=smol.model.get_output_embeddings().weight.shape[0])
    valid = 0
    for i, (schema, prompt) in enumerate(PROMPTS):
        settings = SamplerSettings(
            grammar="json:" + json.dumps(schema), temperature=1.0, max_new_tokens=150, seed=i
        )
        ids = smol.encode_prompt(prompt)
        session = GenerationSession(
            model, ids, settings, tokenizer=smol.tokenizer,
            eos_token_ids=smol.eos_token_ids, top_n=5,
        )  # fmt: skip
        steps = list(session.stream())
        assert session.stop_reason == "eos", (prompt, session.text)
        text = smol.decode(session.generated_ids)
        value = json.loads(text)
        assert conforms(value, schema), (prompt, text)
        cut = [c for s in steps for c in s.candidates if c.cut_by]
        assert all(c.cut_by == "grammar" and c.prob == 0 for c in cut)
        valid += 1
    assert valid == 20


def test_smollm2_answers_in_json(smol):
    ids = smol.encode_prompt(PROMPTS[0][1])
    spec = "json:" + json.dumps(PERSON)
    session = GenerationSession(
        smol.model, ids, SamplerSettings(grammar=spec, temperature=0.7, max_new_tokens=40),
        tokenizer=smol.tokenizer, eos_token_ids=smol.eos_token_ids,
    )  # fmt: skip
    list(session.stream())
    assert conforms(json.loads(smol.decode(session.generated_ids)), PERSON), session.text


def test_choices_and_regex(smol):
    for spec, check in (
        ("choice:yes|no|maybe", lambda t: t in ("yes", "no", "maybe")),
        ("regex:[0-9]{3}-[0-9]{4}", lambda t: len(t) == 8 and t[3] == "-"),
    ):
        ids = smol.encode_prompt("Answer the question: is the sky blue?")
        session = GenerationSession(
            smol.model, ids, SamplerSettings(grammar=spec, temperature=1.0, seed=3),
            tokenizer=smol.tokenizer, eos_token_ids=smol.eos_token_ids,
        )  # fmt: skip
        list(session.stream())
        assert check(smol.decode(session.generated_ids)), session.text
    with pytest.raises(ValueError, match="regex"):
        build_chain(SamplerSettings(grammar="regex:[a-"), tokenizer=smol.tokenizer)
    with pytest.raises(ValueError, match="KIND:TEXT"):
        SamplerSettings(grammar="yaml:x")


def test_speculative_decoding_keeps_the_grammar(smol):
    """Speculative verification filters each position with its own prefix: the grammar's
    matcher follows every one of them (rolling back between them)."""
    import re

    from engine.decode.speculative import NGramDrafter, SpeculativeSession

    model = tiny_llama(seed=1, vocab=smol.model.get_output_embeddings().weight.shape[0])
    ids = smol.encode_prompt("Spell a word.")
    for temperature in (0.0, 1.0):
        settings = SamplerSettings(
            grammar="regex:[a-z]{3,8}( [a-z]{2,5}){0,2}", temperature=temperature,
            max_new_tokens=40, seed=4,
        )  # fmt: skip
        spec = SpeculativeSession(
            model, ids, NGramDrafter(), settings, tokenizer=smol.tokenizer,
            eos_token_ids=smol.eos_token_ids, gamma=4, top_n=1,
        )  # fmt: skip
        list(spec.stream())
        text = smol.decode(spec.generated_ids)
        assert re.fullmatch(r"[a-z]{3,8}( [a-z]{2,5}){0,2}", text), text
