"""Issue 24, items 4 and 5: a hostile or broken server gets a RemoteError with a message, not a
traceback, a hang or a huge allocation; credentials never travel in an address and a server
that echoes the key never gets it shown."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from engine.serve.remote import BAD_RESPONSE, UNAUTHORIZED, RemoteClient, RemoteError

URL = "http://lab.example:8000"
MODEL = "m"
KEY = "sk-hostile-test-0c4f-never-print-me"


def _completion(token="token_id:5", logprob=-0.5, top=None, **block):
    lp = {
        "tokens": [token],
        "token_logprobs": [logprob],
        "top_logprobs": [top if top is not None else {token: logprob}],
        **block,
    }
    return {"choices": [{"logprobs": lp, "finish_reason": "length"}]}


def _server(body, status=200):
    """A server that lists one model and answers every completion with ``body`` (a dict is
    sent as JSON, a str as it is: NaN and Infinity are not JSON but a server may send them)."""

    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/models"):
            return httpx.Response(200, json={"data": [{"id": MODEL}]})
        text = body if isinstance(body, str) else json.dumps(body)
        return httpx.Response(status, text=text, headers={"content-type": "application/json"})

    return handle


def client(handler, **kw) -> RemoteClient:
    return RemoteClient(URL, MODEL, transport=httpx.MockTransport(handler), backoff=0.0, **kw)


HOSTILE = {
    "NaN logprob": json.dumps(_completion()).replace("-0.5", "NaN"),
    "Infinity logprob": json.dumps(_completion()).replace("-0.5", "Infinity"),
    "logprob above 0": _completion(logprob=0.7),
    "top logprob above 0": _completion(top={"token_id:5": -0.1, "token_id:6": 3.0}),
    "negative id": _completion(token="token_id:-1"),
    "id of 10**12": _completion(token="token_id:1000000000000"),
    "top id of 10**12": _completion(top={"token_id:1000000000000": -0.1}),
    "list where an object belongs": {"choices": [[1, 2]]},
    "logprobs a list": {"choices": [{"logprobs": [1, 2], "finish_reason": None}]},
    "string where a number belongs": _completion(logprob="very likely"),
    "top_logprobs a list of lists": _completion(top=[["token_id:5", -0.1]]),
    "choices a string": {"choices": "none"},
    "lists of different lengths": _completion(token_logprobs=[-0.1, -0.2]),
    "answer a bare number": "42",
    "deep nesting": '{"choices": ' + "[" * 50_000 + "]" * 50_000 + "}",
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_hostile_completion_is_a_bad_response(case):
    with pytest.raises(RemoteError) as err:
        client(_server(HOSTILE[case])).next_token([1, 2, 3], 5)
    assert err.value.kind == BAD_RESPONSE and str(err.value)


@pytest.mark.parametrize("case", ["NaN logprob", "id of 10**12", "string where a number belongs"])
def test_hostile_stream_chunk_is_a_bad_response(case):
    body = HOSTILE[case] if isinstance(HOSTILE[case], str) else json.dumps(HOSTILE[case])

    def handle(request):
        if request.url.path.endswith("/models"):
            return httpx.Response(200, json={"data": [{"id": MODEL}]})
        return httpx.Response(200, text=f"data: {body}\n\ndata: [DONE]\n\n")

    with pytest.raises(RemoteError) as err:
        list(client(handle).stream([1, 2], 3))
    assert err.value.kind == BAD_RESPONSE


def _trickle(seconds_per_byte: float, n: int):
    def handle(request):
        if request.url.path.endswith("/models"):
            return httpx.Response(200, json={"data": [{"id": MODEL}]})

        def body():
            for byte in json.dumps(_completion()).encode()[:n]:
                time.sleep(seconds_per_byte)
                yield bytes([byte])

        return httpx.Response(200, content=body())

    return handle


def test_a_server_that_trickles_its_answer_hits_the_deadline():
    # 60 bytes, one every 0.1 s: 6 s in all, past a 1 s deadline. Before the fix the client
    # waited for every byte (its timeout was per read), and a real trickle never ends.
    c = client(_trickle(0.1, 60), deadline=1.0)
    start = time.monotonic()
    with pytest.raises(RemoteError) as err:
        c.next_token([1, 2], 5)
    assert time.monotonic() - start < 3.0
    assert "deadline of 1 s" in str(err.value)


def test_ids_the_local_tokenizer_does_not_know_are_noted():
    c = client(
        _server(_completion(token="token_id:60000", logprob=-0.1, top={"token_id:60000": -0.1}))
    )
    c.vocab_size = 50_000
    served = c.next_token([1], 1)
    assert served.token_id == 60000 and c.unknown_ids == {60000}
    from types import SimpleNamespace

    from engine.validate.served import unknown_ids_notice

    notice = unknown_ids_notice(SimpleNamespace(client=c))  # what the status line adds
    assert "60000" in notice and "does not know" in notice and "50000 tokens" in notice
    assert unknown_ids_notice(SimpleNamespace(client=None)) == ""


# -- credentials -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url", ["http://user:secret-pw@lab.example:8000", "https://:secret-pw@lab.example/v1"]
)
def test_credentials_in_the_address_are_refused_without_being_shown(url):
    with pytest.raises(RemoteError) as err:
        client(_server(_completion())).__class__(url, MODEL, transport=httpx.MockTransport(
            _server(_completion())))  # fmt: skip
    assert err.value.kind == UNAUTHORIZED
    assert "user name or password" in str(err.value) and "secret-pw" not in str(err.value)


@pytest.mark.parametrize("status", [400, 500])
def test_a_server_that_echoes_the_key_never_gets_it_shown(status):
    echo = {"error": {"message": f"bad header Authorization: Bearer {KEY} (token {KEY})"}}
    c = client(_server(echo, status), api_key=KEY, retries=0)
    with pytest.raises(RemoteError) as err:
        c.next_token([1], 1)
    assert KEY not in str(err.value) and "[key removed]" in str(err.value)


def test_a_stream_error_that_echoes_the_key_never_gets_it_shown():
    def handle(request):
        if request.url.path.endswith("/models"):
            return httpx.Response(200, json={"data": [{"id": MODEL}]})
        chunk = json.dumps({"error": f"key {KEY} is rate limited"})
        return httpx.Response(200, text=f"data: {chunk}\n\n")

    with pytest.raises(RemoteError) as err:
        list(client(handle, api_key=KEY).stream([1], 2))
    assert KEY not in str(err.value)


def test_cli_refuses_credentials_in_the_address_without_printing_them(capsys):
    from engine.cli import run

    code = run(["generate", "--server", "http://u:secret-pw@127.0.0.1:9", "--model", "m"])
    out, err = capsys.readouterr()
    assert code != 0 and "user name or password" in err
    assert "secret-pw" not in out + err
