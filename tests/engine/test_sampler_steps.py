"""What the new stages leave in the Step records of a real (tiny) model's run: mirostat's mu
per step (restored by a branch), XTC's removed tokens, DRY's and the penalties' reweighting
(probability before and after), and seeded reproducibility."""

import pytest
from transformers import ByT5Tokenizer

from engine.decode.session import GenerationSession
from engine.sampling.mirostat import Mirostat
from engine.sampling.settings import SamplerSettings
from tests.tiny_models import tiny_llama

TOK = ByT5Tokenizer()
PROMPT = TOK.encode("abc abc abc abc ab", add_special_tokens=False)


def run(settings, seed=3, n=10, top_n=20):
    s = GenerationSession(
        tiny_llama(0), PROMPT, settings.with_(max_new_tokens=n), tokenizer=TOK, seed=seed,
        top_n=top_n,
    )  # fmt: skip
    steps = list(s.stream())
    return s, steps


def test_mirostat_mu_is_kept_per_step_and_restored_by_a_branch():
    settings = SamplerSettings(mirostat=2, mirostat_tau=3.0, mirostat_eta=0.5)
    session, steps = run(settings)
    rule = Mirostat(2, 3.0, 0.5)
    mu = 6.0  # 2 tau
    for step in steps:
        assert step.stage_notes[-1].text.startswith(f"mu {mu:.2f}")
        mu = rule.update_mu(mu, step.prob)
        assert step.mu == pytest.approx(mu)
    assert len({round(s.mu, 6) for s in steps}) > 1  # it moves
    # branch at step 5 with another token: step 5 starts from step 4's mu again
    other = next(c.token_id for c in steps[5].candidates if c.token_id != steps[5].token_id)
    session.branch(5, other)
    redo = session.step()
    assert redo.stage_notes[-1].text.startswith(f"mu {steps[4].mu:.2f}")
    assert redo.mu == pytest.approx(rule.update_mu(steps[4].mu, redo.prob))
    # undo puts back the original steps, with their mu; the next step continues from it
    session.undo()
    assert session.mu == pytest.approx(steps[-1].mu)


def test_xtc_notes_and_seeded_reproducibility():
    settings = SamplerSettings(xtc_threshold=0.01, xtc_probability=0.7)
    _, a = run(settings, seed=5)
    _, b = run(settings, seed=5)
    assert [s.token_id for s in a] == [s.token_id for s in b]
    assert [s.stage_notes for s in a] == [s.stage_notes for s in b]
    texts = [n.text for s in a for n in s.stage_notes]
    assert any(t.startswith("XTC removed") for t in texts)
    assert any(t == "XTC did not fire" for t in texts)  # probability 0.7: not every step
    for step in a:
        if step.stage_notes[0].text.startswith("XTC removed"):
            cut = [c for c in step.candidates if c.cut_by.startswith("XTC")]
            assert cut and cut[0].raw_prob >= max(c.raw_prob for c in step.candidates) - 1e-9


def test_dry_and_penalties_show_before_and_after():
    settings = SamplerSettings(
        temperature=0.0, dry_multiplier=2.0, dry_allowed_length=2, frequency_penalty=0.5
    )
    _, steps = run(settings, n=4, top_n=384)  # every candidate, to find the penalised ones
    first = steps[0]
    # the prompt ends "abc abc abc abc ab": "c" would extend a 14-token repeat
    assert [n.text for n in first.stage_notes] == [f"DRY penalised 'c' −{2 * 1.75**12:.2f}"]
    c = next(c for c in first.candidates if c.text == "c")
    assert c.penalised_by.startswith("DRY") and c.before_p > c.after_p
    spaced = next(c for c in first.candidates if c.text == " ")
    assert spaced.penalised_by.startswith("frequency")  # penalised for its 4 occurrences
    assert spaced.before_p > spaced.after_p
    untouched = [c for c in first.candidates if not c.penalised_by]
    assert untouched and all(c.before_p is None for c in untouched)


def test_plain_runs_carry_no_notes():
    _, steps = run(SamplerSettings(temperature=0.7, top_k=20), n=3)
    assert all(s.stage_notes == () and s.mu is None for s in steps)
    assert all(c.before_p is None for s in steps for c in s.candidates)


def test_notes_and_penalties_survive_export_and_autosave():
    import json

    from engine.classroom.export import step_to_dict, steps_from_dict

    settings = SamplerSettings(
        dry_multiplier=2.0, frequency_penalty=0.5, xtc_threshold=0.01, xtc_probability=0.7,
        mirostat=2, mirostat_tau=3.0,
    )  # fmt: skip
    _, steps = run(settings, n=6, top_n=384)
    assert any(s.stage_notes for s in steps) and any(
        c.penalised_by for s in steps for c in s.candidates
    )
    data = json.loads(json.dumps({"steps": [step_to_dict(s) for s in steps]}))
    assert steps_from_dict(data) == steps


def test_greedy_entropy_is_plus_zero():
    import math

    _, steps = run(SamplerSettings(temperature=0.0), n=2)
    assert all(s.entropy == 0.0 and math.copysign(1.0, s.entropy) == 1.0 for s in steps)
