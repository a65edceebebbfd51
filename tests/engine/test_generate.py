"""Generation equivalence: seed functions, streaming API and transformers.generate agree."""

import pytest
import torch
from transformers import ByT5Tokenizer

from engine import (
    EmptyPromptError,
    GenerationSession,
    IncrementalDetokenizer,
    SamplerSettings,
    autoregressive_generate,
    autoregressive_generate_encoder_decoder,
)
from tiny_models import FACTORIES

PROMPT = [5, 17, 33, 90, 41, 7]
GREEDY = SamplerSettings(temperature=0.0, max_new_tokens=24)


def hf_greedy(model, prompt, n, eos):
    out = model.generate(
        torch.tensor([prompt]),
        max_new_tokens=n,
        do_sample=False,
        eos_token_id=eos,
        pad_token_id=0,
        num_beams=1,
    )[0].tolist()
    return out if model.config.is_encoder_decoder else out[len(prompt) :]


def eos_pair(model, enc):
    """Two EOS ids that really occur mid-run: the 7th and 10th tokens of a free run."""
    free = hf_greedy(model, PROMPT, 24, eos=None)
    start = 1 if enc else 0
    return [free[start + 9], free[start + 6]]


@pytest.fixture(params=list(FACTORIES))
def model(request):
    return FACTORIES[request.param]()


@pytest.mark.parametrize("use_cache", [True, False])
def test_seed_functions_equal_transformers_generate(model, use_cache):
    enc = model.config.is_encoder_decoder
    for eos in ([9999], eos_pair(model, enc)):  # never-hit EOS, then two real ones
        ref = hf_greedy(model, PROMPT, 24, eos)
        fn = autoregressive_generate_encoder_decoder if enc else autoregressive_generate
        ours = fn(PROMPT, model, max_gen_len=24, eos_tokens_id=eos, use_cache=use_cache)
        assert ours == ref


def test_streaming_equals_transformers_generate(model):
    enc = model.config.is_encoder_decoder
    for eos in ([9999], eos_pair(model, enc)):
        ref = hf_greedy(model, PROMPT, 24, eos)
        session = GenerationSession(model, PROMPT, GREEDY, eos_token_ids=eos)
        ids = [s.token_id for s in session.stream()]
        if enc:
            ids = [model.config.decoder_start_token_id] + ids
        assert ids == ref
        if len(ref) < 24 + enc:
            assert session.history[-1].is_eos and session.stop_reason == "eos"


def test_streaming_with_penalties_equals_transformers(model):
    enc = model.config.is_encoder_decoder
    ref = model.generate(
        torch.tensor([PROMPT]),
        max_new_tokens=20,
        do_sample=False,
        repetition_penalty=1.5,
        no_repeat_ngram_size=2,
        eos_token_id=None,
        pad_token_id=0,
    )[0].tolist()
    ref = ref[1:] if enc else ref[len(PROMPT) :]
    settings = GREEDY.with_(repetition_penalty=1.5, no_repeat_ngram_size=2, max_new_tokens=20)
    session = GenerationSession(model, PROMPT, settings, eos_token_ids=[])
    assert [s.token_id for s in session.stream()] == ref


@pytest.mark.parametrize("name", ["t5", "bart"])
def test_encoder_runs_once(name):
    model = FACTORIES[name]()
    calls = []
    handle = model.get_encoder().register_forward_hook(lambda *a: calls.append(1))
    try:
        for use_cache in (True, False):
            calls.clear()
            out = autoregressive_generate_encoder_decoder(
                PROMPT, model, max_gen_len=12, eos_tokens_id=[9999], use_cache=use_cache
            )
            assert len(out) == 13 and len(calls) == 1
        calls.clear()
        session = GenerationSession(
            model, PROMPT, GREEDY.with_(max_new_tokens=12), eos_token_ids=[]
        )
        assert len(list(session.stream())) == 12
        assert len(calls) == 1
    finally:
        handle.remove()


def test_encoder_decoder_output_starts_with_start_id():
    model = FACTORIES["t5"]()
    out = autoregressive_generate_encoder_decoder(PROMPT, model, max_gen_len=5, eos_tokens_id=1)
    assert out[0] == model.config.decoder_start_token_id
    assert len(out) <= 6


def test_same_seed_same_tokens_and_different_seed_differs():
    model = FACTORIES["llama"]()
    s = SamplerSettings(temperature=1.5, max_new_tokens=30, seed=7)

    def run(st):
        return [x.token_id for x in GenerationSession(model, PROMPT, st, eos_token_ids=[]).stream()]

    assert run(s) == run(s)
    assert run(s) != run(s.with_(seed=8))


def test_records_are_consistent():
    model = FACTORIES["llama"]()
    s = SamplerSettings(temperature=0.8, top_k=10, max_new_tokens=15, seed=1)
    session = GenerationSession(model, PROMPT, s, eos_token_ids=[], top_n=12)
    for step in session.stream():
        assert len(step.candidates) == 12
        raws = [c.raw_prob for c in step.candidates]
        assert raws == sorted(raws, reverse=True)
        assert 1 <= step.survivors <= 10
        assert sum(1 for c in step.candidates if c.prob > 0) == step.survivors
        assert 0 < step.prob <= 1 and 0 < step.raw_prob <= 1
        assert step.rank <= 10  # top-k 10 means the chosen token ranks in the top 10
        if step.rank <= 12:
            assert step.candidates[step.rank - 1].token_id == step.token_id
        assert step.entropy <= step.entropy_raw + 1e-6
        assert step.step_time > 0 and step.tokens_per_s > 0


def test_greedy_record_probabilities():
    model = FACTORIES["gpt2"]()
    session = GenerationSession(model, PROMPT, GREEDY, eos_token_ids=[])
    step = session.step()
    assert step.rank == 1 and step.prob == 1.0 and step.survivors == 1
    with torch.no_grad():
        logits = model(torch.tensor([PROMPT])).logits[0, -1]
    assert step.raw_prob == pytest.approx(float(logits.softmax(-1).max()), rel=1e-5)


def test_settings_change_takes_effect_next_token():
    model = FACTORIES["llama"]()
    session = GenerationSession(
        model, PROMPT, SamplerSettings(temperature=1.0, seed=3), eos_token_ids=[]
    )
    it = session.stream(10)
    first = [next(it) for _ in range(3)]
    session.settings = GREEDY
    rest = list(it)
    assert all(s.source == "sample" for s in first)
    assert all(s.source == "greedy" and s.survivors == 1 for s in rest)
    assert len(rest) == 7


def test_force_next_token():
    model = FACTORIES["llama"]()
    session = GenerationSession(model, PROMPT, GREEDY, eos_token_ids=[])
    session.step()
    session.force_next(42)
    step = session.step()
    assert step.token_id == 42 and step.forced and step.source == "forced"
    with pytest.raises(ValueError):
        session.force_next(10**6)


@pytest.mark.parametrize("name", ["llama", "t5"])
def test_branch_reuses_cache_and_matches_a_fresh_run(name):
    model = FACTORIES[name]()
    settings = SamplerSettings(temperature=1.2, seed=5, max_new_tokens=20)
    session = GenerationSession(model, PROMPT, settings, eos_token_ids=[])
    original = [s.token_id for s in session.stream()]
    passes = session.forward_passes
    k = 8
    alt = next(c.token_id for c in session.history[k].candidates if c.token_id != original[k])
    session.branch(k, alt)
    branched = [s.token_id for s in session.stream(6)]
    assert session.generated_ids[:k] == original[:k]  # same prefix
    assert branched[0] == alt and session.history[k].forced
    # one pass recomputes step k's distribution, then one per token: the prompt is not re-run
    assert session.forward_passes - passes == 6
    # a fresh session forced the same way gives the same tokens (the cache was cropped right)
    fresh = GenerationSession(model, PROMPT, settings, eos_token_ids=[])
    fresh_ids = [s.token_id for s in fresh.stream(k)]
    fresh.force_next(alt)
    fresh_ids += [s.token_id for s in fresh.stream(6)]
    assert fresh_ids == session.generated_ids
    # the recomputed distribution at the branch point matches the original step's
    assert session.history[k].candidates[0].raw_prob == pytest.approx(
        fresh.history[k].candidates[0].raw_prob, rel=1e-4
    )


def test_rewind_then_continue_reproduces_the_run():
    model = FACTORIES["gpt2"]()
    settings = SamplerSettings(temperature=1.0, seed=11, max_new_tokens=16)
    session = GenerationSession(model, PROMPT, settings, eos_token_ids=[])
    first = [s.token_id for s in session.stream()]
    session.rewind(5)
    again = [s.token_id for s in session.stream(11)]
    assert first == session.generated_ids and again == first[5:]


def test_max_new_tokens_respected_and_continue():
    model = FACTORIES["llama"]()
    session = GenerationSession(model, PROMPT, GREEDY.with_(max_new_tokens=7), eos_token_ids=[])
    assert len(list(session.stream())) == 7 and session.stop_reason == "max_new_tokens"
    assert len(list(session.stream(3))) == 3
    assert len(session.generated_ids) == 10
    assert [s.index for s in session.history] == list(range(10))


def test_stop_by_closing_the_generator():
    model = FACTORIES["llama"]()
    session = GenerationSession(model, PROMPT, GREEDY, eos_token_ids=[])
    it = session.stream()
    next(it)
    next(it)
    it.close()
    assert session.stop_reason == "stopped" and len(session.history) == 2


def test_min_new_tokens_suppresses_eos_in_session():
    model = FACTORIES["llama"]()
    eos = hf_greedy(model, PROMPT, 5, eos=None)[2]
    session = GenerationSession(model, PROMPT, GREEDY.with_(min_new_tokens=6), eos_token_ids=[eos])
    steps = list(session.stream())
    assert len(steps) >= 6 and all(not s.is_eos for s in steps[:6])


def test_context_length_stops_generation():
    model = FACTORIES["gpt2"]()
    session = GenerationSession(model, PROMPT, GREEDY.with_(max_new_tokens=500), eos_token_ids=[])
    steps = list(session.stream())
    assert len(PROMPT) + len(steps) == model.config.n_positions
    assert session.stop_reason == "context"


class ReplacingByteTokenizer:
    """Decodes like GPT-2's byte-level BPE: an incomplete character becomes U+FFFD."""

    def decode(self, ids, skip_special_tokens=False):
        return bytes(ids).decode("utf-8", errors="replace")


@pytest.mark.parametrize(
    "tok", [ByT5Tokenizer(), ReplacingByteTokenizer()], ids=["byt5", "replacing"]
)
def test_incremental_detokenizer_multibyte(tok):
    text = "héllo wörld — 東京 🚀!"
    if isinstance(tok, ReplacingByteTokenizer):
        ids = list(text.encode("utf-8"))
    else:
        ids = tok(text, add_special_tokens=False)["input_ids"]
    assert len(ids) > len(text)  # multi-byte characters are split across several tokens
    detok = IncrementalDetokenizer(tok)
    pieces = [detok.push(i) for i in ids]
    assert "".join(pieces) == text
    assert all("\ufffd" not in p for p in pieces)
    assert "" in pieces  # some tokens only carry part of a character
    # rewinding to any point and pushing the rest again gives the same pieces
    for cut in (2, 4, 9, 20):
        again = IncrementalDetokenizer(tok)
        for i in ids[: cut + 5]:
            again.push(i)
        again.truncate(cut)
        assert [again.push(i) for i in ids[cut:]] == pieces[cut:]


def test_session_text_with_tokenizer_reassembles():
    tok = ByT5Tokenizer()
    model = FACTORIES["llama"]()
    session = GenerationSession(
        model,
        PROMPT,
        SamplerSettings(temperature=1.0, seed=2, max_new_tokens=40),
        tokenizer=tok,
        eos_token_ids=[],
    )
    steps = list(session.stream())
    assert session.text == tok.decode(
        [s.token_id for s in steps], skip_special_tokens=False
    ).rstrip("\ufffd")


def test_empty_prompt_is_refused():
    model = FACTORIES["llama"]()
    with pytest.raises(EmptyPromptError):
        GenerationSession(model, [], GREEDY)
    with pytest.raises(EmptyPromptError):
        autoregressive_generate([], model)
    with pytest.raises(EmptyPromptError):
        autoregressive_generate_encoder_decoder([], FACTORIES["t5"]())


def test_debug_prints_each_step(capsys):
    model = FACTORIES["llama"]()
    out = autoregressive_generate(PROMPT, model, max_gen_len=4, eos_tokens_id=[9999], debug=True)
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 4 and all("p=" in line for line in lines)
    assert str(out[0]) in lines[0]


@pytest.mark.parametrize("name", ["llama", "gpt2"])
def test_long_prompt_is_read_in_chunks_with_progress_and_same_tokens(name, monkeypatch):
    import engine.step.stepper
    from engine.records import Progress, Step

    model = FACTORIES[name]()
    prompt = [(i * 37) % 200 + 3 for i in range(150)]
    whole = GenerationSession(model, prompt, GREEDY.with_(max_new_tokens=5), eos_token_ids=[])
    expected = [r.token_id for r in whole.stream() if isinstance(r, Step)]
    monkeypatch.setattr(engine.step.stepper, "PREFILL_CHUNK", 40)
    session = GenerationSession(model, prompt, GREEDY.with_(max_new_tokens=5), eos_token_ids=[])
    records = list(session.stream())
    progress = [r for r in records if isinstance(r, Progress)]
    steps = [r for r in records if isinstance(r, Step)]
    assert [s.token_id for s in steps] == expected
    assert len(progress) == 3 and progress[-1].fraction == pytest.approx(120 / 149)
    assert [s.prefill for s in steps] == [True, False, False, False, False]
    summary = session.summary()
    assert summary.prompt_tokens == len(prompt)
    assert summary.first_token_s is not None and summary.first_token_s >= steps[0].step_time
    # The reported rate counts decode steps only: the prompt's pass is left out.
    decode = [s.step_time for s in steps[1:]]
    assert summary.tokens_per_s == pytest.approx(len(decode) / sum(decode))
