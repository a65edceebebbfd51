"""What every served-model client shares, whatever the server (vLLM, llama.cpp's llama-server,
Ollama, SGLang): the HTTP requests with their bounds, and the records a client returns. No Qt,
no torch.

Requests time out per read and as a whole (a deadline, however slowly a server trickles),
replies are bounded in size (``MAX_REPLY_BYTES``) and parsed by the project's bounded JSON
reader; 429 and 5xx answers (and refused connections) are retried with exponential backoff
(``Retry-After`` honoured); every failure becomes a ``RemoteError`` whose ``kind`` names it and
whose message says what to do. The API key lives only in the httpx client's headers; server
text is scrubbed of it before it is shown. Each backend's client (``engine.serve.remote`` for
vLLM, ``llama_server``, ``ollama``, ``sglang``) adds its routes and checks its replies with
its own schema in ``engine.validate``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit

import httpx

from engine.serve.deadline import transport as deadline_transport
from engine.serve.deadline import within
from engine.serve.remote_errors import (
    BAD_RESPONSE,
    SERVER_ERROR,
    UNAUTHORIZED,
    UNREACHABLE,
    KeySource,
    RemoteError,
    server_message,
    status_error,
)
from engine.serve.stream_events import at_most, with_finish  # noqa: F401 - re-exported
from engine.serve.stream_events import lines as _lines
from engine.validate import InputError
from engine.validate import served as check
from engine.validate.limits import (
    MAX_REPLY_BYTES,
    MAX_SERVED_TOKEN_ID,
    REPLY_BASE_BYTES,
    REPLY_BYTES_PER_CANDIDATE,
    REPLY_BYTES_PER_PROMPT_TOKEN,
    REQUEST_DEADLINE_S,
    RETRY_AFTER_MAX_S,
)
from engine.validate.served import printable
from engine.validate.served_step import check_step

RETRY_STATUS = frozenset({429, 500, 502, 503, 504})


# -- what comes back -------------------------------------------------------------------------


@dataclass(frozen=True)
class TopToken:
    """One candidate of a position: the token id and its log-probability (natural log)."""

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
    arrived: float = 0.0  # a stream's: time.perf_counter() when its event came (0: unknown)


@dataclass(frozen=True)
class ServedModelInfo:
    name: str
    max_model_len: int | None


class ServedClient(Protocol):
    """What the sessions use of a client, whichever server it speaks to."""

    kind: str
    model: str
    host: str
    base_url: str
    vocab_size: int | None

    def next_token(self, ids: Sequence[int], n_logprobs: int = 20) -> ServedToken: ...
    def stream(
        self, ids: Sequence[int], max_tokens: int, n_logprobs: int = 20, **sampling: Any
    ) -> Iterator[ServedToken]: ...
    def complete(
        self, ids: Sequence[int], max_tokens: int, n_logprobs: int = 0, **sampling: Any
    ) -> list[ServedToken]: ...
    def max_model_len(self) -> int | None: ...
    def close(self) -> None: ...


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


class HttpClient:
    """One server: its address, the key, the httpx client and the bounded requests.

    ``api_key`` overrides ``key_source``. ``transport`` is for tests (``httpx.MockTransport``).
    Subclasses set ``model`` and implement ``models()`` (for the "it serves: ..." message)."""

    kind = ""  # engine.serve.backends: which server this client speaks to
    model = ""

    def __init__(
        self,
        base_url: str,
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
            # the deadline covers connecting and the headers too (engine.serve.deadline)
            transport=transport if transport is not None else deadline_transport(verify),
        )
        self.requests = 0  # HTTP requests sent, retries included

    def __repr__(self) -> str:  # the key stays out
        return f"{type(self).__name__}({self.base_url!r}, model={self.model!r})"

    @property
    def host(self) -> str:
        return urlsplit(self.base_url).netloc

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> HttpClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def models(self) -> list[ServedModelInfo]:
        """The served models, as each backend's client asks for them (none known here: the
        bare client only probes which server it is)."""
        return []

    def note_ids(self, ids: Any) -> None:
        """Remember ids the local tokenizer does not know (shown in the status line)."""
        if self.vocab_size:
            self.unknown_ids.update(i for i in ids if i >= self.vocab_size)

    # -- requests ----------------------------------------------------------------------------

    def _send(
        self, method: str, path: str, body: dict[str, Any] | None = None,
        deadline: float | None = None, max_bytes: int = MAX_REPLY_BYTES,
    ) -> httpx.Response:  # fmt: skip
        """One request with retries; a non-2xx answer raises ``RemoteError``. ``deadline``:
        seconds for the whole request, retries and their waits included (default: the
        client's); ``max_bytes``: the most its answer may hold (``reply_budget``)."""
        seconds = deadline or self.deadline
        end = time.monotonic() + seconds
        for attempt in range(self.retries + 1):
            last = attempt == self.retries
            self.requests += 1
            response: httpx.Response | None = None
            try:
                response = self._fetch(method, path, body, seconds, end, max_bytes)
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                if last or time.monotonic() >= end:
                    raise self._unreachable(exc, end=end, seconds=seconds) from None
            except httpx.TransportError as exc:  # read timeout, dropped connection
                raise self._unreachable(exc, end=end, seconds=seconds) from None
            else:
                if response.status_code not in RETRY_STATUS or last:
                    self._check(response, path)
                    return response
                response.close()
            time.sleep(min(self._delay(attempt, response), max(0.0, end - time.monotonic())))
        raise AssertionError("unreachable")  # pragma: no cover

    def _post(
        self, path: str, body: dict[str, Any], deadline: float | None = None,
        max_bytes: int = MAX_REPLY_BYTES,
    ) -> Any:  # fmt: skip
        """POST and parse the JSON answer (bounded, checked later by the caller's schema)."""
        return self._json(self._send("POST", path, body, deadline, max_bytes))

    def _fetch(
        self, method: str, path: str, body: dict[str, Any] | None, seconds: float, end: float,
        max_bytes: int = MAX_REPLY_BYTES,
    ) -> httpx.Response:  # fmt: skip
        """One request: connected, its headers and its body read by ``end`` (a whole-request
        deadline, engine.serve.deadline) and inside the size bound."""
        short = seconds < self.deadline  # a tokenizer call: every read within its deadline
        timeout = httpx.Timeout(seconds) if short else httpx.USE_CLIENT_DEFAULT
        request = self._http.build_request(method, path, json=body, timeout=timeout)
        with within(end):
            response = self._http.send(request, stream=True)
        try:
            content = b"".join(self._chunks(response, end, seconds, max_bytes))
        finally:
            response.close()
        return httpx.Response(
            response.status_code, headers=response.headers, content=content, request=request
        )

    def reply_budget(self, prompt: int, positions: int, n_logprobs: int) -> int:
        """The most bytes an answer of ``positions`` positions with ``n_logprobs`` candidates
        each, after a prompt of ``prompt`` tokens (which some servers echo), may hold; more is
        refused as it arrives, never parsed (a 45 MB answer to a one-token request)."""
        per_position = (max(0, n_logprobs) + 1) * REPLY_BYTES_PER_CANDIDATE
        budget = REPLY_BASE_BYTES + prompt * REPLY_BYTES_PER_PROMPT_TOKEN + positions * per_position
        return min(MAX_REPLY_BYTES, budget)

    def _within_asked(self, served: list[ServedToken], asked: int) -> list[ServedToken]:
        """An answer's positions, refused when there are more than were asked for."""
        if len(served) > asked:
            raise RemoteError(
                BAD_RESPONSE,
                f"The server at {self.base_url} sent {len(served):,} positions for a request "
                f"of {asked:,}: more than asked is refused, nothing of it is shown.",
            )
        return served

    def _chunks(
        self, response: httpx.Response, end: float, seconds: float | None = None,
        max_bytes: int = MAX_REPLY_BYTES,
    ) -> Iterator[bytes]:  # fmt: skip
        """The body's bytes, refused past ``max_bytes`` or past ``end`` (the read timeout
        alone lets a server that sends a byte every few seconds hold on forever). Each read
        keeps the deadline itself (``within``), never across the ``yield``."""
        total = 0
        chunks = response.iter_bytes()
        while True:
            with within(end):
                chunk = next(chunks, None)
            if chunk is None:
                return
            total += len(chunk)
            if total > max_bytes:
                raise RemoteError(
                    BAD_RESPONSE,
                    f"The server at {self.base_url} sent more than the {_size(max_bytes)} limit "
                    "of this request (all its positions can need): the rest is not read.",
                )
            if time.monotonic() > end:
                raise self._past_deadline(seconds)
            yield chunk

    def _past_deadline(self, seconds: float | None) -> RemoteError:
        return RemoteError(
            UNREACHABLE,
            f"The server at {self.base_url} did not finish its answer within the deadline of "
            f"{seconds or self.deadline:g} s (connecting, headers and body together). The "
            "tokens so far are kept.",
        )

    def _events(self, path: str, body: dict[str, Any], seconds: float) -> Iterator[Any]:
        """A streamed answer's JSON objects as they arrive: server-sent events (``data: {...}``
        lines, ``[DONE]`` ends) or one object per line (Ollama). ``seconds``: the deadline of
        the whole stream. A server that dies mid-answer raises ``RemoteError(UNREACHABLE)``
        after the objects that arrived; an ``{"error": ...}`` object raises SERVER_ERROR."""
        self.requests += 1
        answering = False
        end = time.monotonic() + seconds
        try:
            request = self._http.build_request("POST", path, json=body)
            with within(end):  # connecting and the headers inside the stream's deadline
                response = self._http.send(request, stream=True)
            try:
                answering = True
                if response.status_code >= 400:
                    with within(end):
                        response.read()
                    self._check(response, path)
                for line in _lines(self._chunks(response, end, seconds)):
                    if line.startswith("error:"):  # llama-server's spelling of a failed stream
                        raise RemoteError(
                            SERVER_ERROR, f"The server failed: {self._scrub(line[6:500])}"
                        )
                    payload = line[5:].strip() if line.startswith("data:") else line.strip()
                    if not payload or line.startswith((":", "event:", "id:")):
                        continue
                    if payload == "[DONE]":
                        return
                    chunk = self._json(httpx.Response(200, content=payload.encode()))
                    if isinstance(chunk, dict) and "error" in chunk:
                        error = self._scrub(str(chunk["error"])[:500])
                        raise RemoteError(SERVER_ERROR, f"The server failed: {error}")
                    yield chunk
            finally:
                response.close()
        except httpx.TransportError as exc:
            raise self._unreachable(exc, mid_answer=answering, end=end, seconds=seconds) from None

    def _delay(self, attempt: int, response: httpx.Response | None) -> float:
        """Seconds before the next try: the server's ``Retry-After`` clamped to
        [0, RETRY_AFTER_MAX_S] (a negative, NaN or infinite one, or an HTTP date, is not a
        number of seconds: the backoff instead), else exponential backoff."""
        after = response.headers.get("retry-after") if response is not None else None
        if after is not None:
            try:
                seconds = float(after)
            except ValueError:
                seconds = math.nan
            if math.isfinite(seconds):
                return min(max(seconds, 0.0), RETRY_AFTER_MAX_S)
        return min(self.backoff * (2**attempt), RETRY_AFTER_MAX_S)

    def _unreachable(
        self, exc: Exception, mid_answer: bool = False, end: float | None = None,
        seconds: float | None = None,
    ) -> RemoteError:  # fmt: skip
        if end is not None and time.monotonic() >= end - 0.01:
            return self._past_deadline(seconds)
        if mid_answer:
            return RemoteError(
                UNREACHABLE,
                f"The connection to {self.base_url} broke in the middle of the answer "
                f"({type(exc).__name__}): the server may have stopped. The tokens so far are kept.",
            )
        said = str(exc).lower()
        hung_up = "disconnected" in said or "peer closed" in said  # died, not garbled
        if isinstance(exc, httpx.ProtocolError) and not hung_up:  # it answered, not in HTTP
            return RemoteError(
                BAD_RESPONSE,
                f"The server at {self.base_url} answered with a broken HTTP reply "
                f"({type(exc).__name__}: {printable(str(exc))[:200]}): it is running, but "
                "is it the server this address should name? The tokens so far are kept.",
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
        raise status_error(status, message, self.base_url, self.model, path, names, self.kind)

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

    def _broken(self, exc: InputError) -> RemoteError:
        """A reply that failed its schema or the step check, as the error the caller shows:
        the server named, what it sent, and that the run keeps what it had."""
        return RemoteError(
            BAD_RESPONSE,
            f"The server's answer is broken ({self.kind or 'server'} at {self.base_url}): {exc}. "
            "Nothing of it is shown; the tokens so far are kept.",
        )

    def _step(
        self, chosen: int, lp: float, top: Sequence[TopToken], finish: str | None,
        seconds: float, k: int,
    ) -> ServedToken:  # fmt: skip
        """One position as ids, through the one check of a served step (issue 56), as the
        ServedToken the sessions use (candidates best first)."""
        listed = [(t.token_id, t.logprob) for t in top]
        try:
            ranked = check_step(chosen, lp, listed, f"position {k + 1}", id_limit=self.id_limit)
        except InputError as exc:
            raise self._broken(exc) from None
        self.note_ids([chosen, *(i for i, _lp in ranked)])
        return ServedToken(chosen, lp, tuple(TopToken(i, v) for i, v in ranked), finish, seconds)


def _size(n: int) -> str:
    return f"{n / 2**20:.1f} MB" if n >= 2**20 else f"{n / 1024:.0f} KB"
