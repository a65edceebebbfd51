"""Scoring a text on a served model (issue 25) without a server: an honest fake vLLM that
answers ``prompt_logprobs`` from the tiny model's own forward must give the local score; a
hostile or broken answer must give a RemoteError naming it, never a traceback, a hang or a
wrong score. (The real vLLM comparison is tests/remote/test_vllm_score.py.)"""

from __future__ import annotations

import json
import time

import httpx
import pytest
import torch
import torch.nn.functional as F
from transformers import ByT5Tokenizer

from engine.models.loading import DECODER_ONLY, make_bundle
from engine.serve import http
from engine.serve.remote import BAD_RESPONSE, LOGPROBS_NOT_ALLOWED, RemoteClient, RemoteError
from engine.serve.remote_session import RemoteBundle
from engine.tree.score import score_text
from engine.validate.limits import MAX_TOP_N
from tiny_models import VOCAB, tiny_llama

MODEL, N = "tiny", 5
TEXT, CONTEXT = "Hello there, world", "Say: "


@pytest.fixture(scope="module")
def local():
    return make_bundle(tiny_llama(2).float(), ByT5Tokenizer(), name="tiny")


def honest(local, ids: list[int], n: int) -> list:
    """vLLM's prompt_logprobs for ``ids``: None, then per position the top-n and the prompt's
    own token, each with its rank over the whole vocabulary."""
    with torch.no_grad():
        logp = F.log_softmax(local.model(input_ids=torch.tensor([ids])).logits[0].float(), -1)
    rows: list = [None]
    for i in range(1, len(ids)):
        row = logp[i - 1]
        order = torch.argsort(row, descending=True).tolist()
        keep = dict.fromkeys([*order[:n], ids[i]])
        rows.append({str(t): {"logprob": float(row[t]), "rank": order.index(t) + 1,
                              "decoded_token": chr(t % 95 + 32)} for t in keep})  # fmt: skip
    return rows


def server(local, mangle=None, stream=None):
    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/models"):
            return httpx.Response(200, json={"data": [{"id": MODEL, "max_model_len": 256}]})
        body = json.loads(request.content)
        assert body["prompt_logprobs"] == N and isinstance(body["prompt"], list)
        if stream is not None:
            return httpx.Response(200, content=stream())
        rows = honest(local, body["prompt"], body["prompt_logprobs"])
        answer = {"choices": [{"text": "x", "prompt_logprobs": rows, "finish_reason": "length"}]}
        text = json.dumps(mangle(answer) if mangle else answer)
        return httpx.Response(200, text=text, headers={"content-type": "application/json"})

    return handle


def served(local, handler, deadline: float = 30.0) -> RemoteBundle:
    client = RemoteClient("http://lab.example:8000", MODEL, backoff=0.0, deadline=deadline,
                          transport=httpx.MockTransport(handler))  # fmt: skip
    client.vocab_size = VOCAB
    return RemoteBundle(
        model=None, tokenizer=local.tokenizer, kind=DECODER_ONLY, device=torch.device("cpu"),
        dtype=torch.float32, name="tiny @ lab", source=client.base_url, context_length=256,
        eos_token_ids=(1,), client=client, n_logprobs=20,
    )  # fmt: skip


def test_honest_server_gives_the_local_score(local):
    want = score_text(local, TEXT, prompt=CONTEXT, top_n=N)
    got = score_text(served(local, server(local)), TEXT, prompt=CONTEXT, top_n=N)
    assert [t.token_id for t in got.tokens] == [t.token_id for t in want.tokens]
    assert [t.rank for t in got.tokens] == [t.rank for t in want.tokens]
    assert [t.logprob for t in got.tokens] == pytest.approx(
        [t.logprob for t in want.tokens], abs=1e-5
    )
    assert [[c[0] for c in t.top] for t in got.tokens] == [
        [c[0] for c in t.top] for t in want.tokens
    ]
    assert got.total_logprob == pytest.approx(want.total_logprob, abs=1e-4)
    assert any(t.rank > N for t in got.tokens)  # ranks past the listed top come from the server


def _set(path):
    """A mangler that sets answer[...path] (the last item is the value, or a function of it)."""
    *keys, last, value = path

    def mangle(answer):
        node = answer
        for k in keys:
            node = node[k]
        node[last] = value(node[last]) if callable(value) else value
        return answer

    return mangle


def _position(i, fn):
    return _set(("choices", 0, "prompt_logprobs", i, fn))


def _row(fn):
    """Change the first position whose prompt token ranks past the top-N: its entry comes last
    (honest() keeps it after the top-N), so the row has N + 1 entries."""

    def mangle(answer):
        rows = answer["choices"][0]["prompt_logprobs"]
        i = next(k for k, r in enumerate(rows) if r is not None and len(r) > N)
        rows[i] = fn(dict(rows[i]))
        return answer

    return mangle


def _own(field, value):
    def fn(row):
        key = list(row)[-1]
        row[key] = {**row[key], field: value}
        return row

    return _row(fn)


HOSTILE = {
    "logprob above 0": _own("logprob", 0.5),
    "rank 0": _own("rank", 0),
    "no rank": _own("rank", None),
    "rank 1 beside likelier tokens": _own("rank", 1),
    "rank a string": _own("rank", "1"),
    "id past the vocabulary": _row(lambda r: {**r, str(VOCAB): {"logprob": -9.0}}),
    "id of 10**12": _row(lambda r: {**r, "1000000000000": {"logprob": -9.0}}),
    "negative id": _row(lambda r: {**r, "-1": {"logprob": -9.0}}),
    "id not a number": _row(lambda r: {**r, "the": {"logprob": -9.0}}),
    "prompt token missing": _row(lambda r: dict(list(r.items())[:N])),
    "position null": _position(2, None),
    "too few positions": _set(("choices", 0, "prompt_logprobs", lambda rows: rows[:-1])),
    "too many candidates": _row(
        lambda r: {
            **r,
            **{
                str(200 + k % 100) + "0" * (k // 100): {"logprob": -20.0}
                for k in range(MAX_TOP_N + 2)
            },
        }  # fmt: skip
    ),
    "positions an object": _set(("choices", 0, "prompt_logprobs", {"0": None})),
    "no choices": _set(("choices", [])),
    "decoded token of 10 kB": _own("decoded_token", "x" * 10_000),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_hostile_answer_is_a_bad_response(local, case):
    bundle = served(local, server(local, HOSTILE[case]))
    with pytest.raises(RemoteError) as err:
        score_text(bundle, TEXT, prompt=CONTEXT, top_n=N)
    assert err.value.kind == BAD_RESPONSE and "broken" in str(err.value)


@pytest.mark.parametrize("bad", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_logprobs_are_refused(local, bad):
    handler = server(local)

    def handle(request):
        response = handler(request)
        if request.url.path.endswith("/models"):
            return response
        text = json.dumps(json.loads(response.text))
        text = text.replace('"logprob": -', f'"logprob": {bad}, "was": -', 1)
        return httpx.Response(200, text=text, headers={"content-type": "application/json"})

    with pytest.raises(RemoteError) as err:
        score_text(served(local, handle), TEXT, prompt=CONTEXT, top_n=N)
    assert err.value.kind == BAD_RESPONSE


def test_a_server_without_prompt_logprobs_is_named(local):
    drop = _set(("choices", 0, "prompt_logprobs", None))
    with pytest.raises(RemoteError) as err:
        score_text(served(local, server(local, drop)), TEXT, prompt=CONTEXT, top_n=N)
    assert err.value.kind == LOGPROBS_NOT_ALLOWED and "prompt_logprobs" in str(err.value)


def test_a_trickling_server_meets_the_deadline(local):
    def trickle():
        for _ in range(100):
            time.sleep(0.05)
            yield b" "

    start = time.monotonic()
    with pytest.raises(RemoteError, match="deadline"):
        score_text(served(local, server(local, stream=trickle), deadline=0.3), TEXT, CONTEXT, N)
    assert time.monotonic() - start < 3.0


def test_a_huge_answer_is_refused(local, monkeypatch):
    monkeypatch.setattr(http, "MAX_REPLY_BYTES", 4096)  # the client's bound
    with pytest.raises(RemoteError, match="limit"):
        score_text(served(local, server(local)), TEXT * 5, prompt=CONTEXT, top_n=N)


def test_too_long_for_the_served_context(local):
    with pytest.raises(ValueError, match="over the served model"):
        score_text(served(local, server(local)), "a" * 300, prompt=CONTEXT, top_n=N)


# -- issue 35: what vLLM really sends, and numbers that cannot be probabilities ---------------


def _first_past_top(answer):
    rows = answer["choices"][0]["prompt_logprobs"]
    return next(r for r in rows if r is not None and len(r) > N)


def test_vllms_minus_9999_is_read_as_impossible(local):
    """vLLM spells -inf as -9999.0: the token's probability is 0 and the perplexity infinite,
    where the perplexity used to overflow (OverflowError) on a short text."""

    honest_server = server(local)

    def handle(request):  # the last token of the text: -9999.0, ranked last
        response = honest_server(request)
        if request.url.path.endswith("/models"):
            return response
        answer, last = response.json(), json.loads(request.content)["prompt"][-1]
        answer["choices"][0]["prompt_logprobs"][-1][str(last)] = {"logprob": -9999.0,
                                                                  "rank": VOCAB}  # fmt: skip
        return httpx.Response(200, json=answer)

    res = score_text(served(local, handle), "Hi there", "Say: ", N)
    worst = min(res.tokens, key=lambda t: t.logprob)
    assert worst.logprob == float("-inf") and worst.surprisal == float("inf")
    assert res.perplexity == float("inf") and res.total_logprob == float("-inf")
    from engine.cli.tree import plain  # what `score --json` writes: strict JSON, nulls

    data = json.loads(json.dumps(plain(res.to_json()), allow_nan=False))
    assert data["perplexity"] is None and any(t["logprob"] is None for t in data["tokens"])


def test_listed_probabilities_over_1_are_refused(local):
    def thirty(answer):  # 31 tokens at p = 0.97 each: the row claims a mass of 30
        row = _first_past_top(answer)
        row.update({str(300 + k): {"logprob": -0.03, "rank": 1} for k in range(31)})
        return answer

    with pytest.raises(RemoteError, match="add up to 30") as err:
        score_text(served(local, server(local, thirty)), TEXT, prompt=CONTEXT, top_n=N)
    assert err.value.kind == BAD_RESPONSE


def test_probability_1_at_rank_40000_is_refused(local):
    with pytest.raises(RemoteError, match="rank 40,000 with probability 1") as err:
        bundle = served(local, server(local, _row(_certain)))
        score_text(bundle, TEXT, prompt=CONTEXT, top_n=N)
    assert err.value.kind == BAD_RESPONSE


def _certain(row):
    """The prompt's own token (listed last) at p = 1 and rank 40,000; the others left out."""
    key = list(row)[-1]
    return {key: {**row[key], "logprob": 0.0, "rank": 40_000}}
