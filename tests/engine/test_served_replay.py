"""Ollama's and SGLang's clients against transports that replay replies in the shape their
documentation gives (they cannot be installed here, so no running server is tested):

* Ollama >= 0.12.11, docs/openapi.yaml: ``POST /api/generate`` with ``raw``, ``options``,
  ``logprobs`` and ``top_logprobs`` (at most 20, server/routes.go); the reply's ``logprobs`` is
  a list of Logprob ``{token, logprob, bytes, top_logprobs: [TokenLogprob]}``; a stream is one
  JSON object per line, the last with ``done`` and ``done_reason``.
* SGLang, docs/basic_usage/sampling_params.md: ``POST /generate`` with ``input_ids``,
  ``sampling_params``, ``return_logprob``, ``top_logprobs_num``, ``logprob_start_len``;
  ``meta_info`` holds ``[logprob, token_id, text]`` triples (tokenizer_manager.py
  ``detokenize_logprob_tokens``) and ``finish_reason`` ``{"type": ...}``.

Neither documentation prints a whole reply with log-probabilities (Ollama's docs/openapi.yaml
gives the Logprob and TokenLogprob schemas and no example; SGLang's sampling_params.md lists
the arguments and shows a stream as ``data:`` lines with the cumulative text, ending
``data: [DONE]``), so the literal replies below are those shapes with our values; the fakes in
tests/served_fakes.py answer in the same shapes from a tiny model, so the sessions can be held
to our engine."""

from __future__ import annotations

import json
import math

import httpx
import pytest
import torch
from served_fakes import FakeOllama, FakeSGLang, PieceTokenizer, TinyModel

from engine.decode.session import GenerationSession
from engine.sampling.settings import SamplerSettings
from engine.serve.ollama import NEUTRAL as OLLAMA_NEUTRAL
from engine.serve.ollama import OllamaClient, PieceMap
from engine.serve.remote import BAD_RESPONSE, MODEL_NOT_FOUND, RemoteError
from engine.serve.remote_session import RemoteBundle, RemoteSession, RemoteStreamSession
from engine.serve.sglang import SGLangClient
from engine.tree.score import score_text
from tiny_models import VOCAB, tiny_llama

URL = "http://gpu-box:11434"
PROMPT = [2, 17, 99, 5, 240, 31]
GREEDY = SamplerSettings(temperature=0.0)
TOK = PieceTokenizer(VOCAB)

# docs/openapi.yaml, GenerateResponse with Logprob / TokenLogprob entries (values ours; pieces
# in PieceTokenizer's spelling, "[300]" being the piece ids 300 and 301 share).
OLLAMA_DOC_REPLY = {
    "model": "tiny:latest", "created_at": "2025-11-14T22:14:58.000Z", "response": "[17]",
    "done": True, "done_reason": "length",
    "logprobs": [{
        "token": "[17]", "logprob": -0.4, "bytes": [91, 49, 55, 93],
        "top_logprobs": [
            {"token": "[17]", "logprob": -0.4, "bytes": [91, 49, 55, 93]},
            {"token": "[300]", "logprob": -1.6, "bytes": [91, 51, 48, 48, 93]},
            {"token": "[99]", "logprob": -2.3, "bytes": [91, 57, 57, 93]},
        ],
    }],
}  # fmt: skip
# sampling_params.md /generate with return_logprob (values ours).
SGLANG_DOC_REPLY = {
    "text": " Paris", "output_ids": [17],
    "meta_info": {
        "id": "5e1c", "finish_reason": {"type": "length", "length": 1}, "prompt_tokens": 6,
        "completion_tokens": 1, "output_token_logprobs": [[-0.4, 17, None]],
        "output_top_logprobs": [[[-0.4, 17, None], [-1.6, 300, None], [-2.3, 99, None]]],
    },
}  # fmt: skip


@pytest.fixture(scope="module")
def model() -> torch.nn.Module:
    return tiny_llama(seed=7)


def replay(reply: dict, models: dict):
    def handle(request: httpx.Request) -> httpx.Response:
        if request.method == "GET":
            return httpx.Response(200, json=models)
        return httpx.Response(200, json=reply)

    return handle


def ollama(server, **kw) -> OllamaClient:
    client = OllamaClient(URL, transport=httpx.MockTransport(server), backoff=0.0, **kw)
    client.pieces, client.text_of = PieceMap(TOK), TOK.decode
    return client


def sglang(server, **kw) -> SGLangClient:
    return SGLangClient(URL, transport=httpx.MockTransport(server), backoff=0.0, **kw)


def local_greedy(model, n: int) -> list[int]:
    session = GenerationSession(model, PROMPT, GREEDY, eos_token_ids=[])
    for _ in session.stream(n):
        pass
    return session.generated_ids


# -- Ollama ------------------------------------------------------------------------------------


def test_ollama_documented_reply_maps_pieces_and_leaves_the_shared_one_out():
    client = ollama(replay(OLLAMA_DOC_REPLY, {"models": [{"name": "tiny:latest"}]}))
    served = client.next_token(PROMPT, 3)
    assert served.token_id == 17 and served.logprob == -0.4
    assert [(t.token_id, t.logprob) for t in served.top] == [(17, -0.4), (99, -2.3)]
    assert client.unmapped == 1  # "[300]" is ids 300 and 301: not given to a guess
    session = RemoteSession(client, PROMPT, GREEDY, n_logprobs=3, top_n=3)
    step = next(iter(session.stream(1)))
    assert step.other_p == pytest.approx(1 - math.exp(-0.4) - math.exp(-2.3))  # includes it


def test_ollama_explore_equals_our_engine_sending_text_and_neutral_options(model):
    server = FakeOllama(TinyModel(model), TOK)
    client = ollama(server)
    session = RemoteSession(client, PROMPT, GREEDY, n_logprobs=50, top_n=10)
    for _ in session.stream(8):
        pass
    assert session.generated_ids == local_greedy(model, 8)
    body = server.requests[-1]
    assert body["prompt"] == TOK.decode(PROMPT + session.generated_ids[:-1]) and body["raw"]
    assert body["logprobs"] is True and body["top_logprobs"] == 20  # Ollama's most
    options = body["options"]
    assert options["num_predict"] == 1 and options["temperature"] == 0.0
    assert all(options[k] == v for k, v in OLLAMA_NEUTRAL.items())


def test_ollama_stream_is_raw_and_ends_with_its_done_reason(model):
    server = FakeOllama(TinyModel(model), TOK)
    stream = RemoteStreamSession(ollama(server), PROMPT, GREEDY, top_n=5, eos_token_ids=())
    steps = list(stream.stream(6))
    assert stream.generated_ids == local_greedy(model, 6) and len(steps) == 6
    assert all(not s.after_sampler and len(s.candidates) == 5 for s in steps)
    assert server.requests[-1]["stream"] is True
    assert server.requests[-1]["options"]["seed"] == 0  # our seed, in Ollama's options


def test_ollama_without_logprobs_or_a_tokenizer_or_the_model_is_named(model):
    server = FakeOllama(TinyModel(model), TOK)
    server.logprobs = False  # an Ollama older than 0.12.11
    with pytest.raises(RemoteError, match="older than 0.12.11"):
        ollama(server).next_token(PROMPT, 5)
    bare = OllamaClient(URL, transport=httpx.MockTransport(FakeOllama(TinyModel(model), TOK)))
    with pytest.raises(RemoteError, match="local copy of the model's tokenizer"):
        bare.next_token(PROMPT, 5)
    with pytest.raises(RemoteError) as err:
        ollama(FakeOllama(TinyModel(model), TOK), model="llama3.2")
    assert err.value.kind == MODEL_NOT_FOUND and "ollama pull llama3.2" in str(err.value)


def test_ollama_chosen_piece_no_id_spells_is_an_error():
    reply = json.loads(json.dumps(OLLAMA_DOC_REPLY))
    reply["logprobs"][0]["token"], reply["logprobs"][0]["bytes"] = "[300]", list(b"[300]")
    client = ollama(replay(reply, {"models": [{"name": "tiny:latest"}]}))
    with pytest.raises(RemoteError, match="does not spell with one id"):
        client.next_token(PROMPT, 3)


def _doc(change) -> dict:
    reply = json.loads(json.dumps(OLLAMA_DOC_REPLY))
    change(reply["logprobs"][0])
    return reply


OLLAMA_HOSTILE = {
    "logprob above 0": _doc(lambda e: e.update(logprob=0.9)),
    "top logprob a string": _doc(lambda e: e["top_logprobs"][0].update(logprob="-0.1")),
    "21 top entries": _doc(lambda e: e.update(top_logprobs=e["top_logprobs"] * 7)),
    "a byte of 300": _doc(lambda e: e.update(bytes=[300])),
    "mass of 3": _doc(lambda e: e.update(top_logprobs=[
        {"token": f"[{i}]", "logprob": -0.01} for i in range(3, 6)])),
    "logprobs an object": {**OLLAMA_DOC_REPLY, "logprobs": {"token": "[1]"}},
}  # fmt: skip


@pytest.mark.parametrize("case", list(OLLAMA_HOSTILE))
def test_ollama_hostile_reply_is_a_bad_response(case):
    client = ollama(replay(OLLAMA_HOSTILE[case], {"models": [{"name": "tiny:latest"}]}))
    with pytest.raises(RemoteError) as err:
        client.next_token(PROMPT, 3)
    assert err.value.kind == BAD_RESPONSE


def test_ollama_cannot_score_a_text(model):
    bundle = RemoteBundle(
        model=None, tokenizer=TOK, kind="decoder-only", device=torch.device("cpu"),
        dtype=torch.float32, name="x", source=URL, context_length=None, eos_token_ids=(),
        client=ollama(FakeOllama(TinyModel(model), TOK)), n_logprobs=20, server_kind="ollama",
    )  # fmt: skip
    with pytest.raises(ValueError, match="Ollama returns no prompt log-probabilities"):
        score_text(bundle, "[5][17][99]", top_n=5)


# -- SGLang ------------------------------------------------------------------------------------


def test_sglang_documented_reply_reads_as_a_position():
    models = {"data": [{"id": "tiny", "owned_by": "sglang", "max_model_len": 4096}]}
    client = sglang(replay(SGLANG_DOC_REPLY, models))
    served = client.next_token(PROMPT, 3)
    assert (served.token_id, served.finish_reason) == (17, "length")
    assert [t.token_id for t in served.top] == [17, 300, 99] and client.max_model_len() == 4096


def test_sglang_explore_equals_our_engine_with_ids_at_temperature_zero(model):
    server = FakeSGLang(TinyModel(model), VOCAB)
    session = RemoteSession(sglang(server), PROMPT, GREEDY, n_logprobs=10, top_n=10)
    for _ in session.stream(8):
        pass
    assert session.generated_ids == local_greedy(model, 8)
    body = server.requests[-1]
    assert body["input_ids"] == PROMPT + session.generated_ids[:-1]
    assert body["sampling_params"]["temperature"] == 0.0 and body["return_logprob"] is True
    lp = TinyModel(model).logprobs(PROMPT)
    got = [c.raw_prob for c in session.history[0].candidates]
    assert got == pytest.approx(torch.topk(lp, 10).values.exp().tolist(), abs=1e-9)


def test_sglang_stream_refuses_tempered_probabilities_unless_told_they_are_raw(model):
    warm = SamplerSettings(temperature=0.7, seed=1)
    stream = RemoteStreamSession(sglang(FakeSGLang(TinyModel(model), VOCAB)), PROMPT, warm)
    with pytest.raises(ValueError, match="SGLANG_RETURN_ORIGINAL_LOGPROB"):
        list(stream.stream(3))
    server = FakeSGLang(TinyModel(model), VOCAB)
    server.raw_flag = True
    told = RemoteStreamSession(sglang(server), PROMPT, warm, raw_flag=True)
    steps = list(told.stream(3))
    lp = TinyModel(model).logprobs(PROMPT)
    assert steps[0].candidates[0].raw_prob == pytest.approx(float(lp.max().exp()), abs=1e-9)


@pytest.mark.parametrize("incremental", [False, True], ids=["cumulative", "incremental"])
def test_sglang_stream_reads_whole_and_incremental_events(model, incremental):
    server = FakeSGLang(TinyModel(model), VOCAB, incremental=incremental)
    stream = RemoteStreamSession(sglang(server), PROMPT, GREEDY, top_n=5, eos_token_ids=())
    steps = list(stream.stream(6))
    assert stream.generated_ids == local_greedy(model, 6)
    assert all(not s.after_sampler for s in steps) and stream.server_requests == 1


def test_sglang_scores_a_text_with_ranks_bounded_past_the_top_n(model):
    client = sglang(FakeSGLang(TinyModel(model), VOCAB))
    client.vocab_size = VOCAB
    bundle = RemoteBundle(
        model=None, tokenizer=TOK, kind="decoder-only", device=torch.device("cpu"),
        dtype=torch.float32, name="x", source=URL, context_length=256, eos_token_ids=(),
        client=client, n_logprobs=20, server_kind="sglang",
    )  # fmt: skip
    text, context = "[5][17][99][240][31][7][250]", "[2][40]"
    res = score_text(bundle, text, prompt=context, top_n=3)
    full = [2, 40, 5, 17, 99, 240, 31, 7, 250]
    rows = TinyModel(model).prompt_logprobs(full)
    assert [t.token_id for t in res.tokens] == full[2:]
    for k, t in enumerate(res.tokens):
        row = rows[k + 1]
        assert t.logprob == pytest.approx(float(row[t.token_id]), abs=1e-9)
        true_rank = int((row > row[t.token_id]).sum()) + 1
        if true_rank <= 3:
            assert t.rank == true_rank and not t.rank_bound
        else:
            assert t.rank == 4 and t.rank_bound  # at least 4: SGLang listed 3
    assert any(t.rank_bound for t in res.tokens)
    dumped = res.to_json()["tokens"]
    assert [bool(d.get("rank_at_least")) for d in dumped] == [t.rank_bound for t in res.tokens]


def _sg(change) -> dict:
    reply = json.loads(json.dumps(SGLANG_DOC_REPLY))
    change(reply["meta_info"])
    return reply


SGLANG_HOSTILE = {
    "logprob above 0": _sg(lambda m: m.update(output_token_logprobs=[[0.8, 17, None]])),
    "id beyond the bound": _sg(lambda m: m.update(output_token_logprobs=[[-0.1, 2**30, None]])),
    "string logprob": _sg(lambda m: m.update(output_token_logprobs=[["-0.1", 17, None]])),
    "true as an id": _sg(lambda m: m.update(output_token_logprobs=[[-0.1, True, None]])),
    "top lists a different length": _sg(lambda m: m.update(output_top_logprobs=[None, None])),
    "no logprobs": _sg(lambda m: m.pop("output_token_logprobs")),
    "aborted": _sg(lambda m: m.update(finish_reason={"type": "abort", "message": "OOM"})),
}  # fmt: skip


@pytest.mark.parametrize("case", list(SGLANG_HOSTILE))
def test_sglang_hostile_reply_is_refused_with_a_message(case):
    models = {"data": [{"id": "tiny", "owned_by": "sglang"}]}
    client = sglang(replay(SGLANG_HOSTILE[case], models))
    with pytest.raises(RemoteError) as err:
        client.next_token(PROMPT, 3)
    assert err.value.kind == BAD_RESPONSE and str(err.value)
    if case == "aborted":
        assert "OOM" in str(err.value)


def test_cli_says_in_one_line_why_an_sglang_stream_is_refused(model, monkeypatch, capsys):
    from engine.cli.generate import run_served

    server = FakeSGLang(TinyModel(model), VOCAB)
    bundle = RemoteBundle(
        model=None, tokenizer=TOK, kind="decoder-only", device=torch.device("cpu"),
        dtype=torch.float32, name="x", source=URL, context_length=256, eos_token_ids=(),
        client=sglang(server), n_logprobs=5, server_kind="sglang",
    )  # fmt: skip
    bundle.encode_prompt = lambda text, chat=None: list(PROMPT)  # type: ignore[method-assign]
    monkeypatch.setattr("engine.cli.generate.open_served", lambda args: bundle)
    from engine.cli import build_parser

    args = build_parser().parse_args(
        ["generate", "--server", URL, "--stream", "--temperature", "0.7", "--max-new-tokens", "3"]
    )
    assert run_served(args) == 1
    err = capsys.readouterr().err
    assert "after its temperature" in err and "Traceback" not in err
