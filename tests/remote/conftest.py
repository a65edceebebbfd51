"""One real `vllm serve` for the session: the bundled SmolLM2 (fp32 transformers folder) on
127.0.0.1 at a free port, started with an API key (so 401 is testable on the same server) and
stopped at the end. Skips with the reason when vLLM cannot run here.

DECODING_LAB_VLLM_URL points the tests at a server already running instead (serving the
converted folder under its path as the name); the tests that kill the server or need its API
key then skip.

Likewise one real llama.cpp ``llama-server`` (built from source into .llama-server by
``make llama-server``) on the bundled SmolLM2 GGUF itself, for the tests marked
``llama_server``; it skips with the reason when the build is missing or does not run here."""

from __future__ import annotations

import os
from collections.abc import Iterator
from types import SimpleNamespace

import pytest

from engine.serve.llama_server_run import llama_server_problem, start_llama_server
from engine.serve.local_server import LocalServer
from engine.serve.remote_session import open_served
from engine.serve.vllm_server import VLLMServer, bundled_hf_folder, start_vllm, vllm_problem

API_KEY = "test-key-3b1f"  # only for this loopback server
START_TIMEOUT = float(os.environ.get("DECODING_LAB_VLLM_START_TIMEOUT", "900"))


@pytest.fixture(scope="session")
def hf_folder():
    return bundled_hf_folder()


@pytest.fixture(scope="session")
def vllm_server(hf_folder) -> Iterator[VLLMServer]:
    external = os.environ.get("DECODING_LAB_VLLM_URL")
    if external:
        key = os.environ.get("DECODING_LAB_API_KEY")
        yield SimpleNamespace(url=external, api_key=key, process=None, started_s=0.0)
        return
    venv = os.environ.get("DECODING_LAB_VLLM_VENV", ".venv-vllm")
    problem = vllm_problem(venv)
    if problem is not None:
        pytest.skip(f"vLLM cannot run here: {problem}")
    server = start_vllm(hf_folder, venv=venv, api_key=API_KEY, timeout=START_TIMEOUT)
    print(f"\n[vllm serve up in {server.started_s:.0f} s at {server.url}]")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def served(vllm_server, hf_folder):
    """The served model opened by the client (one per test module: a test may change its
    client's retries)."""
    bundle = open_served(vllm_server.url, str(hf_folder), api_key=vllm_server.api_key)
    yield bundle
    bundle.client.close()


@pytest.fixture(scope="session")
def llama_server() -> Iterator[LocalServer]:
    """llama-server on the bundled GGUF (Q4_1), one slot, one thread, an API key."""
    from engine.models.catalog import _smollm2_path

    folder = os.environ.get("DECODING_LAB_LLAMA_SERVER_DIR", ".llama-server")
    problem = llama_server_problem(folder)
    if problem is not None:
        pytest.skip(f"llama-server cannot run here: {problem}")
    server = start_llama_server(_smollm2_path(), folder=folder, api_key=API_KEY, timeout=120)
    print(f"\n[llama-server up in {server.started_s:.1f} s at {server.url}]")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def llama_served(llama_server, hf_folder):
    """The llama-server model opened by the client, its kind detected (one per module)."""
    bundle = open_served(llama_server.url, api_key=API_KEY, tokenizer=str(hf_folder))
    yield bundle
    bundle.client.close()


def pytest_collection_modifyitems(config, items):
    """Tests marked ``kills_server`` stop the session's vLLM server: they run after every other
    test of the session, whichever file holds them."""
    items.sort(key=lambda item: item.get_closest_marker("kills_server") is not None)
