"""A model served by vLLM (or any server speaking its dialect of the OpenAI ``/v1`` API):
the client the remote sessions use for it. No Qt, no torch. The requests themselves, their
bounds and the key handling are ``engine.serve.http``'s; the other servers have clients of
their own (``llama_server``, ``ollama``, ``sglang``; ``backends`` says what each returns).

What the lab needs from such a server is small: the next position's top-N log-probabilities for
a prompt given as token ids (``next_token``), a server-sampled stream with per-token top
log-probabilities (``stream``), and the tokenizer (``tokenize`` / ``detokenize``, vLLM's routes
at the server root). Prompts go as token-id lists and tokens come back as ids
(``return_tokens_as_token_ids``), so a branch continues from exactly the ids the lab holds.

The API key comes from the environment (``DECODING_LAB_API_KEY``) or the OS keychain
(``keyring``); it lives only in the HTTP client's headers: never in ``repr``, messages, settings
or exports. HTTPS certificates are verified unless the caller says otherwise. Replies are
checked field by field (``engine.validate.served``: finite log-probabilities at most 0, token
ids inside a bound), and every failure becomes a ``RemoteError`` whose ``kind`` names it and
whose message says what to do.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from typing import Any

from engine.serve.http import (  # noqa: F401 - the records, re-exported
    HttpClient,
    ServedModelInfo,
    ServedToken,
    TopToken,
    at_most,
    normalise_url,
)
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
from engine.validate.limits import STREAM_SECONDS_PER_TOKEN, TOKENIZER_DEADLINE_S
from engine.validate.served import TOKEN_ID_PREFIX  # noqa: F401 - re-exported


class RemoteClient(HttpClient):
    """One vLLM (OpenAI-compatible) server and one of its models.

    ``base_url``: the server root or its ``/v1`` URL. ``model``: the served model's name (None:
    the first of ``/v1/models``). The other keywords are ``HttpClient``'s."""

    kind = "vllm"

    def __init__(self, base_url: str, model: str | None = None, **options: Any) -> None:
        super().__init__(base_url, **options)
        self.model = model or self.models()[0].name

    def _served(self, data: Any, seconds: float = 0.0) -> list[ServedToken]:
        """A completion's checked positions as ServedTokens (unknown ids noted)."""
        try:
            rows = check.positions(data, self.id_limit)
        except InputError as exc:
            raise self._broken(exc) from None
        out = []
        for p in rows:
            top = tuple(TopToken(i, lp) for i, lp in p.top)
            out.append(ServedToken(p.token_id, p.logprob, top, p.finish_reason, seconds))
            self.note_ids([p.token_id, *(t.token_id for t in top)])
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
        budget = self.reply_budget(len(ids), 1, n_logprobs)
        data = self._json(self._send("POST", "/v1/completions", body, max_bytes=budget))
        seconds = time.perf_counter() - start
        served = self._within_asked(self._served(data, seconds), 1)
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
        budget = self.reply_budget(len(ids), int(max_tokens), n_logprobs)
        data = self._json(self._send("POST", "/v1/completions", body, max_bytes=budget))
        return self._within_asked(self._served(data), int(max_tokens))

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
        seconds = self.deadline + STREAM_SECONDS_PER_TOKEN * int(max_tokens)
        yield from at_most(self._streamed(body, seconds), int(max_tokens))  # the budget, ours

    def _streamed(self, body: dict[str, Any], seconds: float) -> Iterator[ServedToken]:
        for chunk in self._events("/v1/completions", body, seconds):
            if check.has_tokens(chunk):
                yield from self._served(chunk)

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
