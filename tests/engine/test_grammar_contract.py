"""Issue 35, item 1: a grammar is a contract. When it cannot go on (a dead end with the other
settings, a matcher error, a grammar broken from the start, a chosen token it refuses) the run
stops there with a message that says so and keeps what it made; an output cut by its budget
is marked incomplete; no key is written twice in one object; a oneOf of disjoint alternatives
compiles. Each case is checked against llguidance's own matcher (the reference: every token
the run took is one it allows) on SmolLM2's tokenizer with a tiny random model (fast, and
harder on the grammar than a trained model)."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import llguidance
import pytest

from engine import GenerationSession, SamplerSettings
from engine.errors import GrammarStop
from engine.models.catalog import load_bundled
from engine.records import GRAMMAR_STOP, Step
from engine.sampling.build import build_chain
from engine.sampling.grammar import compile_grammar, ll_tokenizer
from tiny_models import tiny_llama

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
BOOLEAN = 'json:{"type": "boolean"}'
SELF_REF = 'json:{"type": "object", "properties": {"next": {"$ref": "#"}}, "required": ["next"]}'


@pytest.fixture(scope="module")
def smol():
    return load_bundled("smollm2-135m", device="cpu")


@pytest.fixture(scope="module")
def model(smol):
    return tiny_llama(seed=0, vocab=smol.model.get_output_embeddings().weight.shape[0])


def session(smol, model, spec, **settings):
    settings = {"temperature": 0.0, "max_new_tokens": 24, **settings}
    ids = smol.encode_prompt("Answer in the format asked for.")
    return GenerationSession(
        model, ids, SamplerSettings(grammar=spec, **settings), tokenizer=smol.tokenizer,
        eos_token_ids=smol.eos_token_ids, top_n=5,
    )  # fmt: skip


def taken(s):
    return [r for r in s.stream() if isinstance(r, Step)]


def reference(smol, spec):
    vocab = smol.model.get_output_embeddings().weight.shape[0]
    tok = ll_tokenizer(smol.tokenizer, vocab, smol.eos_token_ids)
    return llguidance.LLMatcher(tok, compile_grammar(spec), log_level=0)


def allowed_by_reference(smol, spec, ids):
    """How many of ``ids`` llguidance's own matcher takes (from a fresh start)."""
    return reference(smol, spec).try_consume_tokens(list(ids))


def test_a_dead_end_with_the_other_settings_stops_the_run(smol, model):
    """A boolean schema with --min-new-tokens 8: after "true" the grammar allows only the end,
    which min-new-tokens removes. It used to be skipped and the run wrote free text."""
    s = session(smol, model, BOOLEAN, min_new_tokens=8)
    steps = taken(s)
    summary = s.summary()
    assert summary.stop_reason == GRAMMAR_STOP and summary.finished
    assert "allows only" in summary.note and "removed" in summary.note
    assert smol.decode(s.generated_ids) in ("true", "false")
    assert allowed_by_reference(smol, BOOLEAN, s.generated_ids) == len(steps)


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ('lark:start: "a" start', "Too many items"),  # a matcher error at its first token
        (SELF_REF, "Too many items"),  # a required self-reference
        ('json:{"$ref": "#"}', "cannot go on"),  # broken from the start
        ("regex:(.{1,100}){100}", "too many expressions"),  # a catastrophic regex
    ],
)
def test_a_matcher_that_fails_stops_the_run_with_its_reason(smol, model, spec, words):
    s = session(smol, model, spec)
    steps = taken(s)
    summary = s.summary()
    assert summary.stop_reason == GRAMMAR_STOP, smol.decode(s.generated_ids)
    assert words in summary.note and "\n" not in summary.note
    assert len(steps) <= 1  # nothing written after the matcher failed
    assert all(step.stage_notes for step in steps)


def test_a_chosen_token_the_grammar_refuses_stops_the_next_step(smol, model):
    s = session(smol, model, BOOLEAN)
    refused = smol.tokenizer("zz", add_special_tokens=False)["input_ids"][0]
    s.force_next(refused)
    first = s.step()  # the user's choice stands
    assert first.forced and first.token_id == refused
    with pytest.raises(GrammarStop, match="broke at step 1"):
        s.step()
    assert s.summary().stop_reason == GRAMMAR_STOP and s.finished


def test_an_output_cut_by_its_budget_is_marked_incomplete(smol, model):
    s = session(smol, model, "regex:[a-z]{40}", max_new_tokens=4)
    steps = taken(s)
    summary = s.summary()
    assert len(steps) == 4 and summary.stop_reason == "max_new_tokens"
    assert summary.incomplete and "incomplete" in summary.ending
    matcher = reference(smol, "regex:[a-z]{40}")
    assert matcher.try_consume_tokens(s.generated_ids) == 4 and not matcher.is_accepting()
    done = session(smol, model, "choice:yes|no", max_new_tokens=8)
    taken(done)
    assert done.summary().stop_reason == "eos" and not done.summary().incomplete


def test_a_key_is_never_written_twice_in_one_object(smol, model):
    """{"type": "object"} lets any key in; a model pushed towards "type" wrote it again and
    again until the budget ran out. Now a token that would repeat a key is cut."""
    spec = 'json:{"type": "object", "additionalProperties": {"type": "integer"}}'
    ids = smol.tokenizer('{"type": 1, "type": 2}', add_special_tokens=False)["input_ids"]
    push = {ids[1]: 12.0, ids[2]: 12.0, ids[5]: 6.0, ids[6]: 6.0}  # type  ":  ,  space-quote
    bias = (*((f"#{t}", b) for t, b in push.items()), ("}", -50.0), ("{}", -50.0))
    s = session(smol, model, spec, max_new_tokens=40, logit_bias=bias)
    taken(s)
    text = smol.decode(s.generated_ids)
    keys = re.findall(r'"((?:[^"\\]|\\.)*)": -?\d', text)  # values are integers
    assert keys.count("type") == 1, text
    assert len(keys) == len(set(keys)) >= 3, text
    assert allowed_by_reference(smol, spec, s.generated_ids) == len(s.generated_ids)


def test_the_key_cut_is_exactly_the_repeating_tokens(smol):
    """At `{"type": 1, "type` every token that closes the key is cut, nothing else is."""
    spec = 'json:{"type": "object"}'
    tok = smol.tokenizer
    vocab = smol.model.get_output_embeddings().weight.shape[0]
    chain = build_chain(SamplerSettings(grammar=spec), 0, smol.eos_token_ids, tokenizer=tok)
    import torch

    ids = tok('{"type": 1, "type', add_special_tokens=False)["input_ids"]
    _probs, cut = chain.probs(torch.tensor([ids]), torch.zeros(1, vocab))
    matcher = reference(smol, spec)
    assert matcher.try_consume_tokens(ids) == len(ids)
    library = set(torch.nonzero(unpack(matcher, vocab)).flatten().tolist())
    ours = set(torch.nonzero(cut[0] < 0).flatten().tolist())
    dropped = library - ours
    assert ours <= library and dropped
    assert all(tok.decode([t]).startswith('"') for t in dropped)  # each closes the key
    assert tok('":', add_special_tokens=False)["input_ids"][0] in dropped


def unpack(matcher, vocab):
    from engine.sampling.grammar import unpack_bitmask

    return unpack_bitmask(matcher.compute_bitmask(), vocab)


def test_one_of_disjoint_alternatives_compiles_and_constrains(smol, model):
    spec = 'json:{"oneOf": [{"const": 1}, {"const": 2}, {"const": "x"}]}'
    s = session(smol, model, spec, temperature=1.0, seed=3)
    taken(s)
    assert s.summary().stop_reason == "eos"
    assert json.loads(smol.decode(s.generated_ids)) in (1, 2, "x")
    overlap = 'json:{"oneOf": [{"type": "string"}, {"type": "string", "maxLength": 3}]}'
    with pytest.raises(ValueError, match="oneOf"):
        compile_grammar(overlap)  # a string of 2 characters matches both: still refused


def test_methods_that_cannot_keep_a_grammar_refuse_it(smol, model):
    from engine.decode.beam import BeamSession
    from engine.decode.contrastive import ContrastiveSession

    settings = SamplerSettings(grammar=BOOLEAN, max_new_tokens=4)
    for cls, kw in ((BeamSession, {"num_beams": 2}), (ContrastiveSession, {})):
        with pytest.raises(ValueError, match="does not take a grammar"):
            cls(model, [1, 2, 3], settings, tokenizer=smol.tokenizer, **kw)


def test_speculative_decoding_stops_where_the_grammar_does(smol, model):
    from engine.decode.speculative import NGramDrafter, SpeculativeSession

    ids = smol.encode_prompt("true true true")
    s = SpeculativeSession(
        model, ids, NGramDrafter(), SamplerSettings(grammar=BOOLEAN, temperature=0.0,
        min_new_tokens=8, max_new_tokens=20), tokenizer=smol.tokenizer,
        eos_token_ids=smol.eos_token_ids, gamma=4, top_n=1,
    )  # fmt: skip
    list(s.stream())
    assert s.summary().stop_reason == GRAMMAR_STOP
    assert smol.decode(s.generated_ids) in ("true", "false")


def test_sample_step_refuses_a_step_the_grammar_cannot_take(smol, model):
    from engine.experiments.step_sample import sample_step

    s = session(smol, model, BOOLEAN, min_new_tokens=8)
    list(s.stream())
    s.rewind(len(s.history))  # stand where the grammar had nothing left
    with pytest.raises(GrammarStop, match="nothing to draw"):
        sample_step(s, 100)


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, str(ROOT / "main.py"), *args], capture_output=True, env=env,
        timeout=300, cwd=ROOT, text=True,
    )  # fmt: skip


def test_generate_exits_1_with_the_grammars_reason():
    done = _cli(
        "generate", "--prompt", "Is it true?", "--no-chat-template", "--preset", "Greedy",
        "--grammar", BOOLEAN, "--min-new-tokens", "8", "--max-new-tokens", "20",
    )  # fmt: skip
    assert done.returncode == 1, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert "error: the json grammar allows only" in done.stderr
    assert done.stdout.strip() in ("true", "false")
    cut = _cli(
        "generate", "--prompt", "A person", "--no-chat-template", "--preset", "Greedy",
        "--grammar", 'json:{"type": "object"}', "--max-new-tokens", "3",
    )  # fmt: skip
    assert cut.returncode == 0 and "incomplete" in cut.stderr
