"""llama.cpp's llama-server client and sessions against a replaying transport
(tests/served_fakes.py: the /completion, /v1/models, /tokenize and /detokenize formats of
tools/server/README.md, the sampler chain of common/sampling.cpp) on a tiny model: explore mode
equals our engine, llama.cpp's own sampler is asked with OUR settings and order (every server
default switched off), a stream learns the end of turn from the final event, and every reply
that is not a probability is refused with a message. The real llama-server is tested in
tests/remote/test_llama_server.py."""

from __future__ import annotations

import json
import math

import httpx
import pytest
import torch
from served_fakes import FakeLlamaServer, TinyModel

from engine.decode.session import GenerationSession
from engine.records import SERVED_STREAM
from engine.sampling.settings import SamplerSettings
from engine.serve.llama_server import NEUTRAL, LlamaServerClient, chain_parameters
from engine.serve.remote import BAD_RESPONSE, CONTEXT_EXCEEDED, RemoteError
from engine.serve.remote_session import RemoteSession, RemoteStreamSession
from tiny_models import VOCAB, tiny_llama

URL = "http://gpu-box:8080"
PROMPT = [2, 17, 99, 5, 240, 31]
GREEDY = SamplerSettings(temperature=0.0)


@pytest.fixture(scope="module")
def model() -> torch.nn.Module:
    return tiny_llama(seed=5)


def client_for(server, **kw) -> LlamaServerClient:
    return LlamaServerClient(URL, transport=httpx.MockTransport(server), backoff=0.0, **kw)


def bodies(server: FakeLlamaServer, path: str = "/completion") -> list[dict]:
    return [json.loads(r.content) for r in server.requests if r.url.path == path]


def test_the_model_context_and_vocabulary_come_from_v1_models(model):
    server = FakeLlamaServer(TinyModel(model), VOCAB, n_ctx=200)
    client = client_for(server)
    assert client.model == "/models/tiny.gguf" and client.max_model_len() == 200
    assert client.served_vocab() == VOCAB
    with pytest.raises(RemoteError, match="serves one model"):
        client_for(server, model="llama-70b")


def test_explore_greedy_equals_our_engine_and_sends_ids_and_neutral_samplers(model):
    server = FakeLlamaServer(TinyModel(model), VOCAB)
    remote = RemoteSession(client_for(server), PROMPT, GREEDY, n_logprobs=8, top_n=8)
    local = GenerationSession(model, PROMPT, GREEDY, eos_token_ids=[])
    for _ in remote.stream(12):
        pass
    for _ in local.stream(12):
        pass
    assert remote.generated_ids == local.generated_ids
    body = bodies(server)[-1]
    assert body["prompt"] == PROMPT + remote.generated_ids[:-1] and body["n_predict"] == 1
    assert body["n_probs"] == 8 and body["cache_prompt"] is True
    # the server's own defaults (top_k 40, top_p 0.95, min_p 0.05) must not sneak in
    assert all(body[k] == v for k, v in NEUTRAL.items() if k != "temperature")
    lp = TinyModel(model).logprobs(PROMPT)
    top = torch.topk(lp, 8)
    first = remote.history[0]
    assert [c.token_id for c in first.candidates] == top.indices.tolist()
    got = torch.tensor([c.raw_prob for c in first.candidates], dtype=torch.float64)
    torch.testing.assert_close(got, top.values.exp(), rtol=1e-6, atol=1e-9)


SETTINGS = [
    SamplerSettings(temperature=0.7, top_k=10, seed=1),
    SamplerSettings(temperature=1.2, top_k=30, top_p=0.8, seed=2),
    SamplerSettings(temperature=0.9, min_p=0.1, seed=3),
    SamplerSettings(temperature=0.8, top_k=20, top_p=0.9, order="temperature_last", seed=4),
]


@pytest.mark.parametrize("settings", SETTINGS, ids=lambda s: f"T{s.temperature}-{s.order}")
def test_llama_cpps_own_sampler_is_asked_with_our_settings_and_order(model, settings):
    """The server's post_sampling_probs (the fake runs llama.cpp's chain in the order the
    request names) beside our chain: equal when the request says what our chain does."""
    server = FakeLlamaServer(TinyModel(model), VOCAB)
    session = RemoteSession(client_for(server), PROMPT, settings, n_logprobs=40, top_n=10,
                            server_sampler=True)  # fmt: skip
    steps = list(session.stream(5))
    post = [b for b in bodies(server) if b.get("post_sampling_probs")]
    assert len(post) == 5 and session.server_requests == 10
    params, missing = chain_parameters(settings)
    assert missing == () and post[0]["samplers"] == params["samplers"]
    first = "temperature" if settings.order == "temperature_first" else "top_k"
    assert post[0]["samplers"][0] == first
    for step in steps:
        assert step.server_sampler == "llama.cpp"
        for c in step.candidates:
            assert c.server_prob == pytest.approx(c.prob, abs=1e-6)


def test_stages_llama_cpp_cannot_run_are_named_not_hidden(model):
    settings = SamplerSettings(temperature=0.8, top_k=10, eta_cutoff=3e-4, seed=2)
    server = FakeLlamaServer(TinyModel(model), VOCAB)
    session = RemoteSession(client_for(server), PROMPT, settings, server_sampler=True)
    step = next(iter(session.stream(1)))
    assert step.server_sampler == "llama.cpp (without eta_cutoff)"


def test_only_llama_server_offers_its_own_sampler(model):
    from test_remote import FakeServer
    from test_remote import client_for as vllm_client

    with pytest.raises(ValueError, match="only llama-server"):
        RemoteSession(vllm_client(FakeServer(model)), PROMPT, GREEDY, server_sampler=True)


def test_stream_learns_the_end_of_turn_from_the_final_event(model):
    tiny = TinyModel(model)
    server = FakeLlamaServer(tiny, VOCAB)
    local = GenerationSession(model, PROMPT, GREEDY, eos_token_ids=[])
    for _ in local.stream(6):
        pass
    server.eos = local.generated_ids[4]  # the 5th greedy token ends the answer ("eos")
    stream = RemoteStreamSession(client_for(server), PROMPT, GREEDY, top_n=5, eos_token_ids=())
    steps = list(stream.stream(20))
    assert stream.generated_ids == local.generated_ids[:5] and stream.stop_reason == "eos"
    assert steps[-1].is_eos and all(not s.after_sampler and s.prob == s.raw_prob for s in steps)
    body = bodies(server)[-1]
    assert body["stream"] is True and body["temperature"] == 0.0 and body["top_k"] == 0


def test_workbench_runs_llama_server_in_both_modes(model):
    from engine.drivers.workbench import RunRequest, Workbench
    from engine.serve.remote_session import RemoteBundle

    client = client_for(FakeLlamaServer(TinyModel(model), VOCAB))
    bundle = RemoteBundle(
        model=None, tokenizer=None, kind="decoder-only", device=torch.device("cpu"),
        dtype=torch.float32, name="x", source=client.base_url, context_length=256,
        eos_token_ids=(), client=client, n_logprobs=10, server_kind="llama-server",
        server_sampler=True,
    )  # fmt: skip
    bundle.encode_prompt = lambda text, chat=None: list(PROMPT)  # type: ignore[method-assign]
    bench = Workbench()
    bench.adopt(bundle)
    settings = SamplerSettings(temperature=0.0, max_new_tokens=4)
    steps = [r for r in bench.start(RunRequest("hi", settings=settings)) if hasattr(r, "token_id")]
    assert len(steps) == 4 and all(s.server_sampler for s in steps)
    request = RunRequest("hi", method=SERVED_STREAM, settings=settings)
    streamed = [r for r in bench.start(request) if hasattr(r, "token_id")]
    assert [s.token_id for s in streamed] == [s.token_id for s in steps]
    assert "llama-server" in bundle.describe() and "llama.cpp's own sampler" in bundle.capability()


def test_context_and_invalid_ids_are_named(model):
    client = client_for(FakeLlamaServer(TinyModel(model), VOCAB, n_ctx=32))
    with pytest.raises(RemoteError) as err:
        client.next_token(list(range(3, 40)), 5)
    assert err.value.kind == CONTEXT_EXCEEDED
    with pytest.raises(RemoteError) as err:
        client.tokenize("hi") and client.next_token([VOCAB + 5], 5)
    assert "invalid tokens" in str(err.value)


def _mangle(field: str, value):
    def change(answer: dict) -> dict:
        first = answer["completion_probabilities"][0]
        if field.startswith("top."):
            first["top_logprobs"][0][field[4:]] = value
        elif value is KeyError:
            del first[field]
        else:
            first[field] = value
        return answer

    return change


HOSTILE = {
    "logprob above 0": _mangle("logprob", 0.5),
    "top logprob above 0": _mangle("top.logprob", 2.0),
    "id beyond the served vocabulary": _mangle("id", VOCAB + 3),
    "negative id": _mangle("top.id", -4),
    "id of 10**12": _mangle("top.id", 10**12),
    "string logprob": _mangle("logprob", "-0.1"),
    "no top_logprobs": _mangle("top_logprobs", KeyError),
    "top_logprobs an object": _mangle("top_logprobs", {"id": 3}),
    "probabilities adding to 5": lambda a: {**a, "completion_probabilities": [
        {**a["completion_probabilities"][0], "top_logprobs": [
            {"id": i, "token": "x", "logprob": -0.1} for i in range(3, 8)]}]},
    "completion_probabilities a string": lambda a: {**a, "completion_probabilities": "none"},
}  # fmt: skip


@pytest.mark.parametrize("case", list(HOSTILE))
def test_hostile_completion_is_a_bad_response(model, case):
    server = FakeLlamaServer(TinyModel(model), VOCAB)
    client = client_for(server)
    client.id_limit = VOCAB  # open_served sets it from /v1/models' n_vocab
    server.mangle = HOSTILE[case]
    with pytest.raises(RemoteError) as err:
        client.next_token(PROMPT, 5)
    assert err.value.kind == BAD_RESPONSE and "broken" in str(err.value)


def test_post_sampling_probabilities_above_one_are_refused(model):
    server = FakeLlamaServer(TinyModel(model), VOCAB)

    def bad(answer: dict) -> dict:
        answer["completion_probabilities"][0]["top_probs"][0]["prob"] = 1.7
        return answer

    server.mangle = bad
    params, _ = chain_parameters(SamplerSettings(temperature=0.8, top_k=5))
    with pytest.raises(RemoteError) as err:
        client_for(server).sampler_probs(PROMPT, 5, params)
    assert err.value.kind == BAD_RESPONSE


def test_impossible_tokens_read_as_minus_infinity(model):
    """llama-server sends log(0) as the float's lowest value (server-task.cpp logarithm)."""
    server = FakeLlamaServer(TinyModel(model), VOCAB)

    def impossible_last(answer: dict) -> dict:  # the least likely listed (not the chosen one)
        answer["completion_probabilities"][0]["top_logprobs"][-1][
            "logprob"
        ] = -3.4028234663852886e38
        return answer

    server.mangle = impossible_last
    served = client_for(server).next_token(PROMPT, 5)
    assert served.top[-1].logprob == -math.inf
