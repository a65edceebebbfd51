"""Start and stop a local llama.cpp ``llama-server`` (built from source by
resources/remote/setup_llama_server.sh into ``.llama-server/``) on 127.0.0.1, for the
served-model tests; no Qt. The command is the one the README gives:

    .llama-server/bin/llama-server -m <gguf> --host 127.0.0.1 --port <port> \\
        -c 2048 --parallel 1 --threads 2

One slot (``--parallel 1``), so every request of a run meets the prompt cache of the last and
the answers do not depend on which slot took them; one thread, because ggml's threads wait for
each other by spinning and on a shared 2-core machine a second thread made each token ~4 s
(measured: 4.8 s per explore step with 2 threads under another process's load, 0.05 s with 1).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

import httpx

from engine.serve.local_server import LocalServer, free_port, launch, wait_until_up

DEFAULT_DIR = ".llama-server"


def llama_server_problem(folder: str | Path = DEFAULT_DIR) -> str | None:
    """Why llama-server cannot run from ``folder`` here, or None when it can."""
    binary = Path(folder) / "bin" / "llama-server"
    if not binary.exists():
        return f"no llama-server at {binary}: run `make llama-server` (or make test-llama-server)"
    try:
        out = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{binary} does not start ({type(exc).__name__}: {exc})"
    if out.returncode != 0:
        tail = (out.stderr or out.stdout).strip().splitlines()[-3:]
        return f"{binary} --version exited with {out.returncode}: {' | '.join(tail)}"
    return None


def start_llama_server(
    gguf: str | Path,
    *,
    folder: str | Path = DEFAULT_DIR,
    port: int | None = None,
    api_key: str | None = None,
    context: int = 2048,
    threads: int = 1,
    timeout: float = 120.0,
    log_path: str | Path | None = None,
    extra: Sequence[str] = (),
) -> LocalServer:
    """Start ``llama-server -m gguf`` on 127.0.0.1 and wait (at most ``timeout`` s) until
    ``/health`` says the model is loaded. ``api_key``: passed in the environment
    (``LLAMA_API_KEY``), not on the command line. Raises RuntimeError with the log's tail when
    it does not come up. ``extra``: more options (the exact-reference tests run
    ``-fa off -ctk f32 -ctv f32``: no flash attention, a float32 KV cache)."""
    port = port or free_port()
    log = Path(log_path) if log_path else Path(f"/tmp/decoding-lab-llama-server-{port}.log")
    env = dict(os.environ)
    env.pop("LLAMA_API_KEY", None)
    if api_key:
        env["LLAMA_API_KEY"] = api_key
    cmd = [
        str(Path(folder) / "bin" / "llama-server"), "-m", str(gguf), "--host", "127.0.0.1",
        "--port", str(port), "-c", str(context), "--parallel", "1", "--threads", str(threads),
        "--no-webui", *extra,
    ]  # fmt: skip
    server = LocalServer(launch(cmd, log, env), f"http://127.0.0.1:{port}", str(gguf), log,
                         api_key=api_key)  # fmt: skip

    def ready() -> bool:
        return httpx.get(f"{server.url}/health", timeout=5).status_code == 200

    return wait_until_up(server, "llama-server", ready, timeout, poll=0.5)
