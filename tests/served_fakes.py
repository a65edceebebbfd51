"""Servers that answer as llama-server, Ollama and SGLang do, from a tiny local model, for the
served-backend tests (httpx.MockTransport). Each reply has the shape the server's own
documentation gives; where the docs stop, its source (cited per class).

* llama-server: tools/server/README.md "POST /completion" (n_probs, post_sampling_probs,
  completion_probabilities with top_logprobs / top_probs, stop_type, the stream's events),
  "GET /v1/models" (owned_by "llamacpp", meta.n_ctx, meta.n_vocab), "/tokenize", "/detokenize";
  the sampler chain and its order from common/sampling.cpp (``samplers``).
* Ollama: docs/openapi.yaml (GenerateRequest: prompt, raw, options, logprobs, top_logprobs;
  GenerateResponse: response, done, done_reason, logprobs: Logprob {token, logprob, bytes,
  top_logprobs: TokenLogprob}); server/routes.go refuses top_logprobs > 20; the stream is one
  JSON object per line; /api/tags, /api/version.
* SGLang: docs/basic_usage/sampling_params.md (/generate: input_ids, sampling_params,
  return_logprob, top_logprobs_num, logprob_start_len, stream), meta_info's
  [logprob, token_id, text] triples as tokenizer_manager.py ``detokenize_logprob_tokens``
  builds them; /v1/models with owned_by "sglang".
"""

from __future__ import annotations

import json
import math

import httpx
import torch


class TinyModel:
    """Log-probabilities of a tiny model, the raw distribution every fake serves."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model

    def logprobs(self, ids: list[int]) -> torch.Tensor:
        with torch.no_grad():
            logits = self.model(torch.tensor([ids])).logits[0, -1].double()
        return logits.log_softmax(-1)  # [vocab]

    def prompt_logprobs(self, ids: list[int]) -> torch.Tensor:
        with torch.no_grad():
            logits = self.model(torch.tensor([ids])).logits[0].double()
        return logits.log_softmax(-1)  # [seq, vocab]: row i predicts ids[i + 1]


def _json(data, status: int = 200) -> httpx.Response:
    headers = {"content-type": "application/json"}
    return httpx.Response(status, text=json.dumps(data), headers=headers)


def llama_chain(lp: torch.Tensor, body: dict) -> torch.Tensor:
    """llama.cpp's chain as common/sampling.cpp builds it from a /completion body (the stages
    listed in ``samplers``, in that order), on the raw log-probabilities -> the probabilities
    after it (0 where cut)."""
    logits = lp.clone()
    for name in body.get("samplers", []):
        kept = torch.isfinite(logits)
        if name == "temperature":
            t = body["temperature"]
            logits = logits / t if t > 0 else torch.where(logits == logits.max(), 0.0, -math.inf)
        elif name == "top_k" and body["top_k"] > 0:
            cut = torch.topk(logits, min(body["top_k"], int(kept.sum()))).values[-1]
            logits = torch.where(logits >= cut, logits, -math.inf)
        elif name == "top_p" and body["top_p"] < 1:
            p = logits.softmax(-1)
            order = torch.argsort(p, descending=True)
            cum = torch.cumsum(p[order], 0)
            last = int((cum < body["top_p"]).sum()) + 1  # the first reaching p is kept
            keep = torch.zeros_like(kept)
            keep[order[:last]] = True
            logits = torch.where(keep, logits, -math.inf)
        elif name == "min_p" and body["min_p"] > 0:
            floor = logits.max() + math.log(body["min_p"])
            logits = torch.where(logits >= floor, logits, -math.inf)
    return logits.softmax(-1)


class FakeLlamaServer:
    """llama-server on a tiny model (one slot, n_vocab and n_ctx from the model)."""

    def __init__(self, tiny: TinyModel, vocab: int, n_ctx: int = 256, key: str | None = None):
        self.tiny, self.vocab, self.n_ctx, self.key = tiny, vocab, n_ctx, key
        self.requests: list[httpx.Request] = []
        self.mangle = None  # a function changing each /completion answer (hostile tests)
        self.eos = -1  # a token id that ends the answer with stop_type "eos"

    def _candidate(self, tid: int, value: float, post: bool) -> dict:
        return {"id": tid, "token": chr(tid % 95 + 32), "bytes": [tid % 95 + 32],
                ("prob" if post else "logprob"): value}  # fmt: skip

    def _position(self, ids: list[int], body: dict, gen: torch.Generator) -> dict:
        lp = self.tiny.logprobs(ids)
        post = bool(body.get("post_sampling_probs"))
        probs = llama_chain(lp, body)  # what the server samples from
        token = int(torch.multinomial(probs.float(), 1, generator=gen))
        if body.get("temperature", 0.8) <= 0:
            token = int(lp.argmax())
        n = body["n_probs"]
        if post:
            order = torch.argsort(probs, descending=True)[:n]
            top = [self._candidate(int(i), float(probs[i]), True) for i in order if probs[i] > 0]
            value = float(probs[token])
        else:
            values, order = torch.topk(lp, n)
            pairs = zip(values, order, strict=True)
            top = [self._candidate(int(i), float(v), False) for v, i in pairs]
            value = float(lp[token])
        entry = self._candidate(token, value, post)
        entry["top_probs" if post else "top_logprobs"] = top
        return entry

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if self.key and request.headers.get("authorization") != f"Bearer {self.key}":
            return _json({"error": {"code": 401, "message": "Invalid API Key"}}, 401)
        path = request.url.path
        if path == "/v1/models":
            meta = {"n_ctx": self.n_ctx, "n_vocab": self.vocab, "ftype": "Q4_1"}
            return _json({"object": "list", "data": [
                {"id": "/models/tiny.gguf", "object": "model", "owned_by": "llamacpp", "meta": meta}
            ]})  # fmt: skip
        body = json.loads(request.content)
        if path == "/tokenize":
            return _json({"tokens": [ord(c) % self.vocab for c in body["content"]]})
        if path == "/detokenize":
            return _json({"content": "".join(chr(i % 95 + 32) for i in body["tokens"])})
        return self._completion(body)

    def _completion(self, body: dict) -> httpx.Response:
        ids = list(body["prompt"])
        if any(i >= self.vocab for i in ids):
            return _json({"error": {"code": 400, "message": "Prompt contains invalid tokens"}}, 400)
        if len(ids) + body["n_predict"] > self.n_ctx:
            message = f"request ({len(ids)} tokens) exceeds the available context size"
            return _json({"error": {"code": 400, "message": message}}, 400)
        gen = torch.Generator().manual_seed(body.get("seed", 0) % 2**31)
        positions, stop = [], "limit"
        for _ in range(body["n_predict"]):
            positions.append(self._position(ids, body, gen))
            ids.append(positions[-1]["id"])
            if positions[-1]["id"] == self.eos:
                stop = "eos"
                break
        if body.get("stream"):
            events = [{"content": p["token"], "tokens": [p["id"]], "stop": False,
                       "completion_probabilities": [p]} for p in positions]  # fmt: skip
            events.append({"content": "", "tokens": [], "stop": True, "stop_type": stop})
            text = "".join(f"data: {json.dumps(e)}\n\n" for e in events)
            return httpx.Response(200, text=text, headers={"content-type": "text/event-stream"})
        answer = {"content": "", "tokens": [p["id"] for p in positions], "stop": True,
                  "stop_type": stop, "completion_probabilities": positions}  # fmt: skip
        return _json(self.mangle(answer) if self.mangle else answer)


class FakeOllama:
    """Ollama on a tiny model whose tokenizer the test gives (text in, pieces out)."""

    def __init__(self, tiny: TinyModel, tokenizer, name: str = "tiny:latest") -> None:
        self.tiny, self.tokenizer, self.name = tiny, tokenizer, name
        self.requests: list[dict] = []
        self.logprobs = True  # False: an Ollama older than 0.12.11 (no logprobs in replies)
        self.mangle = None

    def _piece(self, tid: int) -> str:
        return self.tokenizer.decode([tid])

    def _entry(self, tid: int, lp: float) -> dict:
        piece = self._piece(tid)
        return {"token": piece, "logprob": lp, "bytes": list(piece.encode())}

    def __call__(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/api/version":
            return _json({"version": "0.12.11"})
        if path == "/api/tags":
            return _json({"models": [{"name": self.name, "model": self.name, "size": 1}]})
        if path == "/v1/models":
            return _json({"object": "list", "data": [{"id": self.name, "owned_by": "library"}]})
        body = json.loads(request.content)
        self.requests.append(body)
        if body.get("top_logprobs", 0) > 20:
            return _json({"error": "top_logprobs must be between 0 and 20"}, 400)
        if body["model"] not in (self.name, self.name.removesuffix(":latest")):
            return _json({"error": f"model '{body['model']}' not found"}, 404)
        ids = self.tokenizer(body["prompt"], add_special_tokens=False)["input_ids"]
        lines = []
        for _ in range(body["options"]["num_predict"]):
            lp = self.tiny.logprobs(ids)
            values, order = torch.topk(lp, body["top_logprobs"])
            token = int(order[0])
            entry = self._entry(token, float(values[0]))
            pairs = zip(values, order, strict=True)
            entry["top_logprobs"] = [self._entry(int(i), float(v)) for v, i in pairs]
            line = {"model": self.name, "response": entry["token"], "done": False}
            if self.logprobs:
                line["logprobs"] = [entry]
            lines.append(line)
            ids.append(token)
        lines.append({"model": self.name, "response": "", "done": True, "done_reason": "length"})
        if body.get("stream"):
            text = "".join(json.dumps(x) + "\n" for x in lines)
            return httpx.Response(200, text=text, headers={"content-type": "application/x-ndjson"})
        answer = {"model": self.name, "response": "".join(x["response"] for x in lines),
                  "done": True, "done_reason": "length"}  # fmt: skip
        if self.logprobs:
            answer["logprobs"] = [x["logprobs"][0] for x in lines[:-1]]
        return _json(self.mangle(answer) if self.mangle else answer)


class FakeSGLang:
    """SGLang's /generate on a tiny model; ``temperature`` scales the log-probabilities it
    returns (SGLang's sampler does, before top-k / top-p / min-p), unless ``raw_flag``."""

    def __init__(self, tiny: TinyModel, vocab: int, incremental: bool = False) -> None:
        self.tiny, self.vocab, self.incremental = tiny, vocab, incremental
        self.requests: list[dict] = []
        self.raw_flag = False
        self.mangle = None

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            return _json({"object": "list", "data": [
                {"id": "tiny", "object": "model", "owned_by": "sglang", "max_model_len": 256}
            ]})  # fmt: skip
        body = json.loads(request.content)
        self.requests.append(body)
        params, ids = body["sampling_params"], list(body["input_ids"])
        n = body["top_logprobs_num"]
        t = params.get("temperature", 1.0)
        scale = 1.0 if t == 0 or self.raw_flag else t
        gen = torch.Generator().manual_seed(0)
        meta = {"output_token_logprobs": [], "output_top_logprobs": [], "completion_tokens": 0}
        if body.get("logprob_start_len") == 0:
            meta.update(self._prompt(ids, n))
        events = []
        for _ in range(params["max_new_tokens"]):
            lp = (self.tiny.logprobs(ids) / scale).log_softmax(-1)
            draw = int(torch.multinomial(lp.exp(), 1, generator=gen))
            token = int(lp.argmax()) if t == 0 else draw
            values, order = torch.topk(lp, n)
            meta["output_token_logprobs"].append([float(lp[token]), token, None])
            pairs = zip(values, order, strict=True)
            meta["output_top_logprobs"].append([[float(v), int(i), None] for v, i in pairs])
            meta["completion_tokens"] += 1
            ids.append(token)
            events.append(json.loads(json.dumps(meta)))
        meta["finish_reason"] = {"type": "length", "length": params["max_new_tokens"]}
        if body.get("stream"):
            events[-1]["finish_reason"] = meta["finish_reason"]
            if self.incremental:  # only the new part of each list
                for k, e in enumerate(events):
                    e["output_token_logprobs"] = e["output_token_logprobs"][k:]
                    e["output_top_logprobs"] = e["output_top_logprobs"][k:]
            text = "".join(f"data: {json.dumps({'text': '', 'meta_info': e})}\n\n" for e in events)
            return httpx.Response(200, text=text + "data: [DONE]\n\n")
        answer = {"text": "", "output_ids": ids, "meta_info": meta}
        return _json(self.mangle(answer) if self.mangle else answer)

    def _prompt(self, ids: list[int], n: int) -> dict:
        rows = self.tiny.prompt_logprobs(ids)
        tokens, tops = [[None, ids[0], None]], [None]
        for i in range(1, len(ids)):
            row = rows[i - 1]
            values, order = torch.topk(row, n)
            tokens.append([float(row[ids[i]]), ids[i], None])
            tops.append([[float(v), int(k), None] for v, k in zip(values, order, strict=True)])
        return {"input_token_logprobs": tokens, "input_top_logprobs": tops}


class PieceTokenizer:
    """A tokenizer whose every id spells "[id]", except that id 301 spells "[300]" too: a piece
    two ids share (Ollama answers pieces; the lab cannot tell which id such a piece was)."""

    eos_token_id = None
    chat_template = None
    SHARED = (300, 301)

    def __init__(self, vocab: int) -> None:
        self.vocab = vocab

    def __len__(self) -> int:
        return self.vocab

    def piece(self, i: int) -> str:
        return f"[{self.SHARED[0] if i in self.SHARED else i}]"

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        return "".join(self.piece(int(i)) for i in ids)

    def convert_ids_to_tokens(self, i: int) -> str:
        return self.piece(int(i))

    def __call__(self, text: str, add_special_tokens: bool = True) -> dict:
        import re

        return {"input_ids": [int(m) for m in re.findall(r"\[(\d+)\]", text)]}


def fake_bundle(
    kind: str, model: torch.nn.Module, url: str = "http://lab-box:8080", tokenizer=None, **kw
):
    """A served bundle of ``kind`` (llama-server, ollama or sglang) whose client talks to the
    fake above over an httpx.MockTransport, with ``tokenizer`` (default PieceTokenizer) as its
    local tokenizer: what ``open_served`` would give for that server (``kw``: server_sampler,
    raw_flag)."""
    from engine.serve.llama_server import LlamaServerClient
    from engine.serve.ollama import OllamaClient, PieceMap
    from engine.serve.remote_session import RemoteBundle
    from engine.serve.sglang import SGLangClient

    tiny, vocab = TinyModel(model), model.config.vocab_size
    tok = tokenizer if tokenizer is not None else PieceTokenizer(vocab)
    if kind == "ollama":
        client = OllamaClient(url, transport=httpx.MockTransport(FakeOllama(tiny, tok)))
        client.pieces, client.text_of = PieceMap(tok), tok.decode
    elif kind == "sglang":
        client = SGLangClient(url, transport=httpx.MockTransport(FakeSGLang(tiny, vocab)))
        client.vocab_size = vocab
    else:
        client = LlamaServerClient(url, transport=httpx.MockTransport(FakeLlamaServer(tiny, vocab)))
    return RemoteBundle(
        model=None, tokenizer=tok, kind="decoder-only", device=torch.device("cpu"),
        dtype=torch.float32, name=f"tiny @ {client.host}", source=url, context_length=256,
        eos_token_ids=(), extra={"served": True}, client=client, n_logprobs=20, server_kind=kind,
        **kw,
    )  # fmt: skip


# -- one served step in each backend's shape (issue 56: the shared step check and its fuzz) ----

STEP_KINDS = ("vllm", "llama-server", "ollama", "sglang")


def _vllm_key(tid: int, seen: set[int]) -> str:
    """``token_id:N``; an id already used gets a leading zero, so that a JSON object (whose keys
    are unique) can still list one id twice, as a hostile server can."""
    key = f"token_id:{tid}"
    while key in seen:
        key = key.replace(":", ":0", 1)
    seen.add(key)
    return key


def step_reply(kind: str, chosen: int, value, top: list, model: str = "m", post: bool = False):
    """One position's reply in ``kind``'s documented shape: the chosen id with ``value`` (a
    log-probability, or llama-server's post-sampling probability with ``post``) and ``top``
    [(id, value)] in the order given. Values are sent as they are (NaN, strings, ...)."""
    if kind == "vllm":
        seen: set[str] = set()
        block = {
            "tokens": [f"token_id:{chosen}"], "token_logprobs": [value],
            "top_logprobs": [{_vllm_key(t, seen): v for t, v in top}],
        }  # fmt: skip
        return {"choices": [{"logprobs": block, "finish_reason": "length"}]}
    if kind == "llama-server":
        field = "prob" if post else "logprob"
        cands = [{"id": t, "token": f"[{t}]", field: v} for t, v in top]
        row = {"id": chosen, "token": f"[{chosen}]", field: value,
               ("top_probs" if post else "top_logprobs"): cands}  # fmt: skip
        return {"content": "", "tokens": [chosen], "stop": True, "stop_type": "limit",
                "completion_probabilities": [row]}  # fmt: skip
    if kind == "ollama":

        def entry(t, v):
            piece = f"[{t}]"
            return {"token": piece, "logprob": v, "bytes": list(piece.encode())}

        row = {**entry(chosen, value), "top_logprobs": [entry(t, v) for t, v in top]}
        return {"model": model, "response": f"[{chosen}]", "done": True, "done_reason": "length",
                "logprobs": [row]}  # fmt: skip
    meta = {
        "output_token_logprobs": [[value, chosen, None]],
        "output_top_logprobs": [[[v, t, None] for t, v in top]],
        "completion_tokens": 1, "finish_reason": {"type": "length"},
    }  # fmt: skip
    return {"text": "", "meta_info": meta}


def step_client(kind: str, handle=None, vocab: int = 1000, model: str = "m", **kw):
    """A client of ``kind`` over an httpx.MockTransport: the model list as the server gives
    it, and every generation request answered by ``handle(request)`` (default: 404)."""
    from engine.serve.llama_server import LlamaServerClient
    from engine.serve.ollama import OllamaClient, PieceMap
    from engine.serve.remote import RemoteClient
    from engine.serve.sglang import SGLangClient

    def route(request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/api/tags":
            return _json({"models": [{"name": f"{model}:latest"}]})
        if path == "/v1/models":
            return _json({"data": [{"id": model, "meta": {"n_vocab": vocab}}]})
        if handle is None:
            return _json({"error": "not here"}, 404)
        return handle(request)

    transport = httpx.MockTransport(route)
    options = {"transport": transport, "backoff": 0.0, **kw}
    if kind == "ollama":
        client = OllamaClient("http://lab-box:8080", model, **options)
        tok = PieceTokenizer(vocab)
        client.pieces, client.text_of = PieceMap(tok), tok.decode
    elif kind == "sglang":
        client = SGLangClient("http://lab-box:8080", model, **options)
    elif kind == "llama-server":
        client = LlamaServerClient("http://lab-box:8080", model, **options)
    else:
        client = RemoteClient("http://lab-box:8080", model, **options)
    client.id_limit = vocab
    return client


class RawServer:
    """A server on 127.0.0.1 at a free port that answers every connection with ``reply(conn,
    stop)`` writing raw bytes (headers trickled, a broken header line): what httpx's mock
    transport cannot fake. Bounded: each connection's handler must return once ``stop`` is
    set, and ``close`` sets it and joins the thread within a few seconds."""

    def __init__(self, reply) -> None:
        import socket
        import threading

        self.reply, self.stop = reply, threading.Event()
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.1)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(1.0)
                try:
                    conn.recv(65536)  # the request (small: one JSON body)
                    self.reply(conn, self.stop)
                except OSError:  # the client gave up and closed: fine
                    pass

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=5)
        self.sock.close()
