"""The bench's llama.cpp rows from llama.cpp's own server (``make llama-server`` builds it from
the source the llama-cpp-python sdist vendors), where llama-cpp-python is not installed: the
same GGUF file, the same prompt ids, greedy, ``n`` new tokens with the end of text ignored,
with and without the top-20 probabilities per token (``n_probs``).

A rate is the request's wall time over the tokens it made, prompt included, as our rows time
a whole session; the server's own decode-only figure (``timings.predicted_per_second``) is
kept beside it. Each setting is run for 1 and for ``threads`` threads and the faster kept
(ggml's threads wait for each other by spinning: on 2 shared cores one thread can win). The
server listens on 127.0.0.1, on a free port, and is stopped when the rows are done."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import httpx
import torch

from engine.serve.llama_server_run import (
    DEFAULT_DIR,
    llama_server_problem,
    start_llama_server,
)


def _one(url: str, ids: list[int], n: int, n_probs: int) -> tuple[float, float]:
    """(tokens per second by wall time, the server's decode-only figure) for one request."""
    body: dict[str, Any] = {
        "prompt": ids, "n_predict": n, "temperature": 0.0, "ignore_eos": True,
        "n_probs": n_probs, "cache_prompt": False, "stream": False,
    }  # fmt: skip
    start = time.perf_counter()
    reply = httpx.post(f"{url}/completion", json=body, timeout=600)
    wall = time.perf_counter() - start
    reply.raise_for_status()
    data = reply.json()
    made = int(data.get("tokens_predicted") or data.get("timings", {}).get("predicted_n") or 0)
    if made != n:
        raise RuntimeError(f"llama-server made {made} tokens, not {n}")
    decode = float(data.get("timings", {}).get("predicted_per_second") or 0.0)
    return n / wall, decode


def llama_server_rates(
    gguf: str, ids: list[int], n: int, say: Callable[[str], None], threads: int | None = None
) -> dict[str, float] | None:
    """{"plain", "logprobs20"} tokens per second (and "<key>_decode", "<key>_threads"), or None
    with a line saying why when llama-server is not built or does not answer."""
    folder = os.environ.get("DECODING_LAB_LLAMA_SERVER_DIR", DEFAULT_DIR)  # as the tests
    problem = llama_server_problem(folder)
    if problem is not None:
        say(f"   llama-server: {problem}; skipped")
        return None
    threads = threads or torch.get_num_threads()
    rates: dict[str, float] = {}
    for t in sorted({1, threads}):
        server = None
        try:
            server = start_llama_server(
                gguf, folder=folder, threads=t, context=max(512, len(ids) + n + 8)
            )
            for key, n_probs in (("plain", 0), ("logprobs20", 20)):
                _one(server.url, ids, 4, n_probs)  # warm-up
                best = max(_one(server.url, ids, n, n_probs) for _ in range(2))
                if best[0] > rates.get(key, 0.0):
                    rates |= {key: best[0], f"{key}_decode": best[1], f"{key}_threads": t}
        except (RuntimeError, OSError, httpx.HTTPError, ValueError) as exc:
            say(f"   llama-server, {t} thread(s): {type(exc).__name__}: {exc}; skipped")
        finally:
            if server is not None:
                server.stop()
    return rates if "plain" in rates and "logprobs20" in rates else None
