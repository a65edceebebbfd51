"""Speculative decoding: exact under greedy, distribution-preserving under sampling."""

import itertools

import pytest
import torch
from transformers import ByT5Tokenizer, GPT2TokenizerFast

from engine import (
    GenerationSession,
    SamplerSettings,
    autoregressive_generate,
    autoregressive_generate_encoder_decoder,
)
from engine.decode.speculative import (
    DrafterMismatchError,
    ModelDrafter,
    NGramDrafter,
    SpeculativeSession,
    check_same_tokenizer,
)
from engine.drivers.compat import (
    MultinomialProcessor,
    ngram_assisted_speculative_generate,
    speculative_generate,
    speculative_generate_encoder_decoder,
)
from engine.records import SpeculativeReport, Step
from engine.sampling.sampler import SamplerState
from engine.step.stepper import ModelStepper
from tiny_models import tiny_gpt2, tiny_llama, tiny_t5

PROMPT = [5, 17, 33, 90, 41, 7, 5, 17, 33]


@pytest.mark.parametrize("use_cache", [True, False])
@pytest.mark.parametrize(
    "drafter_seed", [0, 1]
)  # 0: drafter == target (all accepted); 1: another model
def test_greedy_model_drafter_equals_plain_greedy(use_cache, drafter_seed):
    target, drafter = tiny_llama(0), tiny_llama(drafter_seed)
    plain = autoregressive_generate(
        PROMPT, target, max_gen_len=30, eos_tokens_id=[9999], use_cache=True
    )
    ids, rate = speculative_generate(
        PROMPT, drafter, target, gamma=4, max_gen_len=30, eos_tokens_id=[9999], use_cache=use_cache
    )
    assert ids == plain
    if drafter_seed == 0:
        assert rate == 1.0
    else:
        assert rate < 1.0  # rejections happened, so the cache rollback was exercised


def test_greedy_with_eos_and_first_target_off():
    target, drafter = tiny_gpt2(0), tiny_gpt2(3)
    free = autoregressive_generate(PROMPT, target, max_gen_len=20, eos_tokens_id=[9999])
    eos = [free[7]]
    plain = autoregressive_generate(PROMPT, target, max_gen_len=20, eos_tokens_id=eos)
    ids, _ = speculative_generate(
        PROMPT,
        drafter,
        target,
        gamma=3,
        max_gen_len=20,
        eos_tokens_id=eos,
        use_cache=True,
        first_target=False,
    )
    assert ids == plain and ids[-1] == eos[0]


@pytest.mark.parametrize("use_cache", [True, False])
def test_greedy_ngram_equals_plain_greedy(use_cache):
    target = tiny_llama(0)
    prompt = PROMPT * 3
    plain = autoregressive_generate(
        prompt, target, max_gen_len=40, eos_tokens_id=[9999], use_cache=True
    )
    drafter = NGramDrafter()
    calls = []
    original = drafter.propose
    drafter.propose = lambda *a, **k: calls.append(original(*a, **k)[0]) or (calls[-1], None)
    ids, _ = ngram_assisted_speculative_generate(
        prompt, drafter, target, gamma=5, max_gen_len=40, eos_tokens_id=[9999], use_cache=use_cache
    )
    assert ids == plain
    assert sum(len(c) for c in calls) > 0  # drafts were proposed (and mostly rejected)


def test_ngram_lookup_proposes_what_followed_the_latest_match():
    d = NGramDrafter(max_n=3, min_n=1)
    assert d.propose([1, 2, 3, 4, 9, 1, 2, 3], 3)[0] == [4, 9, 1]
    assert d.propose([1, 2, 3, 4, 9, 1, 2, 3, 7, 5, 2, 3], 2)[0] == [7, 5]  # latest "2 3" wins
    assert d.propose([5, 6, 7], 4)[0] == []  # nothing to match
    assert d.propose([1, 2, 3, 4, 9, 1], 2)[0] == [2, 3]  # rewound text: index rebuilt


@pytest.mark.parametrize("drafter_seed", [0, 2])
def test_greedy_encoder_decoder_equals_plain(drafter_seed):
    target, drafter = tiny_t5(0), tiny_t5(drafter_seed)
    plain = autoregressive_generate_encoder_decoder(
        PROMPT, target, max_gen_len=20, eos_tokens_id=[9999]
    )
    ids, rate = speculative_generate_encoder_decoder(
        PROMPT, drafter, target, gamma=3, max_gen_len=20, eos_tokens_id=[9999], use_cache=True
    )
    assert ids == plain
    ngram_ids, _ = ngram_assisted_speculative_generate(
        PROMPT, None, target, max_gen_len=20, eos_tokens_id=[9999], use_cache=True
    )
    assert ngram_ids == plain


def test_encoder_runs_once_per_model():
    target, drafter = tiny_t5(0), tiny_t5(2)
    calls = {"t": 0, "d": 0}
    target.get_encoder().register_forward_hook(lambda *a: calls.__setitem__("t", calls["t"] + 1))
    drafter.get_encoder().register_forward_hook(lambda *a: calls.__setitem__("d", calls["d"] + 1))
    speculative_generate_encoder_decoder(
        PROMPT, drafter, target, gamma=3, max_gen_len=15, eos_tokens_id=[9999]
    )
    assert calls == {"t": 1, "d": 1}


def test_stats_and_streamed_sources():
    target = tiny_llama(0)
    # the target drafting for itself: every draft is accepted, gamma + 1 tokens per target pass
    session = SpeculativeSession(
        target,
        PROMPT,
        ModelDrafter(target),
        SamplerSettings(temperature=0),
        eos_token_ids=[],
        gamma=4,
    )
    records = list(session.stream(30))
    steps = [r for r in records if isinstance(r, Step)]
    reports = [r for r in records if isinstance(r, SpeculativeReport)]
    stats = session.stats
    assert len(reports) == stats.target_passes and reports[-1] == stats.report()  # one a round
    assert len(steps) == 30 == stats.generated
    assert sum(s.source == "draft" for s in steps) == stats.accepted == stats.drafted
    assert [s.source for s in steps[:5]] == ["draft"] * 4 + ["target"]
    assert stats.target_passes == 6 and stats.target_passes_per_token == pytest.approx(0.2)
    assert stats.mean_accepted_length == 4.0 and stats.acceptance_by_position == [1.0] * 4
    assert stats.drafted_by_position[0] == stats.rounds


def test_stepper_crops_to_the_common_prefix():
    model = tiny_llama(0)
    a = PROMPT + [1, 2, 3, 4]
    b = PROMPT + [1, 9, 8]
    stepper = ModelStepper(model)
    stepper.logits(a)
    passes = stepper.forward_passes
    got = stepper.logits(b, keep=3)
    assert stepper.forward_passes == passes + 1 and len(stepper.cache) == len(b)
    fresh = ModelStepper(model, use_cache=False).logits(b, keep=3)
    torch.testing.assert_close(got, fresh, atol=1e-5, rtol=1e-4)


def test_mismatched_drafter_is_refused():
    with pytest.raises(DrafterMismatchError, match="vocabulary"):
        speculative_generate(PROMPT, tiny_llama(0, vocab=97), tiny_llama(0))
    byt5 = ByT5Tokenizer()
    with pytest.raises(DrafterMismatchError, match="different tokenizer"):
        check_same_tokenizer(byt5, _small_bpe())
    check_same_tokenizer(byt5, ByT5Tokenizer())  # same tokenizer: fine


def _small_bpe():
    from tokenizers import Tokenizer, models

    vocab = {"a": 0, "b": 1, "ab": 2}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[("a", "b")]))
    return GPT2TokenizerFast(tokenizer_object=tok)


def _exact_joint(model, prompt, vocab):
    with torch.no_grad():
        p1 = model(torch.tensor([prompt])).logits[0, -1].softmax(-1)
        joint = torch.zeros(vocab, vocab)
        for t in range(vocab):
            p2 = model(torch.tensor([prompt + [t]])).logits[0, -1].softmax(-1)
            joint[t] = p1[t] * p2
    return joint


@pytest.mark.parametrize("kind", ["model", "ngram"])
def test_sampling_preserves_the_target_distribution(kind):
    vocab = 6
    target = tiny_llama(0, vocab=vocab)
    prompt = [1, 2, 3, 1, 2] if kind == "ngram" else [1, 2]
    exact = _exact_joint(target, prompt, vocab)
    runs = 2500
    counts = torch.zeros(vocab, vocab)
    settings = SamplerSettings(temperature=1.0)
    draft_model = tiny_llama(5, vocab=vocab)
    for seed in range(runs):
        drafter = ModelDrafter(draft_model) if kind == "model" else NGramDrafter(max_n=2)
        s = SpeculativeSession(
            target, prompt, drafter, settings, eos_token_ids=[], gamma=2, seed=seed
        )
        t1, t2 = s.run(2)
        counts[t1, t2] += 1
    freq = counts / runs
    tv = 0.5 * (freq - exact).abs().sum().item()
    # 36 outcomes, 2500 draws: sampling noise gives TV around 0.04; a biased rule gives more.
    assert tv < 0.07, tv
    # chi-square against the exact joint (cells with enough mass)
    mask = exact * runs >= 5
    chi2 = (((counts - exact * runs) ** 2) / (exact * runs))[mask].sum().item()
    dof = int(mask.sum()) - 1
    assert chi2 < dof + 5 * (2 * dof) ** 0.5, (chi2, dof)


def test_sampling_with_seed_processor_runs_and_reports_rate():
    target, drafter = tiny_llama(0), tiny_llama(0)
    ids, rate = speculative_generate(
        PROMPT,
        drafter,
        target,
        gamma=3,
        max_gen_len=12,
        eos_tokens_id=[9999],
        logits_processor=MultinomialProcessor(1.0, seed=1),
        use_cache=True,
    )
    assert len(ids) == 12 and rate > 0.9  # same model drafting: p == q, nearly all accepted


def test_every_pair_of_cache_modes_agree():
    target, drafter = tiny_llama(0), tiny_llama(1)
    outs = [
        speculative_generate(
            PROMPT, drafter, target, gamma=g, max_gen_len=15, eos_tokens_id=[9999], use_cache=c
        )[0]
        for g, c in itertools.product((1, 3, 6), (True, False))
    ]
    assert all(o == outs[0] for o in outs)


@pytest.mark.parametrize("drafter", ["ngram", "model"])
def test_mirostat_mu_moves_with_every_token_of_a_speculative_run(drafter):
    """Each verified position is filtered with the mu the tokens before it leave, as a plain
    session would: checked against the chain run token by token on model.forward."""
    from engine.sampling.build import build_chain

    model = tiny_llama(0)
    settings = SamplerSettings(
        temperature=1.0, top_k=0, top_p=1.0, mirostat=2, mirostat_tau=3.0, mirostat_eta=0.5,
        max_new_tokens=24, min_new_tokens=24, seed=3,
    )  # fmt: skip
    draft = NGramDrafter() if drafter == "ngram" else ModelDrafter(tiny_llama(0))
    spec = SpeculativeSession(model, PROMPT, draft, settings, eos_token_ids=[], gamma=3, seed=3)
    steps = [r for r in spec.stream() if isinstance(r, Step)]
    assert len(steps) == 24 and spec.stats.drafted > 0  # rows after drafts were verified
    if drafter == "model":  # the target's own weights: drafts get accepted
        assert sum(s.source == "draft" for s in steps) > 5
    chain = build_chain(settings)
    mu, ids = 2 * 3.0, list(PROMPT)
    for step in steps:
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0, -1:].float()
        chain.prepare(None)
        chain.restore(SamplerState(mu))
        probs, _ = chain.probs(None, logits)
        assert probs[0, step.token_id].item() == pytest.approx(step.prob, abs=1e-5)
        assert int((probs[0] > 0).sum()) == step.survivors
        mu = chain.mirostat.update_mu(mu, step.prob)
        assert step.mu == pytest.approx(mu)
        ids.append(step.token_id)
    assert len({round(s.mu, 3) for s in steps}) > 5  # it did move
    assert steps[0].stage_notes[0].text.startswith("mu 6.00: kept")  # notes name each row's mu
    assert steps[1].stage_notes[0].text.startswith(f"mu {steps[0].mu:.2f}: kept")


@pytest.mark.parametrize(
    "stage",
    [dict(mirostat=1), dict(xtc_probability=0.5, xtc_threshold=0.05), dict(top_n_sigma=1.0),
     dict(dynatemp_range=0.5), dict(eta_cutoff=0.01), dict(dry_multiplier=0.8),
     dict(repetition_penalty=1.3)],
    ids=["mirostat", "xtc", "top_n_sigma", "dynatemp", "eta", "dry", "penalty"],
)  # fmt: skip
def test_stages_with_notes_run_in_speculative_sessions(stage):
    """The notes and penalty columns of a verified row reach its step (the stages with notes
    crashed the run with an IndexError: mirostat, XTC, top-n-sigma, dynamic temperature,
    eta cutoff)."""
    settings = SamplerSettings(temperature=1.0, max_new_tokens=12, min_new_tokens=12, **stage)
    spec = SpeculativeSession(
        tiny_llama(0), PROMPT, ModelDrafter(tiny_llama(0)), settings, eos_token_ids=[], gamma=3
    )
    steps = [r for r in spec.stream() if isinstance(r, Step)]
    assert len(steps) == 12 and any(s.source == "draft" for s in steps)
    plain = GenerationSession(tiny_llama(0), PROMPT, settings, eos_token_ids=[])
    first = next(iter(plain.stream(1)))  # the draws differ; the first row's filter does not
    assert {n.stage for s in steps for n in s.stage_notes} == {n.stage for n in first.stage_notes}
    if "xtc_probability" not in stage:  # XTC's note depends on its draw
        assert steps[0].stage_notes == first.stage_notes
        assert [c.token_id for c in steps[0].candidates] == [c.token_id for c in first.candidates]
        assert [c.prob for c in steps[0].candidates] == pytest.approx(
            [c.prob for c in first.candidates], abs=1e-6
        )
        # what the penalties did to each candidate (the columns read at the top-N ids)
        ours = [(c.cut_by, c.penalised_by) for c in steps[0].candidates]
        assert ours == [(c.cut_by, c.penalised_by) for c in first.candidates]
        for a, b in zip(steps[0].candidates, first.candidates, strict=True):
            assert (a.before_p is None) == (b.before_p is None)
            if a.before_p is not None:
                assert (a.before_p, a.after_p) == pytest.approx((b.before_p, b.after_p), abs=1e-6)
        if "repetition_penalty" in stage:  # the columns reach later rows' steps too
            assert any(c.penalised_by and c.before_p > 0 for s in steps[1:] for c in s.candidates)


class _Logits:
    """A draft stepper whose rows are ``fill`` everywhere (NaN: a broken draft model)."""

    def __init__(self, inner, fill: float) -> None:
        self.inner, self.fill = inner, fill

    def logits(self, ids, keep=1):
        return torch.full_like(self.inner.logits(ids, keep), self.fill)

    def __getattr__(self, name):
        return getattr(self.inner, name)


@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_a_draft_model_gone_nan_drafts_as_a_flat_one(temperature):
    """A draft row of NaN is read as zeros (a flat draft): the same tokens and records as a
    draft model whose logits are all zero, and, greedy, the target's own tokens; never a
    silent token 0 from a NaN residual."""
    settings = SamplerSettings(temperature=temperature, max_new_tokens=10, seed=4)
    runs = []
    for fill in (float("nan"), 0.0):
        drafter = ModelDrafter(tiny_llama(1))
        drafter.stepper = _Logits(drafter.stepper, fill)
        spec = SpeculativeSession(tiny_llama(0), PROMPT, drafter, settings, eos_token_ids=[])
        runs.append(spec.run(10))
    assert runs[0] == runs[1] and len(runs[0]) == 10
    if temperature == 0.0:
        plain = GenerationSession(tiny_llama(0), PROMPT, settings, eos_token_ids=[])
        assert runs[0] == [s.token_id for s in plain.stream()]
