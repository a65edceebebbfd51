"""The bench's comparison with llama-cpp-python (optional: it builds from source) on the GGUF
file the bundled model came from, run in a child process so that a crash there costs a line."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import torch

from engine.drivers.bench_common import line
from engine.drivers.bench_llama_server import llama_server_rates
from engine.models.loading import ModelBundle


def llama_cpp_rates(gguf: str, ids: list[int], n: int) -> dict[str, float] | None:
    """llama-cpp-python on the same GGUF file and prompt ids, greedy, ``n`` new tokens (end of
    sequence suppressed, as in our runs): with the top-20 log-probabilities per token, and
    without. None when llama-cpp-python is not installed (it is optional: it builds from
    source, which takes minutes)."""
    try:
        from llama_cpp import Llama
    except ImportError:
        return None
    rates: dict[str, float] = {}
    for name, logprobs in (("logprobs20", 20), ("plain", None)):
        llm = Llama(
            model_path=gguf,
            n_ctx=max(512, len(ids) + n + 8),
            n_threads=torch.get_num_threads(),
            logits_all=logprobs is not None,
            verbose=False,
        )
        options: dict[str, Any] = dict(
            temperature=0.0, logprobs=logprobs, logit_bias={llm.token_eos(): -1e9}
        )
        llm.create_completion(ids, max_tokens=4, **options)  # warm-up
        start = time.perf_counter()
        out = llm.create_completion(ids, max_tokens=n, **options)
        rates[name] = out["usage"]["completion_tokens"] / (time.perf_counter() - start)
        llm.close()
    return rates


def llama_cpp_in_subprocess(
    gguf: str, ids: list[int], n: int, say: Callable[[str], None]
) -> dict[str, float] | None:
    """``llama_cpp_rates`` in a child process: a crash there (llama.cpp has exited with 139,
    a segmentation fault, on some builds) prints a line and the bench goes on."""
    code = (
        "import json, sys; from engine.drivers.bench_llama_cpp import llama_cpp_rates; "
        "a = json.loads(sys.argv[1]); print(json.dumps(llama_cpp_rates(*a)))"
    )
    try:
        done = subprocess.run(
            [sys.executable, "-c", code, json.dumps([gguf, ids, n])],
            capture_output=True, text=True, timeout=600, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        say("   llama-cpp-python: no answer in 600 s, skipped")
        return None
    if done.returncode != 0:
        signal = f" (signal {-done.returncode})" if done.returncode < 0 else ""
        say(f"   llama-cpp-python: exited with {done.returncode}{signal}, skipped")
        return None
    rates = json.loads(done.stdout.strip().splitlines()[-1])
    if rates is None:
        say("   llama-cpp-python: not installed, skipped (pip install llama-cpp-python)")
    return rates


def llama_cpp_section(
    bundle: ModelBundle, ours_bf16: float, new_tokens: int, say: Callable[[str], None]
) -> dict[str, float] | None:
    """The fastest CPU mode (bf16 fast path) vs llama.cpp on the GGUF file the model came from."""
    gguf = bundle.extra.get("gguf")
    if not gguf or bundle.device.type != "cpu":
        return None
    ids = bundle.encode_prompt("Write a short poem about the sea.")
    llama, who = llama_cpp_in_subprocess(gguf, ids, new_tokens, say), "llama-cpp-python"
    if llama is None:
        llama, who = llama_server_rates(gguf, ids, new_tokens, say), "llama-server"
    if llama is None:
        return None
    for key, label in (("logprobs20", "logprobs=20"), ("plain", "no probabilities")):
        say(line(f"   bf16 vs {who}, {label}", ours_bf16, llama[key], "tok/s", "ours",
                 "llama"))  # fmt: skip
    return llama
