"""What the hardening issues ask of a server's replies, held for each new backend (llama-server,
Ollama, SGLang) over its own routes and stream format (server-sent events, or Ollama's one
object per line): an answer past the size bound is refused with a message, a server that
trickles its answer meets the deadline instead of holding on, and a server that dies in the
middle of a stream leaves the tokens that arrived. The fakes answer in each documented shape
(tests/served_fakes.py); here their bytes are only padded, slowed or cut."""

from __future__ import annotations

import time

import httpx
import pytest
from served_fakes import FakeLlamaServer, FakeOllama, FakeSGLang, PieceTokenizer, TinyModel

from engine.sampling.settings import SamplerSettings
from engine.serve.llama_server import LlamaServerClient
from engine.serve.ollama import OllamaClient, PieceMap
from engine.serve.remote import BAD_RESPONSE, UNREACHABLE, RemoteError
from engine.serve.remote_session import RemoteStreamSession
from engine.serve.sglang import SGLangClient
from engine.validate.limits import MAX_REPLY_BYTES
from tiny_models import VOCAB, tiny_llama

URL = "http://lab-box:8080"
PROMPT = [2, 17, 99, 5, 240, 31]
TOK = PieceTokenizer(VOCAB)
KINDS = ("llama-server", "ollama", "sglang")
TOKEN_ROUTES = ("/tokenize", "/detokenize")


@pytest.fixture(scope="module")
def tiny() -> TinyModel:
    return TinyModel(tiny_llama(seed=13))


def fake(kind: str, tiny: TinyModel):
    if kind == "ollama":
        return FakeOllama(tiny, TOK)
    return FakeSGLang(tiny, VOCAB) if kind == "sglang" else FakeLlamaServer(tiny, VOCAB)


def client(kind: str, handle, **kw):
    transport = httpx.MockTransport(handle)
    if kind == "ollama":
        c = OllamaClient(URL, transport=transport, backoff=0.0, **kw)
        c.pieces, c.text_of = PieceMap(TOK), TOK.decode
        return c
    cls = SGLangClient if kind == "sglang" else LlamaServerClient
    return cls(URL, transport=transport, backoff=0.0, **kw)


def altered(server, body):
    """``server``'s answers, the generation route's bytes passed through ``body``."""

    def handle(request: httpx.Request) -> httpx.Response:
        response = server(request)
        if request.method != "POST" or request.url.path in TOKEN_ROUTES:
            return response
        return httpx.Response(response.status_code, content=body(response.content))

    return handle


@pytest.mark.parametrize("kind", KINDS)
def test_an_answer_past_the_size_bound_is_refused(kind, tiny):
    def padded(data: bytes):
        yield data[:-1]
        for _ in range(MAX_REPLY_BYTES // (1 << 20) + 1):  # 1 MB of spaces at a time
            yield b" " * (1 << 20)
        yield data[-1:]

    c = client(kind, altered(fake(kind, tiny), padded))
    with pytest.raises(RemoteError) as err:
        c.next_token(PROMPT, 5)
    assert err.value.kind == BAD_RESPONSE and "MB limit" in str(err.value)


@pytest.mark.parametrize("kind", KINDS)
def test_a_trickling_answer_meets_the_deadline(kind, tiny):
    def trickle(data: bytes):
        for k in range(len(data)):  # a byte every 0.05 s: seconds for the whole answer
            time.sleep(0.05)
            yield data[k : k + 1]

    c = client(kind, altered(fake(kind, tiny), trickle), deadline=1.0)
    start = time.monotonic()
    with pytest.raises(RemoteError) as err:
        c.next_token(PROMPT, 5)
    assert err.value.kind == UNREACHABLE and "deadline of 1 s" in str(err.value)
    assert time.monotonic() - start < 3.0


GREEDY = SamplerSettings(temperature=0.0)


def streamed(kind: str, handle) -> RemoteStreamSession:
    return RemoteStreamSession(client(kind, handle), PROMPT, GREEDY, top_n=5, eos_token_ids=())


@pytest.mark.parametrize("kind", KINDS)
def test_a_server_dying_mid_stream_leaves_the_tokens_that_arrived(kind, tiny):
    def cut(data: bytes):
        lines = data.split(b"\n")
        events = [k for k, line in enumerate(lines) if line.strip()]
        yield b"\n".join(lines[: events[3]]) + b"\n"  # three whole events
        yield lines[events[3]][:20]  # and the start of a fourth
        raise httpx.ReadError("connection reset by peer")

    expected = [s.token_id for s in streamed(kind, fake(kind, tiny)).stream(8)]
    stream = streamed(kind, altered(fake(kind, tiny), cut))
    got = []
    with pytest.raises(RemoteError) as err:
        for step in stream.stream(8):
            got.append(step.token_id)
    assert err.value.kind == UNREACHABLE and "tokens so far are kept" in str(err.value)
    assert 1 <= len(got) <= 3 and got == expected[: len(got)] and len(expected) == 8
    assert stream.generated_ids == got
