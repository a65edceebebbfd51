"""Which server answers at an address, and its client: the kind is detected from what the
server says about itself where it says it, else given by the user. No Qt, no torch.

Detection, cheapest first, each a documented field: ``GET /v1/models`` names its owner
(``owned_by``: "vllm", "llamacpp" for llama-server, "sglang"); Ollama answers
``GET /api/version`` with ``{"version": ...}``. A server that says none of these is spoken to
as vLLM (the OpenAI dialect the lab started with), and the line says it was a guess.
"""

from __future__ import annotations

from typing import Any

from engine.serve.backends import AUTO, LLAMA_SERVER, OLLAMA, SGLANG, VLLM, backend
from engine.serve.http import HttpClient
from engine.serve.remote_errors import RemoteError

OWNERS = {"vllm": VLLM, "llamacpp": LLAMA_SERVER, "sglang": SGLANG}


def detect(url: str, **options: Any) -> tuple[str, str]:
    """(kind, how it was known) of the server at ``url``. ``options``: ``HttpClient``'s."""
    probe = HttpClient(url, **{**options, "retries": min(1, options.get("retries", 1))})
    try:
        owner = _owner(probe)
        if owner in OWNERS:
            return OWNERS[owner], f"/v1/models says owned_by {owner!r}"
        if _ollama_version(probe):
            return OLLAMA, "it answers /api/version as Ollama does"
        return VLLM, "it did not say which server it is: spoken to as vLLM (OpenAI /v1)"
    finally:
        probe.close()


def _owner(probe: HttpClient) -> str:
    try:
        data = probe._json(probe._send("GET", "/v1/models"))
    except RemoteError as exc:
        if exc.kind == "unreachable" or exc.kind == "unauthorized":
            raise
        return ""
    rows = data.get("data") if isinstance(data, dict) else None
    first = rows[0] if isinstance(rows, list) and rows and isinstance(rows[0], dict) else {}
    owner = first.get("owned_by")
    return owner if isinstance(owner, str) and len(owner) < 100 else ""


def _ollama_version(probe: HttpClient) -> bool:
    try:
        data = probe._json(probe._send("GET", "/api/version"))
    except RemoteError:
        return False
    return isinstance(data, dict) and isinstance(data.get("version"), str)


def client_for(
    kind: str, url: str, model: str | None = None, **options: Any
) -> tuple[HttpClient, str]:
    """The client of ``kind`` (``auto``: detected) for ``url``, and how the kind was known."""
    how = "chosen"
    if kind == AUTO:
        kind, how = detect(url, **options)
    backend(kind)  # an unknown kind is refused with the list
    if kind == LLAMA_SERVER:
        from engine.serve.llama_server import LlamaServerClient as Client
    elif kind == OLLAMA:
        from engine.serve.ollama import OllamaClient as Client  # type: ignore[assignment]
    elif kind == SGLANG:
        from engine.serve.sglang import SGLangClient as Client  # type: ignore[assignment]
    else:
        from engine.serve.remote import RemoteClient as Client  # type: ignore[assignment]
    return Client(url, model, **options), how
