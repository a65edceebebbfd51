"""Issue 35: a served model's tokenizer without a local copy (``/tokenize``, ``/detokenize``)
is asked once per reply, never once per token, and each request has a time bound. The texts
equal the local tokenizer's (the fake server decodes with it)."""

from __future__ import annotations

import json
import time

import httpx
import pytest
from test_remote import MODEL, PROMPT, URL, FakeServer
from transformers import ByT5Tokenizer

from engine.models.text import TokenTable
from engine.records import Step
from engine.sampling.settings import SamplerSettings
from engine.serve import remote
from engine.serve.remote import RemoteClient, RemoteError
from engine.serve.remote_session import RemoteSession, RemoteStreamSession
from engine.serve.server_tokenizer import ServerTokenizer
from tiny_models import tiny_llama

STEPS, TOP = 8, 5


class TokenizingServer(FakeServer):
    """FakeServer plus vLLM's /tokenize and /detokenize (each /detokenize takes ``delay`` s)."""

    def __init__(self, model, delay: float = 0.0, trickle: float = 0.0):
        super().__init__(model)
        self.tok, self.delay, self.trickle = ByT5Tokenizer(), delay, trickle
        self.detokenize_calls = 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/detokenize":
            self.detokenize_calls += 1
            time.sleep(self.delay)
            text = self.tok.decode(json.loads(request.content)["tokens"])
            body = json.dumps({"prompt": text}).encode()
            if self.trickle:
                return httpx.Response(200, content=self._slowly(body))
            return httpx.Response(200, content=body)
        if path == "/tokenize":
            body = json.loads(request.content)
            ids = self.tok(body["prompt"], add_special_tokens=body["add_special_tokens"])
            return httpx.Response(200, json={"tokens": ids["input_ids"]})
        return super().__call__(request)

    def _slowly(self, body: bytes):
        for byte in body:
            time.sleep(self.trickle)
            yield bytes([byte])


@pytest.fixture(scope="module")
def model():
    return tiny_llama(seed=3)


def client_for(server) -> RemoteClient:
    return RemoteClient(URL, MODEL, transport=httpx.MockTransport(server), backoff=0.0)


@pytest.mark.parametrize("mode", ["explore", "stream"])
def test_one_detokenize_request_per_reply(model, mode):
    server = TokenizingServer(model)
    client = client_for(server)
    settings = SamplerSettings(temperature=0.0, max_new_tokens=STEPS)
    cls = RemoteSession if mode == "explore" else RemoteStreamSession
    kw = {"top_n": TOP, "n_logprobs": TOP, "eos_token_ids": [1]}
    session = cls(client, PROMPT, settings, tokenizer=ServerTokenizer(client), **kw)
    steps = [r for r in session.stream() if isinstance(r, Step)]
    assert len(steps) == STEPS
    # one per reply, and two once to learn the marker that joins a reply's texts
    assert server.detokenize_calls <= STEPS + 1, server.detokenize_calls
    local, table = ByT5Tokenizer(), TokenTable(ByT5Tokenizer())
    assert session.text == local.decode(session.generated_ids)
    whole = [c.token_id for s in steps for c in s.candidates if _whole(local, c.token_id)]
    assert len(whole) >= STEPS  # tokens that are whole characters: the texts must agree
    shown = {c.token_id: c.text for s in steps for c in s.candidates}
    assert all(shown[t] == table(t) for t in whole)


def test_a_slow_detokenize_meets_its_time_bound(model, monkeypatch):
    monkeypatch.setattr(remote, "TOKENIZER_DEADLINE_S", 0.3)
    server = TokenizingServer(model, trickle=0.05)  # about 1.5 s for its answer
    client = client_for(server)
    start = time.monotonic()
    with pytest.raises(RemoteError, match="deadline of 0.3 s"):
        ServerTokenizer(client).decode([72, 105])
    assert time.monotonic() - start < 1.5


def _whole(tok, token_id: int) -> bool:
    """A token that is whole characters (a lone byte has no text of its own to compare)."""
    text = tok.decode([token_id])
    return bool(text) and "\ufffd" not in text
