"""Start and stop a local ``vllm serve`` (the CPU build set up by resources/remote/setup_vllm.sh)
on 127.0.0.1, for the served-model tests and the measurement; no Qt. A real deployment is
started by whoever runs it; the lab only connects (engine.serve.remote).

The command it runs is the one the README gives, with the bundled SmolLM2 converted to a
transformers folder:

    VLLM_CPU_KVCACHE_SPACE=2 vllm serve <folder> --host 127.0.0.1 --port <port> \\
        --max-model-len 2048 --max-logprobs 20 --dtype float32
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import httpx

from engine.serve.local_server import (  # noqa: F401 - free_port: the tests' name for it
    LocalServer,
    free_port,
    launch,
    wait_until_up,
)

DEFAULT_VENV = ".venv-vllm"


def bundled_hf_folder() -> Path:
    """The bundled SmolLM2 as a float32 transformers folder (converted once, then cached)."""
    import torch

    from engine.models.catalog import _smollm2_path
    from engine.models.loading import converted_gguf

    return converted_gguf(_smollm2_path(), torch.float32, say=lambda _m: None)


def vllm_problem(venv: str | Path = DEFAULT_VENV) -> str | None:
    """Why vLLM cannot run from ``venv`` here, or None when it can."""
    python = Path(venv) / "bin" / "python"
    if not (Path(venv) / "bin" / "vllm").exists():
        return f"no vLLM environment at {venv}: run `make vllm-env` (or make test-remote)"
    check = "from vllm.platforms import current_platform as p; print(p.device_type)"
    try:
        out = subprocess.run(
            [str(python), "-c", check], capture_output=True, text=True, timeout=300
        )
    except subprocess.TimeoutExpired:
        return "importing vLLM took over 5 minutes"
    if out.returncode != 0:
        tail = (out.stderr or out.stdout).strip().splitlines()[-3:]
        return f"vLLM does not import here (exit {out.returncode}): {' | '.join(tail)}"
    if out.stdout.strip().splitlines()[-1:] != ["cpu"]:
        return f"vLLM found no usable platform here ({out.stdout.strip()!r}); it needs AVX2"
    return None


VLLMServer = LocalServer  # the name the vLLM tests know


def start_vllm(
    folder: str | Path,
    *,
    venv: str | Path = DEFAULT_VENV,
    port: int | None = None,
    api_key: str | None = None,
    max_model_len: int = 2048,
    max_logprobs: int = 20,
    dtype: str = "float32",
    kv_cache_gb: int = 2,
    timeout: float = 600.0,
    log_path: str | Path | None = None,
) -> VLLMServer:
    """Start ``vllm serve folder`` on 127.0.0.1 and wait (at most ``timeout`` s) until it
    lists its model. ``api_key``: the server then requires it (passed in the environment, not
    on the command line). Raises RuntimeError with the log's tail when it does not come up."""
    port = port or free_port()
    log = Path(log_path) if log_path else Path(f"/tmp/decoding-lab-vllm-{port}.log")
    env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE=str(kv_cache_gb), HF_HUB_OFFLINE="1")
    env.pop("VLLM_API_KEY", None)
    if api_key:
        env["VLLM_API_KEY"] = api_key
    cmd = [
        str(Path(venv) / "bin" / "vllm"), "serve", str(folder), "--host", "127.0.0.1",
        "--port", str(port), "--max-model-len", str(max_model_len),
        "--max-logprobs", str(max_logprobs), "--dtype", dtype,
    ]  # fmt: skip
    process = launch(cmd, log, env)  # its own process group: stop() ends the workers too
    server = VLLMServer(process, f"http://127.0.0.1:{port}", str(folder), log, api_key=api_key)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}

    def ready() -> bool:
        return httpx.get(f"{server.url}/v1/models", headers=headers, timeout=5).status_code == 200

    return wait_until_up(server, "vllm serve", ready, timeout, poll=2.0)
