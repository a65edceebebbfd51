"""A served model's errors and its API key: the kinds of failure the client names, and where
the key comes from (never the key itself). No Qt, no torch; split from ``remote`` so the client
reads as its requests."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx

from engine.validate.served import printable

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


class RemoteError(Exception):
    """A served model could not answer; ``kind`` is one of ``ERROR_KINDS``."""

    def __init__(self, kind: str, message: str, status: int | None = None) -> None:
        # A message may quote a server (its error text, a model id): its control characters
        # are escaped here, once for every caller, so a terminal or a dialog shows them and
        # never obeys them (a title change, a screen clear, a bell).
        super().__init__(printable(message))
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


def server_message(response: httpx.Response) -> str:
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


# How each server raises its limit of log-probabilities per token (engine.serve.backends).
LOGPROB_LIMITS = {
    "vllm": "start it with a higher limit (vLLM: --max-logprobs 20)",
    "llama-server": "llama-server has no limit of its own: check --n-probs in a proxy before it",
    "ollama": "Ollama gives at most 20 (top_logprobs)",
    "sglang": "SGLang takes any top_logprobs_num up to the vocabulary",
}


def status_error(
    status: int, message: str, base_url: str, model: str, path: str,
    names: Callable[[], list[str]], kind: str = "vllm",
) -> RemoteError:  # fmt: skip
    """The RemoteError for an HTTP error answer; ``message`` is the server's text, already
    scrubbed of the key; ``names`` lists the served models (asked only when needed); ``kind``:
    the server (its own advice in the messages)."""
    low = message.lower()
    if status in (401, 403):
        return RemoteError(
            UNAUTHORIZED,
            f"The server at {base_url} refused the request ({status}): the API key is "
            f"missing or wrong. Set {KEY_ENV} or store the key in the system keychain.",
            status,
        )
    if "logprob" in low and status < 500:
        return RemoteError(
            LOGPROBS_NOT_ALLOWED,
            f"The server does not give that many log-probabilities ({message}). Ask for "
            f"fewer candidates, or {LOGPROB_LIMITS.get(kind, LOGPROB_LIMITS['vllm'])}.",
            status,
        )
    if status < 500 and any(
        s in low
        for s in ("context length", "max_model_len", "maximum context", "too long", "context size")
    ):
        return RemoteError(
            CONTEXT_EXCEEDED,
            f"The text no longer fits the served model's context ({message}). Shorten the "
            "prompt or go back a few tokens.",
            status,
        )
    if status == 404 or ("model" in low and ("not exist" in low or "not found" in low)):
        if path.endswith("/models"):
            return RemoteError(
                BAD_RESPONSE,
                f"{base_url} has no /v1/models: is it an OpenAI-compatible server?",
                status,
            )
        return RemoteError(
            MODEL_NOT_FOUND,
            f"The server has no model named {model!r} ({message}). "
            f"It serves: {', '.join(names()) or 'nothing it will list'}.",
            status,
        )
    if status >= 500:
        return RemoteError(
            SERVER_ERROR, f"The server failed ({status}) after retries: {message}", status
        )
    return RemoteError(
        BAD_RESPONSE, f"The server refused the request ({status}): {message}", status
    )
