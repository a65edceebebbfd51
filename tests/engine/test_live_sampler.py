"""The class as a decoding strategy (engine.classroom.live_sampler) on a tiny Llama with a
word-level tokenizer: the class's token taken in the run and marked as the class's choice (in
the record, in the session's history, through an undo and a redo), and the class's text
scored against greedy and sampled continuations by perplexity, checked against the model's
logits read directly."""

from __future__ import annotations

import math

import pytest
import torch
from word_models import WORDS, word_tokenizer

from engine.classroom.live import class_span
from engine.classroom.live_sampler import (
    class_branch,
    continuation,
    score_class_text,
    token_bits,
)
from engine.drivers.workbench import RunRequest, Workbench
from engine.models.loading import DECODER_ONLY, ModelBundle
from engine.records import CLASS, Rewind, Step
from engine.sampling.settings import SamplerSettings
from tiny_models import tiny_llama


@pytest.fixture(scope="module")
def bundle() -> ModelBundle:
    return ModelBundle(tiny_llama(5, vocab=len(WORDS)), word_tokenizer(None), DECODER_ONLY,
                       torch.device("cpu"), torch.float32, "words", "test", 256, (2,))  # fmt: skip


def steps_of(records) -> list[Step]:
    return [r for r in records if isinstance(r, Step)]


def by_hand_bits(bundle, context: list[int], tokens: list[int]) -> list[float]:
    """Each token's surprisal from the model's logits, one prefix at a time (no cache)."""
    out = []
    for i, t in enumerate(tokens):
        ids = torch.tensor([[*context, *tokens[:i]]])
        with torch.inference_mode():
            logits = bundle.model(ids).logits[0, -1].double()
        out.append(-float(torch.log_softmax(logits, -1)[t]) / math.log(2))
    return out


def test_the_class_token_is_taken_and_marked_in_the_record_and_the_history(bundle):
    wb = Workbench()
    wb.adopt(bundle)
    settings = SamplerSettings(temperature=0, min_new_tokens=8)  # no end of text
    list(wb.start(RunRequest("the cat", settings=settings, limit=3, chat_template=False)))
    model_token = wb.session.history[1].token_id
    mat = WORDS.index("mat")
    assert model_token != mat
    records = list(class_branch(wb, 1, mat, settings))
    assert isinstance(records[0], Rewind) and records[0].keep == 1
    (step,) = steps_of(records)
    assert (step.index, step.token_id, step.forced, step.source) == (1, mat, True, CLASS)
    history = wb.session.history
    assert len(history) == 2 and history[1] is step
    assert [s.source for s in history] == ["greedy", CLASS]
    # an undo puts back the model's tokens, a redo the class's, still marked
    undone = steps_of(wb.undo())
    assert undone[0].token_id == model_token and undone[0].source == "greedy"
    redone = steps_of(wb.redo())
    assert redone[0].source == CLASS and redone[0].token_id == mat
    assert class_span(wb.session.history) == (1, 2)
    assert class_span(undone) is None


def test_a_stop_sent_in_reaches_the_branch(bundle):
    from engine.drivers.workbench import STOP

    wb = Workbench()
    wb.adopt(bundle)
    settings = SamplerSettings(temperature=0, min_new_tokens=8)
    list(wb.start(RunRequest("the", settings=settings, limit=2, chat_template=False)))
    action = class_branch(wb, 0, WORDS.index("dog"), settings)
    first = next(action)
    assert isinstance(first, Rewind)
    rest = []
    try:
        rec = action.send(STOP)
        while True:
            rest.append(rec)
            rec = action.send(None)
    except StopIteration:
        pass
    assert len(steps_of(rest)) <= 1


def test_perplexity_equals_the_models_logits_read_directly(bundle):
    tok = bundle.tokenizer
    context = tok("once upon a", add_special_tokens=False)["input_ids"]
    mine = tok("time the cat sat", add_special_tokens=False)["input_ids"]
    want = by_hand_bits(bundle, context, mine)
    assert token_bits(bundle, context, mine) == pytest.approx(want, abs=1e-4)

    prefix = tok("a", add_special_tokens=False)["input_ids"]
    result = score_class_text(bundle, "once upon", False, prefix, mine, chosen=3, samples=3)
    assert result.mine.bits == pytest.approx(want, abs=1e-4)
    assert result.mine.perplexity == pytest.approx(2 ** (sum(want) / len(want)), rel=1e-4)
    assert result.mine.text == tok.decode(mine) and result.chosen == 3
    # greedy: the argmax at every step, as long as the class's text, scored the same way
    greedy, ids = [], list(context)
    for _ in mine:
        with torch.inference_mode():
            greedy.append(int(bundle.model(torch.tensor([ids])).logits[0, -1].argmax()))
        ids.append(greedy[-1])
    assert list(result.greedy.tokens) == greedy
    assert result.greedy.bits == pytest.approx(by_hand_bits(bundle, context, greedy), abs=1e-4)
    # greedy takes the most likely token at each step: no text of that length beats its first
    assert result.greedy.bits[0] <= min(result.mine.bits[0], *(s.bits[0] for s in result.samples))
    assert len(result.samples) == 3 and all(len(s.tokens) == len(mine) for s in result.samples)
    for s in result.samples:
        assert s.bits == pytest.approx(by_hand_bits(bundle, context, list(s.tokens)), abs=1e-4)
    pooled = [b for s in result.samples for b in s.bits]
    assert result.sampled_perplexity == pytest.approx(2 ** (sum(pooled) / len(pooled)))


def test_sampled_continuations_follow_their_seed_and_the_length(bundle):
    context = bundle.tokenizer("the", add_special_tokens=False)["input_ids"]
    a = continuation(bundle, context, 6, 1.0, 1)
    assert a == continuation(bundle, context, 6, 1.0, 1) and len(a) == 6
    assert any(continuation(bundle, context, 6, 1.0, s) != a for s in range(2, 8))
    with pytest.raises(ValueError, match="no token"):
        score_class_text(bundle, "the", False, [], [])
