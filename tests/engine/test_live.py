"""The live round's state machine (engine.classroom.live): joining, answers, exact tallies,
the reveal scored against the model's real distribution (a tiny Llama with a word-level
tokenizer), the class as the sampler, the leaderboard, hostile text."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
import torch
from word_models import WORDS, word_tokenizer

from engine.classroom.live import (
    DRAW,
    GUESS,
    MAJORITY,
    NICK_MAX,
    SAMPLER,
    VOTE,
    Choice,
    Distribution,
    LiveError,
    LiveRound,
    clean_text,
)
from engine.classroom.live_model import guess_tokens, peek
from engine.models.loading import DECODER_ONLY, ModelBundle
from tiny_models import tiny_llama


@pytest.fixture(scope="module")
def bundle() -> ModelBundle:
    return ModelBundle(tiny_llama(5, vocab=len(WORDS)), word_tokenizer(None), DECODER_ONLY,
                       torch.device("cpu"), torch.float32, "words", "test", 256, (2,))  # fmt: skip


def hand_dist() -> Distribution:
    probs = np.array([0.05, 0.5, 0.2, 0.2, 0.05], dtype=np.float32)
    return Distribution(probs, {0: "<e>", 1: " cat", 2: " dog", 3: " mat", 4: " sat"})


def test_clean_text_removes_controls_and_bounds_length():
    assert clean_text("  <b>Sam</b>\x00\u202e\u200b \t x ", 24, "nickname") == "<b>Sam</b> x"
    assert clean_text("e\u0301", 5, "guess") == "\u00e9"  # NFC
    for bad in ("", "\x00\x01", "   ", 7, None, ["x"], "x" * 25, "x" * 1000):
        with pytest.raises(LiveError):
            clean_text(bad, 24, "nickname")


def test_join_wrong_code_cap_duplicates_rejoin_and_removal():
    r = LiveRound("ABCDE", cap=3)
    with pytest.raises(LiveError, match="wrong code"):
        r.join("ZZZZZ", "Ann")
    a = r.join("abcde", "Ann")  # the code is read in capitals
    b = r.join("ABCDE", "ann")
    assert b.nick == "ann 2"
    again = r.join("ABCDE", "whatever", a.key)  # a dropped connection rejoins as itself
    assert again is a and len(r.students) == 2
    r.join("ABCDE", "x" * NICK_MAX)
    with pytest.raises(LiveError, match="full"):
        r.join("ABCDE", "Dan")
    r.remove(a.sid)
    with pytest.raises(LiveError, match="removed"):
        r.join("ABCDE", "Ann", a.key)


def test_tallies_are_exact_and_a_student_counts_once():
    r = LiveRound("ABCDE")
    kids = [r.join("ABCDE", f"k{i}") for i in range(10)]
    with pytest.raises(LiveError, match="no question"):
        r.answer(kids[0].sid, {"guess": "cat"})
    r.ask(GUESS, "the")
    for i, k in enumerate(kids):
        r.answer(k.sid, {"guess": "Cat" if i < 6 else "dog"})
    r.answer(kids[9].sid, {"guess": "mat"})  # changes their mind: the last answer counts
    assert r.tally() == {"cat": 6, "dog": 3, "mat": 1}
    assert r.answered() == 10
    choices = [Choice(1, " cat"), Choice(2, " dog"), Choice(3, " mat")]
    q = r.ask(VOTE, "the", choices)
    assert [c.text for c in q.choices] == [" cat", " dog", " mat"]
    for bad in ({"choice": 3}, {"choice": -1}, {"choice": "1"}, {"choice": True}, {}):
        with pytest.raises(LiveError):
            r.answer(kids[0].sid, bad)
    for i, k in enumerate(kids):
        r.answer(k.sid, {"choice": i % 3})
    assert r.tally() == {choices[0]: 4, choices[1]: 3, choices[2]: 3}
    r.close()
    with pytest.raises(LiveError, match="no question"):
        r.answer(kids[0].sid, {"choice": 0})


def test_reveal_scores_by_probability_bits_and_rank():
    r, d = LiveRound("ABCDE"), hand_dist()
    a, b, c = (r.join("ABCDE", n) for n in "abc")
    r.ask(GUESS, "the")
    r.answer(a.sid, {"guess": "cat"})
    r.answer(b.sid, {"guess": "mat"})
    r.answer(c.sid, {"guess": "zebra"})
    v = r.reveal(d, 1, {"cat": 1, "mat": 3, "zebra": None})
    assert v.results[a.sid].prob == pytest.approx(0.5) and v.results[a.sid].bits == 1.0
    assert v.results[a.sid].rank == 1 and v.results[a.sid].picked
    # a tie (0.2, 0.2) ranks as argmax breaks it: the lower id first
    assert v.results[b.sid].rank == 3 and d.rank(2) == 2
    assert v.results[b.sid].bits == pytest.approx(-math.log2(0.2))
    assert v.results[c.sid].prob is None and "no token" in v.results[c.sid].note
    assert v.class_counts == {1: 1, 3: 1}
    assert v.class_mean_bits == pytest.approx((1 - math.log2(0.2)) / 2)
    assert v.model_entropy == pytest.approx(d.entropy())
    board = r.leaderboard()
    assert [row[0] for row in board] == ["a", "b", "c"] and board[2][1] == math.inf
    assert r.export()[0]["nickname"] == "a" and set(r.export()[0]) >= {"answer", "bits"}


def test_the_class_as_the_sampler_majority_and_draw():
    r, d = LiveRound("ABCDE"), hand_dist()
    kids = [r.join("ABCDE", f"k{i}") for i in range(6)]
    r.ask(SAMPLER, "the", [Choice(2, " dog"), Choice(3, " mat"), Choice(1, " cat")])
    shown = [c.token_id for c in r.question.choices]
    for k, tid in zip(kids, (2, 2, 3, 3, 1, 1), strict=True):
        r.answer(k.sid, {"choice": shown.index(tid)})
    # a three-way tie goes to the model's most probable token
    assert r.class_token(MAJORITY, d, random.Random(0)) == 1
    draws = {r.class_token(DRAW, d, random.Random(s)) for s in range(40)}
    assert draws == {1, 2, 3}


def test_peek_is_the_models_own_distribution_and_guesses_read_as_its_tokenizer(bundle):
    tok = bundle.tokenizer
    prefix = tok("cat sat", add_special_tokens=False)["input_ids"]
    dist = peek(bundle, "the", False, prefix)
    ids = torch.tensor([[*tok("the", add_special_tokens=False)["input_ids"], *prefix]])
    with torch.inference_mode():
        want = torch.softmax(bundle.model(ids).logits[0, -1].float(), -1)
    torch.testing.assert_close(torch.from_numpy(dist.probs), want)
    found = guess_tokens(tok, dist, ["mat", "DOG", "zebra"])
    assert found["mat"] == WORDS.index("mat")
    assert found["DOG"] == WORDS.index("dog")  # a top token, case ignored when no exact one
    assert found["zebra"] == WORDS.index("<|endoftext|>")  # the word level's unknown token
    r = LiveRound("ABCDE")
    s = r.join("ABCDE", "s")
    r.ask(GUESS, "the cat sat")
    r.answer(s.sid, {"guess": "mat"})
    top = int(want.argmax())
    v = r.reveal(dist, top, found)
    mat = WORDS.index("mat")
    assert v.results[s.sid].prob == pytest.approx(float(want[mat]))
    assert v.results[s.sid].rank == int((want > want[mat]).sum()) + 1
    assert v.model_prob == pytest.approx(float(want[top]))
