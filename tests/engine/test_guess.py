"""The guess round: splitting, matching the way a person reads a token, scoring, the score."""

import pytest
from transformers import ByT5Tokenizer

from engine.classroom.guess import (
    POINTS_CHOSEN,
    POINTS_TOP3,
    POINTS_TOP10,
    Scoreboard,
    match_guess,
    points_for,
    score_round,
    split_guesses,
)
from engine.records import Candidate, Step

# A made-up step (ids are arbitrary): the picked token is " Paris", rank 1.
TEXTS = [" Paris", " the", " London", " a", "paris", " not", "the", " Lyon", " Rome", " New",
         " Berlin", " PARIS"]  # fmt: skip
PROBS = [0.40, 0.12, 0.08, 0.06, 0.05, 0.04, 0.03, 0.02, 0.02, 0.015, 0.01, 0.005]


def make_step(chosen: int = 0, texts=TEXTS, probs=PROBS, token_id=None, rank=None) -> Step:
    cands = tuple(
        Candidate(token_id=100 + i, text=t, raw_prob=p, prob=p * 1.5 if i < 5 else 0.0,
                  cut_by="" if i < 5 else "top-k 5")
        for i, (t, p) in enumerate(zip(texts, probs, strict=True))
    )  # fmt: skip
    if token_id is None:
        c = cands[chosen]
        token_id, text, raw, rank = c.token_id, c.text, c.raw_prob, chosen + 1
    else:
        text, raw = "ë", 0.001
    return Step(
        index=4, token_id=token_id, text=text, token_str=text, raw_prob=raw, prob=raw,
        rank=rank, candidates=cands, survivors=5, entropy_raw=2.0, entropy=1.5,
        step_time=0.01, tokens_per_s=10.0,
    )  # fmt: skip


def test_split_guesses_commas_lines_quotes_and_repeats():
    typed = 'Paris, london\n\n the ,Paris,\n"," , " the"\nRome'
    assert split_guesses(typed) == ["Paris", "london", "the", ",", " the", "Rome"]
    assert split_guesses(" , \n ") == []


def test_guess_scoring_rule():
    assert [points_for(r, False) for r in (1, 3, 4, 10, 11, None)] == [2, 2, 1, 1, 0, 0]
    assert points_for(7, True) == points_for(None, True) == POINTS_CHOSEN == 3
    assert (POINTS_TOP3, POINTS_TOP10) == (2, 1)


def test_guess_leading_space_is_optional():
    r = match_guess("Paris", make_step())
    assert (r.token_id, r.token_text, r.rank, r.chosen, r.points) == (100, " Paris", 1, True, 3)
    assert r.raw_prob == pytest.approx(0.40) and r.prob == pytest.approx(0.60)
    r = match_guess("London", make_step())
    assert (r.rank, r.chosen, r.points) == (3, False, 2)


def test_guess_case_sensitive_match_first_then_any_case():
    step = make_step()
    exact = match_guess("paris", step)  # "paris" (rank 5) exists: exact case wins over rank 1
    assert (exact.token_text, exact.rank, exact.points) == ("paris", 5, 1)
    folded = match_guess("pArIs", step)  # no exact match: any case, best ranked (" Paris")
    assert (folded.token_text, folded.rank, folded.chosen) == (" Paris", 1, True)
    upper = match_guess("PARIS", step)
    assert (upper.token_text, upper.rank) == (" PARIS", 12)
    assert upper.points == 0  # rank 12: beyond the top 10


def test_a_guess_matching_several_tokens_takes_the_best_ranked():
    r = match_guess("the", make_step())  # " the" rank 2 and "the" rank 7
    assert (r.token_text, r.rank, r.points) == (" the", 2, 2)
    quoted = match_guess(" the", make_step())  # typed with its space: that token only
    assert quoted.rank == 2


def test_several_guesses_score_and_the_same_token_counts_once():
    rnd = score_round("Paris, London, Rome\nthe, paris, Paris, PARIS", make_step(chosen=2))
    got = [(r.guess, r.rank, r.chosen, r.points) for r in rnd.results]
    assert got == [
        ("Paris", 1, False, 2), ("London", 3, True, 3), ("Rome", 9, False, 1),
        ("the", 2, False, 2), ("paris", 5, False, 1), ("PARIS", 12, False, 0),
    ]  # fmt: skip
    assert rnd.points == 9 and rnd.found and rnd.chosen_text == " London"
    assert rnd.marks() == {100: "Paris", 102: "London", 108: "Rome", 101: "the", 104: "paris",
                           111: "PARIS"}  # fmt: skip
    twice = score_round(["Paris", "pArIs"], make_step())  # both land on " Paris"
    assert [r.points for r in twice.results] == [3, 0]
    assert "same token" in twice.results[1].note


def test_guess_not_in_top_n_without_and_with_a_tokenizer():
    step = make_step()
    r = match_guess("zebra", step)
    assert (r.token_id, r.rank, r.points) == (None, None, 0)
    assert r.note == "not in the top 12"
    tok = ByT5Tokenizer()  # bytes: "z" is one token, "zebra" five
    r = match_guess("z", step, tok)
    assert r.token_id == tok("z", add_special_tokens=False)["input_ids"][0]
    assert (r.rank, r.raw_prob, r.points, r.note) == (None, None, 0, "not in the top 12")
    r = match_guess("zebra", step, tok)
    assert r.token_text == "z" and "first piece 'z'" in r.note and r.rank is None


def test_guess_of_a_multi_token_word_is_judged_by_its_first_piece():
    tok = ByT5Tokenizer()
    texts = ["P", "L", "t", "R"]
    ids = [tok(t, add_special_tokens=False)["input_ids"][0] for t in texts]
    cands = tuple(
        Candidate(i, t, p, p) for i, t, p in zip(ids, texts, (0.5, 0.3, 0.1, 0.05), strict=True)
    )
    step = Step(
        index=0, token_id=ids[1], text="L", token_str="L", raw_prob=0.3, prob=0.3, rank=2,
        candidates=cands, survivors=4, entropy_raw=1.0, entropy=1.0, step_time=0.0,
        tokens_per_s=0.0,
    )  # fmt: skip
    r = match_guess("London", step, tok)  # byte-level: the model would write "L" first
    assert (r.token_text, r.rank, r.chosen, r.points) == ("L", 2, True, 3)
    assert "first piece 'L'" in r.note


def test_guess_of_the_picked_token_beyond_top_n_is_recognised():
    step = make_step(token_id=999, rank=4242)  # sampled from the tail: "ë", rank 4242
    r = match_guess("ë", step)
    assert (r.token_id, r.rank, r.chosen, r.points) == (999, 4242, True, 3)


def test_guess_scoreboard_runs_and_resets():
    board = Scoreboard()
    assert board.add(score_round("Paris, the", make_step())) == 5
    assert board.add(score_round("Rome", make_step(chosen=1))) == 6
    assert (board.total, board.found, len(board.rounds)) == (6, 1, 2)
    assert board.describe() == "6 points in 2 rounds (1 found)"
    board.reset()
    assert board.total == 0 and board.describe() == "0 points in 0 rounds (0 found)"


@pytest.mark.slow
def test_guess_round_on_a_real_step_of_the_bundled_model():
    """SmolLM2 after 'The capital of France is': greedy picks ' Paris'; the guesses are
    matched to the real vocabulary with its tokenizer."""
    from engine.decode.session import GenerationSession
    from engine.models.catalog import load_bundled
    from engine.sampling.settings import SamplerSettings

    bundle = load_bundled("smollm2-135m", device="cpu")
    ids = bundle.encode_prompt("The capital of France is", use_chat_template=False)
    session = GenerationSession(
        bundle.model, ids, SamplerSettings(temperature=0, max_new_tokens=1),
        tokenizer=bundle.tokenizer, eos_token_ids=bundle.eos_token_ids, top_n=50,
    )  # fmt: skip
    (step,) = list(session.stream())
    assert step.token_str == " Paris" and step.rank == 1
    rnd = score_round("Paris, LONDON, the, Tokyo, antidisestablishment", step, bundle.tokenizer)
    paris, london, the, tokyo, long_word = rnd.results
    assert (paris.token_text, paris.rank, paris.chosen, paris.points) == (" Paris", 1, True, 3)
    texts = [c.text for c in step.candidates]
    assert " LONDON" not in texts and "LONDON" not in texts  # so the match ignores case
    assert london.token_text == " London" and london.rank == texts.index(" London") + 1
    assert the.token_text == " the" and the.rank == texts.index(" the") + 1
    assert the.raw_prob == step.candidates[the.rank - 1].raw_prob
    if " Tokyo" in texts:
        assert tokyo.rank == texts.index(" Tokyo") + 1
    else:
        assert tokyo.rank is None and tokyo.note.startswith("not in the top 50")
        assert bundle.tokenizer.decode([tokyo.token_id]) == " Tokyo"  # one token, found anyway
    pieces = bundle.tokenizer(" antidisestablishment", add_special_tokens=False)["input_ids"]
    assert len(pieces) > 1 and long_word.token_id == pieces[0]
    assert rnd.points == sum(r.points for r in rnd.results) >= 3 + 2
