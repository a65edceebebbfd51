"""The served-model client and sessions against httpx.MockTransport: error mapping, retries,
the API key kept out of every string, and explore mode's chain against our local chain on the
same logits. A tiny local model answers as the server would (vLLM's completions format); the
real vLLM server is tested in tests/remote."""

from __future__ import annotations

import json
import logging
import math

import httpx
import keyring
import pytest
import torch
from keyring.backend import KeyringBackend

from engine.decode.session import GenerationSession
from engine.drivers.workbench import RunRequest, Workbench
from engine.records import SERVED_STREAM, Step
from engine.sampling.build import build_chain
from engine.sampling.settings import SamplerSettings
from engine.serve.remote import (
    BAD_RESPONSE,
    CONTEXT_EXCEEDED,
    LOGPROBS_NOT_ALLOWED,
    MODEL_NOT_FOUND,
    SERVER_ERROR,
    UNAUTHORIZED,
    UNREACHABLE,
    KeySource,
    RemoteClient,
    RemoteError,
    normalise_url,
)
from engine.serve.remote_session import RemoteBundle, RemoteSession, RemoteStreamSession, top_n_math
from tiny_models import tiny_llama

KEY = "sk-test-7f3a9c-never-print-me"
URL = "http://lab.example:8000/v1"
MODEL = "tiny-llama"


class FakeServer:
    """Answers /v1/models and /v1/completions from a local model, as vLLM does with
    return_tokens_as_token_ids (greedy when temperature is 0, else a seeded draw)."""

    def __init__(self, model: torch.nn.Module, max_logprobs: int = 20, key: str | None = None):
        self.model, self.max_logprobs, self.key = model, max_logprobs, key
        self.requests: list[httpx.Request] = []
        self.fail_next: list[int] = []  # status codes to answer before the real answers

    def logprobs(self, ids: list[int]) -> torch.Tensor:
        with torch.no_grad():
            logits = self.model(torch.tensor([ids])).logits[0, -1].double()
        return logits.log_softmax(-1)  # [vocab]

    def position(self, ids: list[int], n: int, token: int | None = None) -> dict:
        lp = self.logprobs(ids)
        top = torch.topk(lp, n)
        chosen = int(top.indices[0]) if token is None else token
        return {
            "token": f"token_id:{chosen}",
            "logprob": float(lp[chosen]),
            "top": {f"token_id:{int(i)}": float(v) for v, i in zip(*top, strict=True)},
        }

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if self.fail_next:
            return httpx.Response(self.fail_next.pop(0), json={"error": {"message": "busy"}})
        if self.key and request.headers.get("authorization") != f"Bearer {self.key}":
            return httpx.Response(401, json={"error": "Unauthorized"})
        if request.url.path == "/v1/models":
            return httpx.Response(200, json={"data": [{"id": MODEL, "max_model_len": 256}]})
        body = json.loads(request.content)
        if body["model"] != MODEL:
            message = f"The model `{body['model']}` does not exist."
            return httpx.Response(404, json={"error": {"message": message, "code": 404}})
        if body["logprobs"] > self.max_logprobs:
            message = f"Requested sample logprobs of {body['logprobs']}, which is greater than "
            message += f"max allowed: {self.max_logprobs}"
            return httpx.Response(400, json={"error": {"message": message}})
        ids = list(body["prompt"])
        if len(ids) + body["max_tokens"] > 256:
            message = "This model's maximum context length is 256 tokens."
            return httpx.Response(400, json={"error": {"message": message}})
        gen = torch.Generator().manual_seed(body.get("seed", 0))
        positions = []
        for _ in range(body["max_tokens"]):
            token = None
            if body.get("temperature", 1.0) > 0:
                lp = self.logprobs(ids) / body["temperature"]
                token = int(torch.multinomial(lp.softmax(-1), 1, generator=gen))
            positions.append(self.position(ids, body["logprobs"], token))
            ids.append(int(positions[-1]["token"].split(":")[1]))
        if body.get("stream"):
            lines = [
                "data: "
                + json.dumps(
                    {"choices": [_choice([p], "length" if i == len(positions) - 1 else None)]}
                )
                for i, p in enumerate(positions)
            ]
            text = "\n\n".join([*lines, "data: [DONE]"]) + "\n\n"
            return httpx.Response(200, text=text, headers={"content-type": "text/event-stream"})
        return httpx.Response(200, json={"choices": [_choice(positions, "length")]})


def _choice(positions: list[dict], finish: str | None) -> dict:
    return {
        "index": 0,
        "text": "",
        "finish_reason": finish,
        "logprobs": {
            "tokens": [p["token"] for p in positions],
            "token_logprobs": [p["logprob"] for p in positions],
            "top_logprobs": [p["top"] for p in positions],
            "text_offset": [0] * len(positions),
        },
    }


@pytest.fixture(scope="module")
def model() -> torch.nn.Module:
    return tiny_llama(seed=3)


def client_for(handler, **kwargs) -> RemoteClient:
    kwargs.setdefault("backoff", 0.0)
    return RemoteClient(URL, MODEL, transport=httpx.MockTransport(handler), **kwargs)


PROMPT = [2, 17, 99, 5, 240, 31]


# -- the client ------------------------------------------------------------------------------


def test_url_forms_and_model_listing(model):
    assert normalise_url("http://h:8000/v1/") == "http://h:8000"
    assert normalise_url("h:8000") == "http://h:8000"
    with pytest.raises(ValueError):
        normalise_url("ftp://h")
    server = FakeServer(model)
    client = RemoteClient(URL, transport=httpx.MockTransport(server))  # model from /v1/models
    assert client.model == MODEL and client.max_model_len() == 256
    assert server.requests[0].url == "http://lab.example:8000/v1/models"


def test_next_token_is_the_servers_top_n(model):
    server = FakeServer(model)
    served = client_for(server).next_token(PROMPT, 7)
    lp = server.logprobs(PROMPT)
    want = torch.topk(lp, 7)
    assert [t.token_id for t in served.top] == want.indices.tolist()
    torch.testing.assert_close(
        torch.tensor([t.logprob for t in served.top], dtype=torch.float64),
        want.values,
        rtol=0,
        atol=1e-12,
    )
    assert served.token_id == int(lp.argmax())
    body = json.loads(server.requests[-1].content)
    assert body["prompt"] == PROMPT and body["max_tokens"] == 1 and body["temperature"] == 0
    assert body["return_tokens_as_token_ids"] is True


@pytest.mark.parametrize(
    ("status", "kind"), [(401, UNAUTHORIZED), (403, UNAUTHORIZED), (500, SERVER_ERROR)]
)
def test_status_errors_have_a_kind_and_a_message(model, status, kind):
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, json={"error": {"message": "nope"}})

    with pytest.raises(RemoteError) as err:
        client_for(handler).models()
    assert err.value.kind == kind and err.value.status == status
    assert str(err.value)  # a sentence for the dialog


def test_wrong_model_logprobs_and_context_are_named(model):
    server = FakeServer(model, max_logprobs=5)
    wrong = RemoteClient(URL, "llama-70b", transport=httpx.MockTransport(server))
    with pytest.raises(RemoteError) as err:
        wrong.next_token(PROMPT, 5)
    assert err.value.kind == MODEL_NOT_FOUND
    assert "llama-70b" in str(err.value) and MODEL in str(err.value)  # lists what it serves
    client = client_for(server)
    with pytest.raises(RemoteError) as err:
        client.next_token(PROMPT, 20)
    assert err.value.kind == LOGPROBS_NOT_ALLOWED and "--max-logprobs" in str(err.value)
    with pytest.raises(RemoteError) as err:
        client.next_token(list(range(3, 259)), 5)
    assert err.value.kind == CONTEXT_EXCEEDED


def test_retries_with_backoff_on_429_and_5xx_then_succeeds(model, monkeypatch):
    slept: list[float] = []
    monkeypatch.setattr("engine.serve.remote.time.sleep", slept.append)
    server = FakeServer(model)
    client = RemoteClient(URL, MODEL, transport=httpx.MockTransport(server), backoff=0.5)
    server.fail_next = [429, 503, 502]
    served = client.next_token(PROMPT, 3)
    assert served.token_id == int(server.logprobs(PROMPT).argmax())
    assert slept == [0.5, 1.0, 2.0]  # exponential
    assert len(server.requests) == 4
    server.fail_next = [500] * 10
    with pytest.raises(RemoteError) as err:
        client.next_token(PROMPT, 3)
    assert err.value.kind == SERVER_ERROR and len(server.requests) == 4 + 4  # 1 + 3 retries


def test_retry_after_header_is_honoured(model, monkeypatch):
    slept: list[float] = []
    monkeypatch.setattr("engine.serve.remote.time.sleep", slept.append)
    answers = [httpx.Response(429, headers={"retry-after": "3"})]

    def handler(request: httpx.Request) -> httpx.Response:
        if answers:
            return answers.pop()
        return httpx.Response(200, json={"data": [{"id": MODEL}]})

    client_for(handler).models()
    assert slept == [3.0]


def test_unreachable_server_is_retried_then_named(monkeypatch):
    monkeypatch.setattr("engine.serve.remote.time.sleep", lambda s: None)
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        raise httpx.ConnectError("Connection refused", request=request)

    with pytest.raises(RemoteError) as err:
        client_for(handler, retries=2).models()
    assert err.value.kind == UNREACHABLE and "lab.example:8000" in str(err.value)
    assert len(calls) == 3


def test_answers_that_are_not_the_api_are_bad_responses(model):
    def not_json(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, text="<html>proxy login</html>")

    with pytest.raises(RemoteError) as err:
        client_for(not_json).models()
    assert err.value.kind == BAD_RESPONSE

    def text_tokens(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/models"):
            return httpx.Response(200, json={"data": [{"id": MODEL}]})
        lp = {"tokens": ["Hello"], "token_logprobs": [-0.1], "top_logprobs": [{"Hello": -0.1}]}
        return httpx.Response(200, json={"choices": [{"logprobs": lp, "finish_reason": "length"}]})

    with pytest.raises(RemoteError) as err:
        client_for(text_tokens).next_token(PROMPT, 1)
    assert err.value.kind == BAD_RESPONSE and "return_tokens_as_token_ids" in str(err.value)


# -- the key ---------------------------------------------------------------------------------


class MemoryKeyring(KeyringBackend):
    priority = 1  # type: ignore[assignment]

    def __init__(self) -> None:
        super().__init__()
        self.store: dict[tuple[str, str], str] = {}

    def get_password(self, service: str, username: str) -> str | None:
        return self.store.get((service, username))

    def set_password(self, service: str, username: str, password: str) -> None:
        self.store[(service, username)] = password

    def delete_password(self, service: str, username: str) -> None:
        self.store.pop((service, username), None)


def test_key_from_env_and_keychain_is_sent_but_never_shown(model, monkeypatch, caplog):
    caplog.set_level(logging.DEBUG)
    server = FakeServer(model, key=KEY)
    monkeypatch.setenv("DECODING_LAB_API_KEY", KEY)
    client = RemoteClient(URL, MODEL, transport=httpx.MockTransport(server))
    client.next_token(PROMPT, 3)
    assert server.requests[-1].headers["authorization"] == f"Bearer {KEY}"

    previous = keyring.get_keyring()
    keyring.set_keyring(MemoryKeyring())
    try:
        from engine.serve.remote import store_key

        store_key(URL, KEY)
        monkeypatch.delenv("DECODING_LAB_API_KEY")
        source = KeySource("keyring")
        via_keychain = RemoteClient(
            URL, MODEL, key_source=source, transport=httpx.MockTransport(server)
        )
        via_keychain.next_token(PROMPT, 3)
        assert server.requests[-1].headers["authorization"] == f"Bearer {KEY}"
    finally:
        keyring.set_keyring(previous)

    with pytest.raises(RemoteError) as err:  # no key at all: a 401, named
        RemoteClient(URL, MODEL, transport=httpx.MockTransport(server)).next_token(PROMPT, 3)
    assert err.value.kind == UNAUTHORIZED and "DECODING_LAB_API_KEY" in str(err.value)

    session = RemoteSession(client, PROMPT, SamplerSettings(temperature=0.7), top_n=3)
    steps = list(session.stream(3))
    bundle = RemoteBundle(
        model=None, tokenizer=None, kind="decoder-only", device=torch.device("cpu"),
        dtype=torch.float32, name="x", source=client.base_url, context_length=256,
        eos_token_ids=(1,), client=client, key_source=KeySource("env"),
    )  # fmt: skip
    shown = [repr(client), repr(bundle), repr(KeySource("env")), repr(steps), str(err.value)]
    shown += [repr(session.summary()), caplog.text, json.dumps(session.settings.to_dict())]
    assert not any(KEY in s for s in shown)
    assert all(KEY not in str(vars(s)) for s in (client, session))


# -- explore mode against our local chain ------------------------------------------------------


SETTINGS = [
    SamplerSettings(temperature=0.0),
    SamplerSettings(temperature=0.8, top_k=10, seed=5),
    SamplerSettings(temperature=1.3, top_p=0.9, seed=1),
    SamplerSettings(temperature=0.9, min_p=0.05, seed=2),
    SamplerSettings(temperature=1.0, top_k=15, top_p=0.8, order="temperature_last", seed=9),
]


@pytest.mark.parametrize("settings", SETTINGS, ids=lambda s: f"T{s.temperature}-k{s.top_k}")
def test_explore_chain_equals_the_local_chain_with_top_n_in_front(model, settings):
    """Explore mode sees only the top N: its post-chain probabilities must be the local chain's
    on the full logits once a top-k N stage goes first (exact here, since top-k <= N)."""
    n = 20
    server = FakeServer(model)
    session = RemoteSession(client_for(server), PROMPT, settings, top_n=n, n_logprobs=n)
    steps = list(session.stream(12))
    assert len(steps) == 12
    local_settings = settings.with_(top_k=min(settings.top_k or n, n))
    ids = list(PROMPT)
    for step in steps:
        lp = server.logprobs(ids).float()[None]  # [1, vocab]
        chain = build_chain(local_settings, len(PROMPT))
        probs, _ = chain.probs(torch.tensor([ids]), lp)
        top = torch.topk(lp[0], n).indices.tolist()
        assert [c.token_id for c in step.candidates] == top
        got = torch.tensor([c.prob for c in step.candidates], dtype=torch.float32)
        torch.testing.assert_close(got, probs[0, top], rtol=1e-5, atol=1e-6)
        raw = torch.tensor([c.raw_prob for c in step.candidates], dtype=torch.float32)
        torch.testing.assert_close(raw, lp[0, top].exp(), rtol=1e-5, atol=1e-7)  # not renormalised
        assert step.other_p == pytest.approx(1 - float(lp[0, top].exp().sum()), abs=1e-5)
        assert step.entropy_lower_bound
        full = -(lp.exp() * lp).sum() / math.log(2)
        assert step.entropy_raw <= float(full) + 1e-5  # a lower bound of the true entropy
        assert step.prob > 0 and step.source == (
            "greedy" if settings.temperature == 0 else "sample"
        )
        ids.append(step.token_id)


def test_greedy_explore_equals_local_greedy(model):
    server = FakeServer(model)
    settings = SamplerSettings(temperature=0.0)
    remote = RemoteSession(client_for(server), PROMPT, settings, n_logprobs=5)
    local = GenerationSession(model, PROMPT, settings, eos_token_ids=[])
    for _ in remote.stream(20):
        pass
    for _ in local.stream(20):
        pass
    assert remote.generated_ids == local.generated_ids
    assert remote.forward_passes == 20


def test_seeded_sampling_matches_local_sampling_when_top_k_is_within_n(model):
    """Same seed, same distribution (top-k 10 <= N 20): the same tokens as the local engine."""
    settings = SamplerSettings(temperature=1.0, top_k=10, seed=123)
    remote = RemoteSession(client_for(FakeServer(model)), PROMPT, settings)
    local = GenerationSession(model, PROMPT, settings, eos_token_ids=[])
    for _ in remote.stream(16):
        pass
    for _ in local.stream(16):
        pass
    assert remote.generated_ids == local.generated_ids


def test_top_n_math():
    m = top_n_math([math.log(0.5), math.log(0.25)])
    assert m.other == pytest.approx(0.25)
    assert m.entropy_raw == pytest.approx(1.5)  # 0.5, 0.25 and the 0.25 lump: 1.5 bits


def test_branch_undo_redo_and_live_settings_work_in_explore_mode(model):
    server = FakeServer(model)
    session = RemoteSession(client_for(server), PROMPT, SamplerSettings(temperature=0.0))
    first = list(session.stream(8))
    alt = first[3].candidates[2].token_id
    session.branch(3, alt)
    branched = list(session.stream(4))
    assert session.generated_ids[:3] == [s.token_id for s in first[:3]]
    assert branched[0].token_id == alt and branched[0].forced and branched[0].rank == 3
    # every request after the branch carried exactly the kept prefix plus the new tokens
    sent = json.loads(server.requests[-1].content)["prompt"]
    assert sent == PROMPT + session.generated_ids[:-1]
    records = session.undo()
    assert [s.token_id for s in records[1:]] == [s.token_id for s in first[3:]]
    assert session.generated_ids == [s.token_id for s in first]
    session.redo()
    assert session.generated_ids[3] == alt
    session.settings = SamplerSettings(temperature=0.7, top_k=2, seed=4)
    more = list(session.stream(5))
    assert all(s.survivors <= 2 and s.source == "sample" for s in more)


def test_server_failure_mid_run_keeps_the_tokens_so_far(model, monkeypatch):
    monkeypatch.setattr("engine.serve.remote.time.sleep", lambda s: None)
    server = FakeServer(model)
    session = RemoteSession(client_for(server), PROMPT, SamplerSettings(temperature=0.0))
    got: list[Step] = []
    with pytest.raises(RemoteError) as err:
        for i, step in enumerate(session.stream(10)):
            got.append(step)
            if i == 3:
                server.fail_next = [503] * 10
    assert err.value.kind == SERVER_ERROR
    assert len(session.history) == 4 and session.generated_ids == [s.token_id for s in got]
    assert session.stop_reason == "stopped"


def test_stream_mode_sends_the_servers_sampling_and_reports_top_n(model):
    server = FakeServer(model)
    settings = SamplerSettings(temperature=0.0, max_new_tokens=6)
    session = RemoteStreamSession(client_for(server), PROMPT, settings, top_n=5)
    steps = list(session.stream())
    assert len(steps) == 6 and session.server_requests == 1
    body = json.loads(server.requests[-1].content)
    assert body["stream"] is True and body["temperature"] == 0.0 and "top_k" not in body
    local = GenerationSession(model, PROMPT, settings, eos_token_ids=[])
    for _ in local.stream():
        pass
    assert session.generated_ids == local.generated_ids
    assert all(s.source == "server" and len(s.candidates) == 5 and s.other_p >= 0 for s in steps)
    s = SamplerSettings(temperature=0.7, top_k=40, top_p=0.9, min_p=0.1, seed=8)
    params = RemoteStreamSession(client_for(server), PROMPT, s).sampling_parameters()
    assert params == {"temperature": 0.7, "top_k": 40, "top_p": 0.9, "min_p": 0.1, "seed": 8}


def test_workbench_runs_a_served_model_like_a_loaded_one(model):
    server = FakeServer(model)
    client = client_for(server)
    bundle = RemoteBundle(
        model=None, tokenizer=None, kind="decoder-only", device=torch.device("cpu"),
        dtype=torch.float32, name="x", source=client.base_url, context_length=256,
        eos_token_ids=(1,), client=client, n_logprobs=10,
    )  # fmt: skip
    bundle.encode_prompt = lambda text, chat=None: list(PROMPT)  # type: ignore[method-assign]
    bench = Workbench()
    bench.adopt(bundle)
    settings = SamplerSettings(temperature=0.0, max_new_tokens=5)
    records = list(bench.start(RunRequest("hi", settings=settings)))
    steps = [r for r in records if isinstance(r, Step)]
    assert len(steps) == 5 and isinstance(bench.session, RemoteSession)
    assert all(len(s.candidates) == 10 for s in steps)  # top_n capped at the server's N
    records = list(bench.branch(1, steps[1].candidates[1].token_id, settings, 2))
    assert bench.session.generated_ids[0] == steps[0].token_id
    list(bench.undo())
    assert bench.session.generated_ids == [s.token_id for s in steps]
    request = RunRequest("hi", method=SERVED_STREAM, settings=settings)
    streamed = [r for r in bench.start(request) if isinstance(r, Step)]
    assert [s.token_id for s in streamed] == [s.token_id for s in steps]
    with pytest.raises(ValueError, match="beam"):
        list(bench.start(RunRequest("hi", method="beam", settings=settings)))


class BrokenStream(httpx.SyncByteStream):
    """Two server-sent events, then the connection drops."""

    def __init__(self, events: list[bytes]) -> None:
        self.events = events

    def __iter__(self):
        yield from self.events
        raise httpx.RemoteProtocolError("peer closed connection without sending complete body")


def test_stream_broken_mid_answer_keeps_the_tokens_so_far(model):
    server = FakeServer(model)

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        positions = [server.position(list(body["prompt"]), 5)]
        positions.append(server.position(body["prompt"] + [int(positions[0]["token"][9:])], 5))
        events = [
            ("data: " + json.dumps({"choices": [_choice([p], None)]}) + "\n\n").encode()
            for p in positions
        ]
        return httpx.Response(200, stream=BrokenStream(events))

    session = RemoteStreamSession(client_for(handler), PROMPT, SamplerSettings(temperature=0))
    got = []
    with pytest.raises(RemoteError) as err:
        for step in session.stream(10):
            got.append(step)
    assert err.value.kind == UNREACHABLE and "middle of the answer" in str(err.value)
    assert len(got) == 2 and session.generated_ids == [s.token_id for s in got]
    assert session.stop_reason == "stopped"


def test_cli_names_an_unreachable_server(monkeypatch, capsys):
    from main import cli

    monkeypatch.setattr("engine.serve.remote.time.sleep", lambda s: None)
    code = cli(["generate", "--server", "http://127.0.0.1:9", "--key-source", "none"])
    err = capsys.readouterr().err
    assert code == 1 and "error: Cannot reach the server at http://127.0.0.1:9" in err


@pytest.mark.parametrize(
    "settings",
    [
        SamplerSettings(temperature=1.0, xtc_probability=0.5, xtc_threshold=0.05, seed=3),
        SamplerSettings(temperature=1.0, mirostat=2, mirostat_tau=3.0, seed=3),
    ],
    ids=["xtc", "mirostat"],
)
def test_stateful_stages_run_in_explore_mode(model, settings):
    """XTC draws from the step's generator and mirostat carries mu between steps: explore mode
    feeds them as the local session does, and a replay with the same seed repeats the run.
    (Their tokens can differ from the local engine's: both stages look at the tail, which
    explore mode does not see.)"""
    server = FakeServer(model)
    remote = RemoteSession(client_for(server), PROMPT, settings)
    steps = list(remote.stream(10))
    again = RemoteSession(client_for(server), PROMPT, settings)
    assert [s.token_id for s in again.stream(10)] == [s.token_id for s in steps]
    assert len(steps) == 10 and all(s.source == "sample" for s in steps)
    if settings.mirostat:
        assert all(s.mu is not None for s in steps)
        assert len({round(s.mu, 6) for s in steps}) > 1  # mu moves with each step's surprise
