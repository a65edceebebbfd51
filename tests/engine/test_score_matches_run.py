"""Issue 35, item 2: a text's scores equal the app's own run. The run is the reference: greedy
generation (its Steps hold each token's raw probability and rank), then ``score`` of the text
it wrote, with the same prompt, must give the same probability and rank at every token, for
an encoder-decoder model (T5: the encoder input exactly as generation builds it, with </s>)
and a decoder-only one. And the context length is checked before any work."""

import math

import pytest
import torch
from transformers import ByT5Tokenizer

from engine import GenerationSession, SamplerSettings
from engine.models.loading import make_bundle
from engine.records import Step
from engine.tree.score import score_text
from tiny_models import tiny_llama, tiny_t5

PROMPT = "date: 2024-03-05"
BYTES = list(range(35, 125))  # printable ASCII bytes of ByT5 (id = byte + 3): text round-trips


@pytest.fixture(scope="module", params=["t5", "llama"])
def bundle(request):
    model = (tiny_t5 if request.param == "t5" else tiny_llama)(4).float()
    if request.param == "t5":  # calm the tiny T5's huge logits (plausible probabilities)
        model.lm_head.weight = torch.nn.Parameter(model.lm_head.weight.detach() * 0.05)
    return make_bundle(model, ByT5Tokenizer(), name=request.param)


def greedy_run(bundle, prompt_ids):
    """The run the window or `generate` makes: greedy, printable bytes only (so the text
    tokenizes back to the same ids), 12 tokens."""
    vocab = bundle.model.get_output_embeddings().weight.shape[0]
    banned = tuple(i for i in range(vocab) if i - 3 not in BYTES)
    settings = SamplerSettings(temperature=0.0, max_new_tokens=12, suppress_tokens=banned)
    session = GenerationSession.over(bundle, prompt_ids, settings, top_n=5)
    return [r for r in session.stream() if isinstance(r, Step)]


def test_scores_equal_the_runs_own_steps(bundle):
    if bundle.is_encoder_decoder:
        prompt_ids = bundle.encode_prompt(PROMPT, use_chat_template=False)  # generate's ids
    else:  # decoder-only: score's context is the prompt's ids without special tokens
        prompt_ids = bundle.tokenizer(PROMPT, add_special_tokens=False)["input_ids"]
    steps = greedy_run(bundle, prompt_ids)
    text = "".join(s.text for s in steps)
    scored = score_text(bundle, text, prompt=PROMPT, top_n=5)
    assert [t.token_id for t in scored.tokens] == [s.token_id for s in steps]
    for step, token in zip(steps, scored.tokens, strict=True):
        assert math.exp(token.logprob) == pytest.approx(step.raw_prob, abs=1e-5)
        assert token.rank == step.rank  # over the raw distribution, as the run records it


def test_the_context_length_is_checked_before_any_forward(bundle, monkeypatch):
    import engine.tree.score as score

    calls = []
    real = bundle.model.forward
    monkeypatch.setattr(bundle.model, "forward", lambda *a, **k: calls.append(1) or real(*a, **k))
    limit = bundle.context_length or getattr(score, "MAX_SCORE_TOKENS", 8192)  # T5 states none
    with pytest.raises(ValueError, match=f"over the .* of {limit:,} tokens"):
        score_text(bundle, "a" * (limit + 10), prompt=PROMPT)
    assert calls == []
    assert score_text(bundle, "a" * 20, prompt=PROMPT).tokens and calls == [1]
