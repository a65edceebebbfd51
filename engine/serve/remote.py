"""A model served elsewhere, behind an OpenAI-compatible ``/v1`` endpoint (vLLM, SGLang,
llama.cpp's server): the HTTP client the remote sessions use. No Qt, no torch.

What the lab needs from such a server is small: the next position's top-N log-probabilities for
a prompt given as token ids (``next_token``), a server-sampled stream with per-token top
log-probabilities (``stream``), and the tokenizer (``tokenize`` / ``detokenize``, vLLM's routes
at the server root). Prompts go as token-id lists and tokens come back as ids
(``return_tokens_as_token_ids``), so a branch continues from exactly the ids the lab holds.

The API key comes from the environment (``DECODING_LAB_API_KEY``) or the OS keychain
(``keyring``); it lives only in the HTTP client's headers: never in ``repr``, messages, settings
or exports. HTTPS certificates are verified unless the caller says otherwise. Requests time
out per read and as a whole (a deadline, however slowly a server trickles), replies are
bounded in size and checked field by field (``engine.validate.served``: finite log-probabilities
at most 0, token ids inside a bound), an address holding a user name or password is refused,
server text is scrubbed of the key before it is shown, 429 and 5xx answers (and refused
connections) are retried with exponential backoff, and every failure becomes a
``RemoteError`` whose ``kind`` names it and whose message says what to do.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx

from engine.serve.remote_errors import (  # noqa: F401 - the client's names, re-exported
    BAD_RESPONSE,
    CONTEXT_EXCEEDED,
    ERROR_KINDS,
    KEY_ENV,
    KEYRING_SERVICE,
    LOGPROBS_NOT_ALLOWED,
    MODEL_NOT_FOUND,
    SERVER_ERROR,
    UNAUTHORIZED,
    UNREACHABLE,
    KeySource,
    RemoteError,
    server_message,
    status_error,
    store_key,
)
from engine.validate import InputError
from engine.validate import served as check
from engine.validate.limits import (
    MAX_REPLY_BYTES,
    MAX_SERVED_TOKEN_ID,
    REQUEST_DEADLINE_S,
    STREAM_SECONDS_PER_TOKEN,
    TOKENIZER_DEADLINE_S,
)
from engine.validate.served import TOKEN_ID_PREFIX  # noqa: F401 - re-exported

RETRY_STATUS = frozenset({429, 500, 502, 503, 504})


# -- what comes back -------------------------------------------------------------------------


@dataclass(frozen=True)
class TopToken:
    """One candidate of a position: the token id and its raw log-probability (natural log)."""

    token_id: int
    logprob: float


@dataclass(frozen=True)
class ServedToken:
    """One position as the server reports it: the token it chose, that token's log-probability,
    the top-N candidates (best first) and why it stopped, if it did."""

    token_id: int
    logprob: float
    top: tuple[TopToken, ...]
    finish_reason: str | None = None
    seconds: float = 0.0  # the request's latency (next_token); 0 in a stream


@dataclass(frozen=True)
class ServedModelInfo:
    name: str
    max_model_len: int | None


def normalise_url(url: str) -> str:
    """``http://host:8000``, ``.../v1`` or ``.../v1/`` -> ``http://host:8000`` (the root)."""
    url = url.strip().rstrip("/")
    if not url:
        raise ValueError("The server URL is empty.")
    if "://" not in url:
        url = "http://" + url
    if check.has_credentials(url):  # refused before it can reach a setting, file or message
        raise RemoteError(UNAUTHORIZED, check.CREDENTIALS_REFUSED.format(url=check.redact_url(url)))
    if urlsplit(url).scheme not in ("http", "https"):
        raise ValueError(f"The server URL must start with http:// or https://, got {url!r}")
    return url.removesuffix("/v1")


# -- the client ------------------------------------------------------------------------------


class RemoteClient:
    """One OpenAI-compatible server and one of its models.

    ``base_url``: the server root or its ``/v1`` URL. ``model``: the served model's name (None:
    the first of ``/v1/models``). ``api_key`` overrides ``key_source``. ``transport`` is for
    tests (``httpx.MockTransport``)."""

    def __init__(
        self,
        base_url: str,
        model: str | None = None,
        *,
        key_source: KeySource | None = None,
        api_key: str | None = None,
        verify: bool = True,
        timeout: float = 60.0,
        connect_timeout: float = 5.0,
        retries: int = 3,
        backoff: float = 0.5,
        transport: httpx.BaseTransport | None = None,
        deadline: float = REQUEST_DEADLINE_S,
    ) -> None:
        self.base_url = normalise_url(base_url)
        self.retries = max(0, int(retries))
        self.backoff = backoff
        self.deadline = deadline  # seconds for a whole request, however slowly it trickles
        # Ids at or past id_limit are refused (a broken server); ids at or past vocab_size (the
        # local tokenizer's, when the owner sets it) are kept but noted in unknown_ids.
        self.id_limit = MAX_SERVED_TOKEN_ID
        self.vocab_size: int | None = None
        self.unknown_ids: set[int] = set()
        key = api_key if api_key is not None else (key_source or KeySource()).resolve(self.base_url)
        # Server text is scrubbed of the key before it is shown; a closure, so the key stays
        # out of vars() and repr like the rest of the client.
        secrets = (f"Bearer {key}", key) if key else ()
        self._scrub = lambda text: check.scrub(text, secrets)
        self._http = httpx.Client(
            base_url=self.base_url,
            headers={"Authorization": f"Bearer {key}"} if key else {},
            timeout=httpx.Timeout(timeout, connect=connect_timeout),
            verify=verify,
            transport=transport,
        )
        self.requests = 0  # HTTP requests sent, retries included
        self.model = model or self.models()[0].name

    def __repr__(self) -> str:  # the key stays out
        return f"RemoteClient({self.base_url!r}, model={self.model!r})"

    @property
    def host(self) -> str:
        return urlsplit(self.base_url).netloc

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> RemoteClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- requests ----------------------------------------------------------------------------

    def _send(
        self, method: str, path: str, body: dict[str, Any] | None = None,
        deadline: float | None = None,
    ) -> httpx.Response:  # fmt: skip
        """One request with retries; a non-2xx answer raises ``RemoteError``. ``deadline``:
        seconds for the whole request (default: the client's)."""
        for attempt in range(self.retries + 1):
            last = attempt == self.retries
            self.requests += 1
            response: httpx.Response | None = None
            try:
                response = self._fetch(method, path, body, deadline or self.deadline)
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                if last:
                    raise self._unreachable(exc) from None
            except httpx.TransportError as exc:  # read timeout, dropped connection
                raise self._unreachable(exc) from None
            else:
                if response.status_code not in RETRY_STATUS or last:
                    self._check(response, path)
                    return response
                response.close()
            time.sleep(self._delay(attempt, response))
        raise AssertionError("unreachable")  # pragma: no cover

    def _fetch(
        self, method: str, path: str, body: dict[str, Any] | None, deadline: float
    ) -> httpx.Response:
        """One request, its body read within the deadline and the size bound."""
        short = deadline < self.deadline  # a tokenizer call: every read within its deadline
        timeout = httpx.Timeout(deadline) if short else httpx.USE_CLIENT_DEFAULT
        request = self._http.build_request(method, path, json=body, timeout=timeout)
        response = self._http.send(request, stream=True)
        try:
            content = b"".join(self._chunks(response, time.monotonic() + deadline, deadline))
        finally:
            response.close()
        return httpx.Response(
            response.status_code, headers=response.headers, content=content, request=request
        )

    def _chunks(
        self, response: httpx.Response, deadline: float, seconds: float | None = None
    ) -> Iterator[bytes]:
        """The body's bytes, refused past ``MAX_REPLY_BYTES`` or past ``deadline`` (the read
        timeout alone lets a server that sends a byte every few seconds hold on forever)."""
        total = 0
        for chunk in response.iter_bytes():
            total += len(chunk)
            if total > MAX_REPLY_BYTES:
                raise RemoteError(
                    BAD_RESPONSE,
                    f"The server's answer is over the {MAX_REPLY_BYTES >> 20} MB limit.",
                )
            if time.monotonic() > deadline:
                raise RemoteError(
                    UNREACHABLE,
                    f"The server at {self.base_url} did not finish its answer within the "
                    f"deadline of {seconds or self.deadline:g} s. The tokens so far are kept.",
                )
            yield chunk

    def _delay(self, attempt: int, response: httpx.Response | None) -> float:
        after = response.headers.get("retry-after") if response is not None else None
        if after is not None:
            try:
                return min(float(after), 30.0)
            except ValueError:
                pass
        return self.backoff * (2**attempt)

    def _unreachable(self, exc: Exception, mid_answer: bool = False) -> RemoteError:
        if mid_answer:
            return RemoteError(
                UNREACHABLE,
                f"The connection to {self.base_url} broke in the middle of the answer "
                f"({type(exc).__name__}): the server may have stopped. The tokens so far are kept.",
            )
        if isinstance(exc, httpx.TimeoutException) and not isinstance(exc, httpx.ConnectTimeout):
            return RemoteError(
                UNREACHABLE,
                f"The server at {self.base_url} stopped answering ({type(exc).__name__}): it "
                "may be overloaded or have stopped. The tokens so far are kept.",
            )
        return RemoteError(
            UNREACHABLE,
            f"Cannot reach the server at {self.base_url} ({type(exc).__name__}): check that it "
            "is running and the URL and port are right. The tokens so far are kept.",
        )

    def _check(self, response: httpx.Response, path: str) -> None:
        status = response.status_code
        if status < 400:
            return
        message = self._scrub(server_message(response))
        names = self._names if status == 404 or "model" in message.lower() else list
        raise status_error(status, message, self.base_url, self.model, path, names)

    def _names(self) -> list[str]:
        try:
            return [m.name for m in self.models()]
        except RemoteError:
            return []

    def _json(self, response: httpx.Response) -> Any:
        from engine.validate.jsonio import parse_json

        try:
            text = response.content.decode("utf-8")
            return parse_json(text, "", MAX_REPLY_BYTES)
        except (UnicodeDecodeError, InputError):
            raise RemoteError(
                BAD_RESPONSE, f"The server at {self.base_url} did not answer with JSON."
            ) from None

    def _served(self, data: Any, seconds: float = 0.0) -> list[ServedToken]:
        """A completion's checked positions as ServedTokens (unknown ids noted)."""
        try:
            rows = check.positions(data, self.id_limit)
        except InputError as exc:
            raise RemoteError(BAD_RESPONSE, f"The server's answer is broken: {exc}.") from None
        out = []
        for p in rows:
            top = tuple(TopToken(i, lp) for i, lp in p.top)
            out.append(ServedToken(p.token_id, p.logprob, top, p.finish_reason, seconds))
            if self.vocab_size:
                self.unknown_ids.update(
                    i for i in (p.token_id, *(t.token_id for t in top)) if i >= self.vocab_size
                )
        return out

    # -- the API -----------------------------------------------------------------------------

    def models(self) -> list[ServedModelInfo]:
        """The models the server lists (``/v1/models``) with their context length when given."""
        data = self._json(self._send("GET", "/v1/models"))
        try:
            out = [ServedModelInfo(name, size) for name, size in check.models(data)]
        except InputError:
            raise RemoteError(
                BAD_RESPONSE, "The server's model list is not in the /v1 format."
            ) from None
        if not out:
            raise RemoteError(MODEL_NOT_FOUND, f"The server at {self.base_url} serves no model.")
        return out

    def max_model_len(self) -> int | None:
        return next((m.max_model_len for m in self.models() if m.name == self.model), None)

    def next_token(self, ids: Sequence[int], n_logprobs: int = 20) -> ServedToken:
        """The next position after ``ids``: the server's greedy token and the top
        ``n_logprobs`` candidates by raw log-probability."""
        body = {
            "model": self.model, "prompt": [int(i) for i in ids], "max_tokens": 1,
            "temperature": 0.0, "logprobs": int(n_logprobs), "return_tokens_as_token_ids": True,
        }  # fmt: skip
        start = time.perf_counter()
        data = self._json(self._send("POST", "/v1/completions", body))
        seconds = time.perf_counter() - start
        served = self._served(data, seconds)
        if not served:
            raise RemoteError(BAD_RESPONSE, "The server's answer has no token.")
        return served[0]

    def complete(
        self, ids: Sequence[int], max_tokens: int, n_logprobs: int = 0, **sampling: Any
    ) -> list[ServedToken]:
        """One non-streaming completion (the server's own greedy run when ``temperature=0``)."""
        body = {
            "model": self.model, "prompt": [int(i) for i in ids], "max_tokens": int(max_tokens),
            "logprobs": int(n_logprobs), "return_tokens_as_token_ids": True, **sampling,
        }  # fmt: skip
        return self._served(self._json(self._send("POST", "/v1/completions", body)))

    def stream(
        self, ids: Sequence[int], max_tokens: int, n_logprobs: int = 20, **sampling: Any
    ) -> Iterator[ServedToken]:
        """A server-sampled completion, one token at a time as the server sends them.
        ``sampling``: the completions parameters (temperature, top_p, top_k, min_p, seed, ...).
        A server that dies mid-stream raises ``RemoteError(UNREACHABLE)`` after the tokens that
        arrived."""
        body = {
            "model": self.model, "prompt": [int(i) for i in ids], "max_tokens": int(max_tokens),
            "logprobs": int(n_logprobs), "return_tokens_as_token_ids": True, "stream": True,
            **sampling,
        }  # fmt: skip
        self.requests += 1
        answering = False
        deadline = time.monotonic() + self.deadline + STREAM_SECONDS_PER_TOKEN * int(max_tokens)
        try:
            with self._http.stream("POST", "/v1/completions", json=body) as response:
                answering = True
                if response.status_code >= 400:
                    response.read()
                    self._check(response, "/v1/completions")
                for line in _lines(self._chunks(response, deadline)):
                    if not line.startswith("data:"):
                        continue
                    payload = line[5:].strip()
                    if payload == "[DONE]":
                        return
                    chunk = self._json(httpx.Response(200, content=payload.encode()))
                    if isinstance(chunk, dict) and "error" in chunk:
                        error = self._scrub(str(chunk["error"])[:500])
                        raise RemoteError(SERVER_ERROR, f"The server failed: {error}")
                    if check.has_tokens(chunk):
                        yield from self._served(chunk)
        except httpx.TransportError as exc:
            raise self._unreachable(exc, mid_answer=answering) from None

    def tokenize(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """The server's tokenizer (vLLM ``/tokenize``)."""
        body = {"model": self.model, "prompt": text, "add_special_tokens": add_special_tokens}
        data = self._json(self._send("POST", "/tokenize", body, TOKENIZER_DEADLINE_S))
        try:
            return check.token_ids(data, self.id_limit)
        except InputError:
            raise RemoteError(
                BAD_RESPONSE, "The server's /tokenize answer has no tokens."
            ) from None

    def detokenize(self, ids: Sequence[int]) -> str:
        """The server's detokenizer (vLLM ``/detokenize``), within ``TOKENIZER_DEADLINE_S``."""
        body = {"model": self.model, "tokens": [int(i) for i in ids]}
        data = self._json(self._send("POST", "/detokenize", body, TOKENIZER_DEADLINE_S))
        try:
            text = data["prompt"]
            if not isinstance(text, str):
                raise TypeError
            return text
        except (KeyError, TypeError):
            raise RemoteError(
                BAD_RESPONSE, "The server's /detokenize answer has no text."
            ) from None


def _lines(chunks: Iterator[bytes]) -> Iterator[str]:
    """Server-sent-event lines from a byte stream (decoded leniently: a broken byte becomes
    U+FFFD and the JSON check refuses what matters)."""
    buffer = b""
    for chunk in chunks:
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            yield line.rstrip(b"\r").decode("utf-8", "replace")
    if buffer:
        yield buffer.decode("utf-8", "replace")
