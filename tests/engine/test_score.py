"""Scoring a text (issue 25, "Must show"): every token's log-probability, the total, the rank
and the top-N against ONE full ``model.forward`` over the whole sequence, computed here by hand
(fp32, 1e-4), for a decoder-only model and for T5 (the prompt is the encoder input, the text
the decoder side)."""

import math

import pytest
import torch
import torch.nn.functional as F
from transformers import ByT5Tokenizer

from engine.models.loading import make_bundle
from engine.tree.score import score_text
from tiny_models import tiny_llama, tiny_t5


@pytest.fixture(scope="module", params=["llama", "t5"])
def bundle(request):
    model = (tiny_llama if request.param == "llama" else tiny_t5)(1).float()
    if request.param == "t5":  # calm the tiny T5's huge logits so 1e-4 is a fair tolerance
        model.lm_head.weight = torch.nn.Parameter(model.lm_head.weight.detach() * 0.05)
    return make_bundle(model, ByT5Tokenizer(), name=request.param)


def one_forward(bundle, context: list[int], text: list[int]) -> torch.Tensor:
    """log_softmax rows predicting each of ``text``'s tokens, from ONE forward of the whole
    sequence: decoder-only [context + text]; T5 encoder=context, decoder=[start] + text."""
    m = bundle.model
    with torch.no_grad():
        if bundle.is_encoder_decoder:
            dec = torch.tensor([[m.config.decoder_start_token_id, *text]])
            logits = m(input_ids=torch.tensor([context]), decoder_input_ids=dec).logits[0, :-1]
        else:
            full = torch.tensor([[*context, *text]])
            logits = m(input_ids=full).logits[0, len(context) - 1 : -1]
    return F.log_softmax(logits.float(), dim=-1)


def ids(bundle, s: str) -> list[int]:
    return bundle.tokenizer(s, add_special_tokens=False)["input_ids"]


@pytest.mark.parametrize(
    "prompt,text",
    [("The ", "quick brown fox"), ("Once upon", " a time, \u00e9t\u00e9!"), ("x", "\n\n  ")],
)
def test_every_token_equals_one_full_forward(bundle, prompt, text):
    res = score_text(bundle, text, prompt=prompt, top_n=7)
    want_ids = ids(bundle, text)
    # T5's encoder reads the prompt as generation builds it (with </s>; issue 35)
    context = (
        bundle.encode_prompt(prompt, use_chat_template=False)
        if bundle.is_encoder_decoder
        else ids(bundle, prompt)
    )
    rows = one_forward(bundle, context, want_ids)
    assert res.unscored == 0
    assert [t.token_id for t in res.tokens] == want_ids
    assert [t.index for t in res.tokens] == list(range(len(want_ids)))
    for t, row in zip(res.tokens, rows, strict=True):
        assert t.logprob == pytest.approx(float(row[t.token_id]), abs=1e-4)
        assert t.rank == 1 + int((row > row[t.token_id]).sum())
        assert t.surprisal == pytest.approx(-float(row[t.token_id]) / math.log(2), abs=1e-4)
        entropy = float(-(row.exp() * row).sum()) / math.log(2)
        assert t.entropy == pytest.approx(entropy, abs=1e-4)
        vals, top = torch.topk(row, 7)
        assert [c[0] for c in t.top] == top.tolist()
        assert [c[2] for c in t.top] == pytest.approx(vals.exp().tolist(), abs=1e-5)
    total = float(rows[torch.arange(len(want_ids)), torch.tensor(want_ids)].sum())
    assert res.total_logprob == pytest.approx(total, abs=1e-4)
    assert res.perplexity == pytest.approx(math.exp(-total / len(want_ids)), rel=1e-4)
    assert any(t.rank > 1 for t in res.tokens)  # a random model: the ranks must vary


def test_no_prompt(bundle):
    """Decoder-only without a prompt or BOS: the first token has no context and is not scored;
    T5 without a prompt reads an encoder input of just </s> and scores every token."""
    text = "abc def"
    res = score_text(bundle, text)
    t_ids = ids(bundle, text)
    if bundle.is_encoder_decoder:
        rows = one_forward(bundle, [bundle.tokenizer.eos_token_id], t_ids)
        assert res.unscored == 0 and len(res.tokens) == len(t_ids)
        targets = t_ids
    else:
        assert bundle.tokenizer.bos_token_id is None  # ByT5's tokenizer has none
        rows = one_forward(bundle, t_ids[:1], t_ids[1:])
        assert res.unscored == 1 and [t.index for t in res.tokens] == list(range(1, len(t_ids)))
        targets = t_ids[1:]
    got = [t.logprob for t in res.tokens]
    want = rows[torch.arange(len(targets)), torch.tensor(targets)].tolist()
    assert got == pytest.approx(want, abs=1e-4)


def test_empty_text_is_refused(bundle):
    with pytest.raises(ValueError, match="no tokens"):
        score_text(bundle, "")
