"""The lab against a real vLLM server (CPU build) serving the bundled SmolLM2 in float32.

Run with `make test-remote`. Figures (agreement, log-probability differences, tokens/s) are
printed and written to tests/artifacts/remote_figures.json. The last test kills the server."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pytest
import torch

from engine.decode.session import GenerationSession
from engine.drivers.compare import compare_served, format_table
from engine.models.catalog import open_model
from engine.records import ROW_PLAIN, ROW_SERVED_EXPLORE, ROW_SERVED_STREAM, MethodResult
from engine.sampling.settings import SamplerSettings
from engine.serve.remote import MODEL_NOT_FOUND, UNAUTHORIZED, UNREACHABLE, KeySource, RemoteError
from engine.serve.remote_session import RemoteSession, RemoteStreamSession, open_served

# The first test also waits for the server to start (up to DECODING_LAB_VLLM_START_TIMEOUT).
pytestmark = [pytest.mark.remote, pytest.mark.timeout(1500)]

ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
FIGURES: dict = {}
PROMPT = "Explain in two sentences why the sky is blue."
N_TOKENS = 48
# float32 on both sides, different kernels (vLLM's CPU attention and GEMMs vs PyTorch's):
# measured max |difference| of the top-20 log-probabilities was ~1e-4; 1e-3 leaves room.
LOGPROB_TOL = 1e-3
GREEDY = SamplerSettings(temperature=0.0)


def record(key: str, value) -> None:
    FIGURES[key] = value
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "remote_figures.json").write_text(json.dumps(FIGURES, indent=1))
    print(f"\n[{key}: {value}]")


@pytest.fixture(scope="module")
def local():
    return open_model("smollm2-135m", device="cpu", dtype="float32")


@pytest.fixture(scope="module")
def prompt_ids(local):
    return local.encode_prompt(PROMPT)


def explore(served, ids, settings=GREEDY, n=N_TOKENS) -> RemoteSession:
    session = RemoteSession(
        served.client, ids, settings, tokenizer=served.tokenizer,
        eos_token_ids=served.eos_token_ids, max_context=served.context_length,
    )  # fmt: skip
    for _ in session.stream(n):
        pass
    return session


def test_open_served_describes_the_model(served, vllm_server, local):
    assert served.context_length == 2048
    assert served.client.host.startswith("127.0.0.1:")
    assert served.tokenizer.get_vocab() == local.tokenizer.get_vocab()
    assert set(local.eos_token_ids) <= set(served.eos_token_ids)
    assert "vLLM at 127.0.0.1" in served.describe()
    assert served.server_kind == "vllm" and "'vllm'" in served.detected  # asked of the server
    assert "scoring a text: yes" in served.capability()
    if vllm_server.process is not None:
        record("server_start_s", round(vllm_server.started_s, 1))


def test_greedy_explore_equals_vllm_greedy_and_the_local_engine(served, local, prompt_ids):
    session = explore(served, prompt_ids)
    ours = session.generated_ids
    theirs = [t.token_id for t in served.client.complete(prompt_ids, len(ours), temperature=0.0)]
    assert ours == theirs, "explore mode at temperature 0 must be vLLM's own greedy completion"

    here = GenerationSession(
        local.model, prompt_ids, GREEDY, eos_token_ids=local.eos_token_ids, top_n=2
    )
    steps = list(here.stream(len(ours)))
    agree = sum(1 for a, b in zip(ours, here.generated_ids, strict=False) if a == b)
    record("greedy_agreement_local_vs_vllm", f"{agree}/{len(ours)}")
    if here.generated_ids != ours:
        # Allowed only at a numerical near-tie: the first difference must be between two
        # candidates whose local log-probabilities are within the tolerance.
        pairs = zip(ours, here.generated_ids, strict=False)
        i = next(i for i, (a, b) in enumerate(pairs) if a != b)
        top = steps[i].candidates
        gap = math.log(top[0].raw_prob) - math.log(top[1].raw_prob)
        assert gap < LOGPROB_TOL, f"diverged at {i} with a log-prob gap of {gap:.2e}"


def test_top20_logprobs_agree_with_local_fp32(served, local, prompt_ids):
    session = explore(served, prompt_ids, n=32)
    ids = torch.tensor([prompt_ids + session.generated_ids[:-1]])
    with torch.no_grad():
        logp = local.model(ids).logits[0].double().log_softmax(-1)  # [seq, vocab]
    worst, set_diffs = 0.0, 0
    for step in session.history:
        row = logp[len(prompt_ids) - 1 + step.index]
        theirs = {c.token_id: math.log(c.raw_prob) for c in step.candidates}
        assert len(theirs) == 20
        mine = torch.topk(row, 20)
        set_diffs += len(set(mine.indices.tolist()) ^ set(theirs)) // 2
        for tid, lp in theirs.items():
            worst = max(worst, abs(lp - float(row[tid])))
        assert step.other_p == pytest.approx(1 - sum(math.exp(v) for v in theirs.values()))
    record("top20_logprob_max_abs_diff", f"{worst:.2e}")
    record("top20_set_differences", f"{set_diffs} of {len(session.history) * 20}")
    assert worst <= LOGPROB_TOL
    assert set_diffs <= 2  # only a near-tie at the 20th place may swap


def test_branch_and_undo_give_exact_prefixes(served, prompt_ids):
    session = explore(served, prompt_ids, n=12)
    original = list(session.generated_ids)
    alt = session.history[4].candidates[1].token_id
    session.branch(4, alt)
    for _ in session.stream(6):
        pass
    assert session.generated_ids[:4] == original[:4] and session.generated_ids[4] == alt
    # the continuation is vLLM's own greedy continuation of exactly that prefix
    prefix = prompt_ids + original[:4] + [alt]
    theirs = [t.token_id for t in served.client.complete(prefix, 5, temperature=0.0)]
    assert session.generated_ids[5:] == theirs
    session.undo()
    assert session.generated_ids == original
    for _ in session.stream(3):  # carrying on after Undo continues the original run
        pass
    theirs = [t.token_id for t in served.client.complete(prompt_ids + original, 3, temperature=0)]
    assert session.generated_ids[12:] == theirs


def test_sampling_settings_run_our_chain(served, prompt_ids):
    settings = SamplerSettings(temperature=0.9, top_k=5, top_p=0.9, seed=7)
    a = explore(served, prompt_ids, settings, n=16)
    b = explore(served, prompt_ids, settings, n=16)
    assert a.generated_ids == b.generated_ids  # our seed, our draw
    assert all(s.survivors <= 5 and s.source == "sample" for s in a.history)
    assert all(abs(sum(c.prob for c in s.candidates) - 1) < 1e-5 for s in a.history)


def test_stream_mode(served, prompt_ids):
    common = dict(tokenizer=served.tokenizer, eos_token_ids=served.eos_token_ids, top_n=5)
    greedy = RemoteStreamSession(served.client, prompt_ids, GREEDY, **common)
    steps = list(greedy.stream(24))
    theirs = [t.token_id for t in served.client.complete(prompt_ids, 24, temperature=0.0)]
    assert greedy.generated_ids == theirs and greedy.server_requests == 1
    assert all(len(s.candidates) == 5 and s.source == "server" for s in steps)
    assert greedy.text == served.tokenizer.decode(theirs, skip_special_tokens=False)
    seeded = SamplerSettings(temperature=0.8, top_p=0.95, seed=11)
    runs = []
    for _ in range(2):
        session = RemoteStreamSession(served.client, prompt_ids, seeded, **common)
        for _ in session.stream(16):
            pass
        runs.append(session.generated_ids)
    assert runs[0] == runs[1]  # the server's seed makes its sampling repeatable


def test_wrong_key_and_wrong_model_are_named(vllm_server, hf_folder, prompt_ids, monkeypatch):
    if vllm_server.api_key is None:
        pytest.skip("the server was started without --api-key")
    monkeypatch.delenv("DECODING_LAB_API_KEY", raising=False)
    with pytest.raises(RemoteError) as err:
        open_served(vllm_server.url, str(hf_folder), KeySource("env"))
    assert err.value.kind == UNAUTHORIZED and err.value.status == 401
    monkeypatch.setenv("DECODING_LAB_API_KEY", "bad-key-91c2")
    with pytest.raises(RemoteError) as err:
        open_served(vllm_server.url, str(hf_folder))
    assert err.value.kind == UNAUTHORIZED and "bad-key-91c2" not in str(err.value)
    monkeypatch.setenv("DECODING_LAB_API_KEY", vllm_server.api_key)
    with pytest.raises(RemoteError) as err:
        open_served(vllm_server.url, "meta-llama/Llama-3.1-70B")
    assert err.value.kind == MODEL_NOT_FOUND
    assert "Llama-3.1-70B" in str(err.value) and str(hf_folder) in str(err.value)
    record("model_not_found_message", str(err.value))


def test_speed_explore_stream_and_local(served, local, prompt_ids):
    """One run, one prompt: explore (a request per token) vs stream (one request) vs the
    local engine on the same weights; greedy, so all three give the same tokens."""
    records = list(compare_served(served, prompt_ids, GREEDY, max_new_tokens=64, local=local))
    results = {r.method: r for r in records if isinstance(r, MethodResult)}
    print("\n" + format_table(list(results.values()), baseline=ROW_SERVED_EXPLORE))
    explore_r, stream_r = results[ROW_SERVED_EXPLORE], results[ROW_SERVED_STREAM]
    local_r = results[ROW_PLAIN]
    assert explore_r.identical_to_greedy and stream_r.identical_to_greedy
    record(
        "speed_tok_per_s",
        {
            "explore": round(explore_r.tokens_per_s, 1),
            "stream": round(stream_r.tokens_per_s, 1),
            "local": round(local_r.tokens_per_s, 1),
            "stream/explore": round(stream_r.tokens_per_s / explore_r.tokens_per_s, 2),
            "local/explore": round(local_r.tokens_per_s / explore_r.tokens_per_s, 2),
            "local_identical": local_r.identical_to_greedy,
            "tokens": explore_r.tokens,
        },
    )


def test_cli_generate_explore_and_stream(vllm_server, hf_folder, served, monkeypatch, capsys):
    from main import cli

    if vllm_server.api_key:
        monkeypatch.setenv("DECODING_LAB_API_KEY", vllm_server.api_key)
    base = ["generate", "--server", vllm_server.url, "--model", str(hf_folder)]
    base += ["--prompt", PROMPT, "--preset", "Greedy", "--max-new-tokens", "6"]
    texts = []
    for extra in ([], ["--stream"]):
        assert cli(base + extra) == 0
        out = capsys.readouterr()
        assert ("stream mode" if extra else "explore mode") in out.err
        assert "[6 tokens" in out.err
        texts.append(out.out.strip())
    assert texts[0] == texts[1] and texts[0]  # greedy: the same text both ways


@pytest.mark.kills_server
def test_killed_server_mid_run_keeps_the_tokens_so_far(served, vllm_server, prompt_ids):
    """Last (conftest orders it so): it kills the session's server."""
    if vllm_server.process is None:
        pytest.skip("an external server (DECODING_LAB_VLLM_URL) is not killed")
    common = dict(tokenizer=served.tokenizer, eos_token_ids=(), top_n=5)
    explorer = RemoteSession(served.client, prompt_ids, GREEDY, **common)
    for _ in explorer.stream(5):
        pass
    stream = RemoteStreamSession(served.client, prompt_ids, GREEDY, **common)
    got = []
    with pytest.raises(RemoteError) as err:
        for step in stream.stream(1500):
            got.append(step)
            if len(got) == 5:
                vllm_server.kill()
    assert err.value.kind == UNREACHABLE and "middle of the answer" in str(err.value)
    assert len(stream.history) >= 5 and stream.generated_ids == [s.token_id for s in got]
    record("stream_killed_message", str(err.value))
    served.client.retries = 1
    start = time.perf_counter()
    with pytest.raises(RemoteError) as err:
        next(iter(explorer.stream(1)))
    assert err.value.kind == UNREACHABLE and "Cannot reach" in str(err.value)
    assert len(explorer.history) == 5 and time.perf_counter() - start < 30
    record("explore_killed_message", str(err.value))
