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
out, 429 and 5xx answers (and refused connections) are retried with exponential backoff, and
every failure becomes a ``RemoteError`` whose ``kind`` names it and whose message says what to
do.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx

KEY_ENV = "DECODING_LAB_API_KEY"
KEYRING_SERVICE = "decoding-lab"

# RemoteError.kind
UNREACHABLE = "unreachable"
UNAUTHORIZED = "unauthorized"
MODEL_NOT_FOUND = "model_not_found"
LOGPROBS_NOT_ALLOWED = "logprobs_not_allowed"
CONTEXT_EXCEEDED = "context_exceeded"
SERVER_ERROR = "server_error"
BAD_RESPONSE = "bad_response"
ERROR_KINDS = (
    UNREACHABLE, UNAUTHORIZED, MODEL_NOT_FOUND, LOGPROBS_NOT_ALLOWED, CONTEXT_EXCEEDED,
    SERVER_ERROR, BAD_RESPONSE,
)  # fmt: skip

TOKEN_ID_PREFIX = "token_id:"  # vLLM's spelling of a token with return_tokens_as_token_ids
RETRY_STATUS = frozenset({429, 500, 502, 503, 504})


class RemoteError(Exception):
    """A served model could not answer; ``kind`` is one of ``ERROR_KINDS``."""

    def __init__(self, kind: str, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.status = status


# -- the API key ---------------------------------------------------------------------------


@dataclass(frozen=True)
class KeySource:
    """Where the API key comes from, never the key itself: ``none``, ``env`` (the variable
    ``name``, default ``DECODING_LAB_API_KEY``) or ``keyring`` (service ``decoding-lab``, user
    ``name``, default: the endpoint's host). Safe to remember with a recent endpoint."""

    kind: str = "env"
    name: str = ""

    def __post_init__(self) -> None:
        if self.kind not in ("none", "env", "keyring"):
            raise ValueError(f"key source must be none, env or keyring, got {self.kind!r}")

    def resolve(self, base_url: str) -> str | None:
        """The key, or None when there is none (a server without --api-key needs none)."""
        if self.kind == "none":
            return None
        if self.kind == "env":
            return os.environ.get(self.name or KEY_ENV) or None
        import keyring
        from keyring.errors import KeyringError

        user = self.name or (urlsplit(base_url).hostname or base_url)
        try:
            return keyring.get_password(KEYRING_SERVICE, user)
        except KeyringError as exc:
            raise RemoteError(
                UNAUTHORIZED,
                f"The system keychain could not be read ({type(exc).__name__}): store the key "
                f"there under service {KEYRING_SERVICE!r}, user {user!r}, or set {KEY_ENV}.",
            ) from exc


def store_key(base_url: str, key: str, user: str = "") -> None:
    """Put a key in the OS keychain for ``KeySource("keyring")`` (the GUI's dialog uses it)."""
    import keyring

    keyring.set_password(KEYRING_SERVICE, user or (urlsplit(base_url).hostname or base_url), key)


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
    if urlsplit(url).scheme not in ("http", "https"):
        raise ValueError(f"The server URL must start with http:// or https://, got {url!r}")
    return url.removesuffix("/v1")


def _token_id(key: str) -> int:
    if not key.startswith(TOKEN_ID_PREFIX):
        raise RemoteError(
            BAD_RESPONSE,
            f"The server sent the token {key!r} as text, not as an id: it does not support "
            "return_tokens_as_token_ids (vLLM does), so the lab cannot tell which token it is.",
        )
    return int(key[len(TOKEN_ID_PREFIX) :])


def _positions(choice: dict[str, Any], finish: str | None, seconds: float) -> list[ServedToken]:
    """The completions API's ``logprobs`` block -> one ServedToken per generated token."""
    lp = choice.get("logprobs")
    if not isinstance(lp, dict) or not isinstance(lp.get("tokens"), list):
        raise RemoteError(BAD_RESPONSE, "The server sent no log-probabilities with the token.")
    tops = lp.get("top_logprobs") or [None] * len(lp["tokens"])
    out = []
    rows = zip(lp["tokens"], lp["token_logprobs"], tops, strict=True)
    for i, (key, logprob, top) in enumerate(rows):
        ranked = sorted(
            (TopToken(_token_id(k), _finite(v)) for k, v in (top or {}).items()),
            key=lambda t: (-t.logprob, t.token_id),
        )
        last = i == len(lp["tokens"]) - 1
        out.append(
            ServedToken(
                _token_id(key), _finite(logprob), tuple(ranked), finish if last else None, seconds
            )
        )
    return out


def _finite(value: Any) -> float:
    # The OpenAI format has no -inf; servers send -9999.0 or null for an impossible token.
    if value is None:
        return -math.inf
    return float(value)


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
    ) -> None:
        self.base_url = normalise_url(base_url)
        self.retries = max(0, int(retries))
        self.backoff = backoff
        key = api_key if api_key is not None else (key_source or KeySource()).resolve(self.base_url)
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

    def _send(self, method: str, path: str, body: dict[str, Any] | None = None) -> httpx.Response:
        """One request with retries; a non-2xx answer raises ``RemoteError``."""
        for attempt in range(self.retries + 1):
            last = attempt == self.retries
            self.requests += 1
            response: httpx.Response | None = None
            try:
                response = self._http.request(method, path, json=body)
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
        message = _server_message(response)
        low = message.lower()
        if status in (401, 403):
            raise RemoteError(
                UNAUTHORIZED,
                f"The server at {self.base_url} refused the request ({status}): the API key is "
                f"missing or wrong. Set {KEY_ENV} or store the key in the system keychain.",
                status,
            )
        if "logprob" in low and status < 500:
            raise RemoteError(
                LOGPROBS_NOT_ALLOWED,
                f"The server does not give that many log-probabilities ({message}). Ask for "
                "fewer candidates, or start it with a higher limit (vLLM: --max-logprobs 20).",
                status,
            )
        if status < 500 and any(
            s in low for s in ("context length", "max_model_len", "maximum context", "too long")
        ):
            raise RemoteError(
                CONTEXT_EXCEEDED,
                f"The text no longer fits the served model's context ({message}). Shorten the "
                "prompt or go back a few tokens.",
                status,
            )
        if status == 404 or ("model" in low and ("not exist" in low or "not found" in low)):
            if path.endswith("/models"):
                raise RemoteError(
                    BAD_RESPONSE,
                    f"{self.base_url} has no /v1/models: is it an OpenAI-compatible server?",
                    status,
                )
            raise RemoteError(
                MODEL_NOT_FOUND,
                f"The server has no model named {self.model!r} ({message}). "
                f"It serves: {', '.join(self._names()) or 'nothing it will list'}.",
                status,
            )
        if status >= 500:
            raise RemoteError(
                SERVER_ERROR, f"The server failed ({status}) after retries: {message}", status
            )
        raise RemoteError(BAD_RESPONSE, f"The server refused the request ({status}): {message}")

    def _names(self) -> list[str]:
        try:
            return [m.name for m in self.models()]
        except RemoteError:
            return []

    def _json(self, response: httpx.Response) -> Any:
        try:
            return response.json()
        except ValueError:
            raise RemoteError(
                BAD_RESPONSE, f"The server at {self.base_url} did not answer with JSON."
            ) from None

    # -- the API -----------------------------------------------------------------------------

    def models(self) -> list[ServedModelInfo]:
        """The models the server lists (``/v1/models``) with their context length when given."""
        data = self._json(self._send("GET", "/v1/models"))
        try:
            items = data["data"]
            out = [ServedModelInfo(str(m["id"]), m.get("max_model_len")) for m in items]
        except (KeyError, TypeError):
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
        choice = _first_choice(data)
        return _positions(choice, choice.get("finish_reason"), seconds)[0]

    def complete(
        self, ids: Sequence[int], max_tokens: int, n_logprobs: int = 0, **sampling: Any
    ) -> list[ServedToken]:
        """One non-streaming completion (the server's own greedy run when ``temperature=0``)."""
        body = {
            "model": self.model, "prompt": [int(i) for i in ids], "max_tokens": int(max_tokens),
            "logprobs": int(n_logprobs), "return_tokens_as_token_ids": True, **sampling,
        }  # fmt: skip
        data = self._json(self._send("POST", "/v1/completions", body))
        choice = _first_choice(data)
        return _positions(choice, choice.get("finish_reason"), 0.0)

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
        try:
            with self._http.stream("POST", "/v1/completions", json=body) as response:
                answering = True
                if response.status_code >= 400:
                    response.read()
                    self._check(response, "/v1/completions")
                for line in response.iter_lines():
                    if not line.startswith("data:"):
                        continue
                    payload = line[5:].strip()
                    if payload == "[DONE]":
                        return
                    try:
                        chunk = json.loads(payload)
                    except ValueError:
                        raise RemoteError(
                            BAD_RESPONSE, "The server sent a broken stream chunk."
                        ) from None
                    if "error" in chunk:
                        raise RemoteError(SERVER_ERROR, f"The server failed: {chunk['error']}")
                    choice = _first_choice(chunk)
                    if choice.get("logprobs") and choice["logprobs"].get("tokens"):
                        yield from _positions(choice, choice.get("finish_reason"), 0.0)
        except httpx.TransportError as exc:
            raise self._unreachable(exc, mid_answer=answering) from None

    def tokenize(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """The server's tokenizer (vLLM ``/tokenize``)."""
        body = {"model": self.model, "prompt": text, "add_special_tokens": add_special_tokens}
        data = self._json(self._send("POST", "/tokenize", body))
        try:
            return [int(i) for i in data["tokens"]]
        except (KeyError, TypeError):
            raise RemoteError(
                BAD_RESPONSE, "The server's /tokenize answer has no tokens."
            ) from None

    def detokenize(self, ids: Sequence[int]) -> str:
        """The server's detokenizer (vLLM ``/detokenize``)."""
        body = {"model": self.model, "tokens": [int(i) for i in ids]}
        data = self._json(self._send("POST", "/detokenize", body))
        try:
            return str(data["prompt"])
        except (KeyError, TypeError):
            raise RemoteError(
                BAD_RESPONSE, "The server's /detokenize answer has no text."
            ) from None


def _first_choice(data: Any) -> dict[str, Any]:
    try:
        choice = data["choices"][0]
    except (KeyError, IndexError, TypeError):
        raise RemoteError(BAD_RESPONSE, "The server's answer has no choices.") from None
    if not isinstance(choice, dict):
        raise RemoteError(BAD_RESPONSE, "The server's answer has no choices.")
    return choice


def _server_message(response: httpx.Response) -> str:
    """The error text a server sent ({"error": {"message": ...}} or {"message": ...})."""
    try:
        data = response.json()
    except ValueError:
        return response.text[:300].strip() or response.reason_phrase
    if isinstance(data, dict):
        err = data.get("error", data)
        if isinstance(err, dict):
            return str(err.get("message") or err.get("detail") or err)[:500]
        return str(err)[:500]
    return str(data)[:300]


class ServerTokenizer:
    """A tokenizer that asks the server (``/tokenize``, ``/detokenize``), for when no local copy
    of the served model's tokenizer is at hand. Single-token strings are cached."""

    chat_template = None

    def __init__(self, client: RemoteClient) -> None:
        self.client = client
        self._single: dict[int, str] = {}
        self.eos_token_id = None

    def __call__(self, text: str, add_special_tokens: bool = True) -> dict[str, list[int]]:
        return {"input_ids": self.client.tokenize(text, add_special_tokens)}

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        ids = list(ids)
        if len(ids) == 1:
            if ids[0] not in self._single:
                self._single[ids[0]] = self.client.detokenize(ids)
            return self._single[ids[0]]
        return self.client.detokenize(ids) if ids else ""

    def convert_ids_to_tokens(self, token_id: int) -> str:
        return f"<{token_id}>"
