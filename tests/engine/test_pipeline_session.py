"""The pipelined session (the host one token behind, ``engine.decode.pipeline``) against
today's session: the same Step records, record for record (ids, probabilities to 1e-6, ranks,
cut labels, entropies), on greedy and seeded runs, with new settings, Stop, a branch and undo
in the middle, on the fast path and on ``model.forward``."""

import pytest
import torch
from transformers import ByT5Tokenizer

from engine.decode.pipeline import PipelinedSession
from engine.decode.session import GenerationSession
from engine.records import Progress, Step
from engine.sampling.settings import SamplerSettings
from tests.tiny_models import tiny_llama

TOK = ByT5Tokenizer()
PROMPT = TOK.encode("abc abc abc abc ab", add_special_tokens=False)
GREEDY = SamplerSettings(temperature=0, max_new_tokens=12)
SEEDED = SamplerSettings(temperature=0.9, top_k=40, top_p=0.95, min_p=0.01, max_new_tokens=12)
PENALISED = SamplerSettings(
    temperature=0.8, repetition_penalty=1.4, penalty_last_n=6, top_k=30, max_new_tokens=12
)
MODEL = tiny_llama(0)


def pair(settings, fast=True, model=MODEL, **options):
    common = dict(tokenizer=TOK, top_n=20, seed=11, fast=fast, **options)
    today = GenerationSession(model, PROMPT, settings, **common)
    piped = PipelinedSession(model, PROMPT, settings, pipeline=True, **common)
    return today, piped


def assert_same_steps(got, want):
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        assert (a.index, a.token_id, a.rank, a.survivors, a.text, a.source, a.forced) == (
            b.index, b.token_id, b.rank, b.survivors, b.text, b.source, b.forced,
        ), a.index  # fmt: skip
        assert (a.is_eos, a.prefill, a.stage_notes) == (b.is_eos, b.prefill, b.stage_notes)
        assert [(c.token_id, c.text, c.cut_by, c.penalised_by) for c in a.candidates] == [
            (c.token_id, c.text, c.cut_by, c.penalised_by) for c in b.candidates
        ]
        numbers = [a.raw_prob, a.prob, a.entropy_raw, a.entropy]
        numbers += [x for c in a.candidates for x in (c.raw_prob, c.prob)]
        expected = [b.raw_prob, b.prob, b.entropy_raw, b.entropy]
        expected += [x for c in b.candidates for x in (c.raw_prob, c.prob)]
        torch.testing.assert_close(
            torch.tensor(numbers, dtype=torch.float64),
            torch.tensor(expected, dtype=torch.float64),
            atol=1e-6, rtol=0,
        )  # fmt: skip
        pens = [(c.before_p, c.after_p) for c in a.candidates]
        want_pens = [(c.before_p, c.after_p) for c in b.candidates]
        for p, q in zip(pens, want_pens, strict=True):
            assert (p[0] is None) == (q[0] is None)
            if p[0] is not None:
                assert p == pytest.approx(q, abs=1e-6)


def steps(records):
    return [r for r in records if isinstance(r, Step)]


def both(today, piped, action):
    """Run ``action`` on each session; their records must agree."""
    a, b = action(today), action(piped)
    if isinstance(a, list):
        assert_same_steps(steps(b), steps(a))
    return a, b


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("settings", [GREEDY, SEEDED, PENALISED], ids=["greedy", "seeded", "pen"])
def test_a_whole_run_gives_the_same_records(settings, fast):
    today, piped = pair(settings, fast)
    both(today, piped, lambda s: list(s.stream()))
    assert_same_steps(piped.history, today.history)
    assert piped.fallback is None and piped.launched_ahead == 11  # all but the first
    assert piped.discarded == 0 and today.stop_reason == piped.stop_reason == "max_new_tokens"


def _stopped_after(session, n, budget=20):
    """Stop the stream (close it) after ``n`` Steps, as the window's Stop does."""
    out, stream = [], session.stream(budget)
    for record in stream:
        out.append(record)
        if len(steps(out)) == n:
            break
    stream.close()
    return out


def _changed_after(session, n, settings, budget):
    """New settings between tokens while the stream runs (as the window's sliders do), after
    ``n`` Steps: from the next token on."""
    out = []
    for record in session.stream(budget):
        out.append(record)
        if len(steps(out)) == n:
            session.settings = settings
    return out


@pytest.mark.parametrize("settings", [GREEDY, SEEDED, PENALISED], ids=["greedy", "seeded", "pen"])
def test_settings_stop_branch_and_undo_in_the_middle_land_exactly(settings):
    choices_in_the_middle(*pair(settings), settings)


def choices_in_the_middle(today, piped, settings):
    """Stop, new settings, a branch, undo and redo between tokens, on both sessions."""
    both(today, piped, lambda s: _stopped_after(s, 5))  # Stop with a token launched ahead
    assert piped.discarded == 1 and piped.stop_reason == "stopped"
    new = settings.with_(temperature=0.5, top_k=12, repetition_penalty=1.2)
    both(today, piped, lambda s: _changed_after(s, 4, new, 9))
    assert piped.discarded == 2
    branch_at = 6
    other = next(
        c.token_id for c in today.history[branch_at].candidates
        if c.token_id != today.history[branch_at].token_id
    )  # fmt: skip
    both(today, piped, lambda s: [s.branch(branch_at, other), *s.stream(6)])
    assert piped.history[branch_at].forced and piped.history[branch_at].token_id == other
    both(today, piped, lambda s: s.undo())
    both(today, piped, lambda s: list(s.stream(5)))  # the cache catches up after the undo
    both(today, piped, lambda s: s.redo())
    both(today, piped, lambda s: list(s.stream(3)))
    assert_same_steps(piped.history, today.history)
    assert piped.launched_ahead > 10 and piped.discarded == 2


def test_the_end_of_text_and_the_end_of_the_context_drop_the_token_launched_ahead():
    reference, _ = pair(GREEDY)
    ids = [s.token_id for s in reference.stream(12)]
    eos = ids[6]
    first = ids.index(eos)
    today, piped = pair(GREEDY, eos_token_ids=[eos])
    both(today, piped, lambda s: list(s.stream(12)))
    assert len(piped.history) == first + 1 and piped.stop_reason == "eos"
    assert piped.discarded == 1  # the token launched ahead of the end of text
    context = len(PROMPT) + 7
    today, piped = pair(GREEDY, max_context=context, eos_token_ids=[])
    both(today, piped, lambda s: list(s.stream(12)))
    assert len(piped.history) == 7 and piped.stop_reason == "context"


def test_a_chain_the_device_path_cannot_run_takes_todays_step_and_says_why():
    settings = SamplerSettings(mirostat=2, max_new_tokens=6)
    today, piped = pair(settings)
    a, b = both(today, piped, lambda s: list(s.stream()))
    assert "mirostat" in piped.fallback
    notes = [r.text for r in b if isinstance(r, Progress)]
    assert notes == [f"Decoding on the host path: {piped.fallback}"]
    assert piped.launched_ahead == 0
    assert_same_steps(piped.history, today.history)


def test_a_forced_token_and_a_direct_step_land_on_the_pipelined_session():
    today, piped = pair(SEEDED)
    both(today, piped, lambda s: _stopped_after(s, 3))
    for s in (today, piped):
        s.force_next(7)
    both(today, piped, lambda s: list(s.stream(4)))
    both(today, piped, lambda s: [s.step()])
    both(today, piped, lambda s: list(s.stream(3)))
    assert piped.history[3].forced and piped.history[3].token_id == 7
    assert_same_steps(piped.history, today.history)


def test_the_device_ids_grow_and_copy_only_what_changed():
    from engine.decode.pipeline import PENDING, DeviceIds

    ids = DeviceIds(torch.device("cpu"))
    run = [(7 * i) % 50 for i in range(600)]  # past the first 256
    ids.sync(run)
    assert ids.buf[:600].tolist() == run and ids.buf.shape[0] >= 601
    ids.push(torch.tensor([49]), 600)
    assert ids.mirror[-1] == PENDING and int(ids.buf[600]) == 49
    ids.buf[:10] = -5  # a part the host says is unchanged is not copied again
    ids.sync([*run[:300], 3])
    assert ids.buf[:10].tolist() == [-5] * 10 and int(ids.buf[300]) == 3
    assert ids.mirror == [*run[:300], 3]


def test_a_chain_swapped_between_tokens_without_the_setter_still_lands():
    from engine.sampling.build import build_chain

    today, piped = pair(SEEDED)
    other = SEEDED.with_(temperature=0.4, top_k=5)

    def swapped(session):
        out = []
        for record in session.stream(8):
            out.append(record)
            if len(steps(out)) == 3:
                session.sampler = build_chain(other, len(PROMPT))
        return out

    both(today, piped, swapped)
    assert piped.discarded == 1 and piped.history[3].survivors <= 5


def test_min_new_tokens_without_end_ids_stays_on_the_device_path():
    """A fixed-length run (end ids off, min new tokens = max, as the bench runs) has an idle
    min-new-tokens stage: the pipeline leaves it out instead of falling back; with end ids the
    stage holds them back on the host path, and says so."""
    fixed = SEEDED.with_(min_new_tokens=12)
    today, piped = pair(fixed, eos_token_ids=[])
    both(today, piped, lambda s: list(s.stream()))
    assert piped.fallback is None and piped.launched_ahead == 11
    today, piped = pair(fixed, eos_token_ids=[TOK.eos_token_id])
    both(today, piped, lambda s: list(s.stream()))
    assert "min new tokens" in piped.fallback and piped.launched_ahead == 0
