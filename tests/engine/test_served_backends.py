"""The table of what each served backend returns, the line that says it, how the server is
recognised, the source string that remembers it, and lockstep with a served model B whose KL
is a lower bound (checked against the true KL of the full distributions)."""

from __future__ import annotations

import math

import httpx
import pytest
import torch
from served_fakes import FakeLlamaServer, TinyModel

from engine.decode.session import GenerationSession
from engine.models.catalog import parse_served, served_kind, served_source
from engine.sampling.settings import SamplerSettings
from engine.serve.backends import BACKENDS, capability_line, capability_versions, stream_view
from engine.serve.connect import client_for, detect
from engine.serve.remote import UNREACHABLE, RemoteError
from engine.serve.remote_session import RemoteBundle
from engine.serve.served_lockstep import ServedLockstep
from tiny_models import VOCAB, tiny_llama

URL = "http://lab.example:8000"


def test_every_backend_says_what_its_bars_are_and_what_it_cannot_do():
    lines = {kind: capability_line(kind, 20) for kind in BACKENDS}
    for line in lines.values():
        assert "raw top-20" in line and "entropy: a lower bound" in line
    assert "scoring a text: yes" in lines["vllm"] and "ids: exact" in lines["vllm"]
    assert "scoring a text: no (llama.cpp llama-server" in lines["llama-server"]
    assert "re-tokenised text" in lines["ollama"] and "at most 20" in lines["ollama"]
    assert "scoring a text: no (Ollama" in lines["ollama"]
    assert "after its temperature" in lines["sglang"] and "bounds" in lines["sglang"]
    assert "llama.cpp's own sampler" in capability_line("llama-server", 20, server_sampler=True)
    assert "llama.cpp's own sampler" not in capability_line("vllm", 20, server_sampler=True)
    with pytest.raises(ValueError, match="auto, vllm, llama-server, ollama, sglang"):
        capability_line("tgi", 20)


def test_sglangs_raw_flag_makes_its_stream_raw_in_the_line():
    """The user says SGLang runs with SGLANG_RETURN_ORIGINAL_LOGPROB=1: the line says raw."""
    told = capability_line("sglang", 20, raw_flag=True)
    assert "after its temperature" not in told and "stream reports raw probabilities" in told
    brief = capability_versions("sglang", 20, raw_flag=True)[1]
    assert "stream: raw" in brief and "tempered" not in brief
    assert "stream: tempered" in capability_versions("sglang", 20)[1]


def test_stream_views():
    assert stream_view("vllm", 0.7) == stream_view("ollama", 1.3) == "raw"
    assert stream_view("sglang", 0.0) == stream_view("sglang", 1.0) == "raw"
    assert stream_view("sglang", 0.7) == "" and stream_view("sglang", 0.7, raw_flag=True) == "raw"


def _server(owner: str | None, version: bool = False):
    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            entry = {"id": "m", "object": "model", **({"owned_by": owner} if owner else {})}
            return httpx.Response(200, json={"object": "list", "data": [entry]})
        if request.url.path == "/api/version" and version:
            return httpx.Response(200, json={"version": "0.13.0"})
        return httpx.Response(404, json={"error": "not found"})

    return handle


@pytest.mark.parametrize(
    ("owner", "version", "kind"),
    [("vllm", False, "vllm"), ("llamacpp", False, "llama-server"), ("sglang", False, "sglang"),
     ("library", True, "ollama"), ("someone", False, "vllm"), (None, False, "vllm")],
)  # fmt: skip
def test_the_server_kind_is_detected_from_what_it_says(owner, version, kind):
    got, how = detect(URL, transport=httpx.MockTransport(_server(owner, version)))
    assert got == kind
    if owner in (None, "someone"):
        assert "did not say" in how  # a guess is said to be one


def test_an_unreachable_server_is_named_not_guessed(monkeypatch):
    monkeypatch.setattr("engine.serve.http.time.sleep", lambda s: None)

    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    with pytest.raises(RemoteError) as err:
        client_for("auto", URL, transport=httpx.MockTransport(refuse))
    assert err.value.kind == UNREACHABLE


def test_the_source_string_keeps_the_kind_and_reads_older_ones():
    src = served_source("http://h:8080/", "m", "env", "llama-server")
    assert parse_served(src) == ("http://h:8080", "m", "env") and served_kind(src) == "llama-server"
    old = served_source("http://h:8000", "m", "none")
    assert served_kind(old) == "auto" and parse_served(old) == ("http://h:8000", "m", "none")


# -- lockstep with a served B ------------------------------------------------------------------


@pytest.fixture(scope="module")
def models():
    return tiny_llama(seed=11), tiny_llama(seed=12)


def _served_b(model_b: torch.nn.Module, n: int) -> RemoteBundle:
    from engine.serve.llama_server import LlamaServerClient

    client = LlamaServerClient(
        URL, transport=httpx.MockTransport(FakeLlamaServer(TinyModel(model_b), VOCAB))
    )
    return RemoteBundle(
        model=None, tokenizer=None, kind="decoder-only", device=torch.device("cpu"),
        dtype=torch.float32, name="b", source=URL, context_length=256, eos_token_ids=(),
        client=client, n_logprobs=n, server_kind="llama-server",
    )  # fmt: skip


def test_served_lockstep_kl_is_a_lower_bound_and_jaccard_exact(models):
    a_model, b_model = models
    prompt = [2, 17, 99, 5]
    session = GenerationSession(a_model, prompt, SamplerSettings(temperature=0.0), eos_token_ids=[])
    lock = ServedLockstep(session, _served_b(b_model, 10), top_n=8)
    steps = list(lock.stream(8))
    assert len(steps) == 8 and "lower bounds" in lock.bounds and lock.note == ""
    ids = list(prompt)
    for s in steps:
        la = TinyModel(a_model).logprobs(ids)
        lb = TinyModel(b_model).logprobs(ids)
        true_kl = float((la.exp() * (la - lb)).sum())
        assert 0 <= s.kl <= true_kl + 1e-9 and s.kl_lower_bound
        a_top, b_top = (
            set(torch.topk(la, 8).indices.tolist()),
            set(torch.topk(lb, 8).indices.tolist()),
        )
        assert s.jaccard == pytest.approx(len(a_top & b_top) / len(a_top | b_top))
        assert s.greedy_agree == (int(la.argmax()) == int(lb.argmax()))
        b_exact = math.exp(float(lb[s.token_id]))
        if s.b_prob_upper_bound:
            assert s.token_id not in b_top and b_exact <= s.b_prob + 1e-12
        else:
            assert s.b_prob == pytest.approx(b_exact)
        ids.append(s.token_id)


def test_served_lockstep_of_a_model_with_itself_is_zero(models):
    a_model, _ = models
    session = GenerationSession(
        a_model, [2, 17, 99], SamplerSettings(temperature=0.0), eos_token_ids=[]
    )
    lock = ServedLockstep(session, _served_b(a_model, 20), top_n=20)
    for s in lock.stream(5):
        assert s.kl == pytest.approx(0.0, abs=1e-6) and s.jaccard == 1.0 and s.greedy_agree
    with pytest.raises(ValueError, match="between 1 and the 20"):
        ServedLockstep(GenerationSession(a_model, [2, 3]), _served_b(a_model, 20), top_n=50)


def test_a_served_steps_fields_survive_the_autosave_and_a_local_ones_keep_their_shape():
    from dataclasses import replace

    from engine.classroom.export import step_to_dict, steps_from_dict
    from engine.records import Candidate, Step
    from engine.validate.steps import read_steps

    cands = (Candidate(5, "a", 0.5, 0.6, server_prob=0.61), Candidate(6, "b", 0.2, 0.0, "top-k 1",
             server_prob=0.0), Candidate(7, "c", 0.1, 0.0, server_prob=None))  # fmt: skip
    step = Step(index=0, token_id=5, text="a", token_str="a", raw_prob=0.5, prob=0.6, rank=1,
                candidates=cands, survivors=1, entropy_raw=1.2, entropy=0.0, step_time=0.01,
                tokens_per_s=10.0, other_p=0.2, entropy_lower_bound=True,
                server_sampler="llama.cpp")  # fmt: skip
    stream = replace(step, after_sampler=False, server_sampler="", candidates=cands[:1])
    for s in (step, stream):
        written = step_to_dict(s)
        assert steps_from_dict({"steps": [written]}) == [s] == read_steps([written])
    local = step_to_dict(replace(step, server_sampler="", candidates=()))
    assert "after_sampler" not in local and "server_sampler" not in local
    with pytest.raises(Exception, match="probability"):
        read_steps(
            [
                {
                    **step_to_dict(step),
                    "candidates": [
                        {
                            "token_id": 5,
                            "text": "a",
                            "raw_prob": 0.5,
                            "prob": 0.6,
                            "server_prob": 3.0,
                        }
                    ],
                }
            ]
        )
