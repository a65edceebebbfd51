"""The bench at real models' shapes (random weights, no downloads): 8. the decoder families,
10. T5, 9. the static step on CPU, and 7. the GPU; each ours vs transformers.generate,
alternated, same tokens."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import Any

import torch

from engine.decode.session import GenerationSession
from engine.drivers.bench_common import alternate, line, matrix_products_alone
from engine.drivers.bench_profile import token_profile
from engine.drivers.compare import ready
from engine.models.device import timed
from engine.sampling.settings import SamplerSettings
from engine.step.fastpath import FastStepper

# Real models' shapes (from their published config.json), built with random weights: no
# downloads, the same arithmetic per token as the real thing.
FAMILY_CONFIGS: dict[str, dict[str, Any]] = {
    "Qwen2.5-0.5B": dict(
        model_type="qwen2", vocab_size=151936, hidden_size=896, intermediate_size=4864,
        num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
        max_position_embeddings=32768, rope_theta=1e6, rms_norm_eps=1e-6,
        tie_word_embeddings=True,
    ),
    "Qwen3-0.6B": dict(
        model_type="qwen3", vocab_size=151936, hidden_size=1024, intermediate_size=3072,
        num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8, head_dim=128,
        max_position_embeddings=40960, rope_theta=1e6, rms_norm_eps=1e-6,
        tie_word_embeddings=True,
    ),
    "Gemma-3-270m": dict(
        model_type="gemma3_text", vocab_size=262144, hidden_size=640, intermediate_size=2048,
        num_hidden_layers=18, num_attention_heads=4, num_key_value_heads=1, head_dim=256,
        max_position_embeddings=32768, sliding_window=512, query_pre_attn_scalar=256,
        rms_norm_eps=1e-6, rope_theta=1e6, rope_local_base_freq=10000.0,
        hidden_activation="gelu_pytorch_tanh", tie_word_embeddings=True,
        layer_types=(["sliding_attention"] * 5 + ["full_attention"]) * 3,
    ),
    "GPT-2": dict(
        model_type="gpt2", vocab_size=50257, n_embd=768, n_layer=12, n_head=12, n_positions=1024
    ),
}  # fmt: skip


def family_model(name: str, dtype: torch.dtype = torch.float32) -> torch.nn.Module:
    """A random model at ``name``'s real shape (FAMILY_CONFIGS)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    values = dict(FAMILY_CONFIGS[name])
    cfg = AutoConfig.for_model(values.pop("model_type"), **values)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg, dtype=dtype)
    model.generation_config.pad_token_id = 0
    return model.eval()


def _session_rate(
    model: torch.nn.Module, ids: list[int], n: int, fast: bool = True
) -> tuple[float, list[int]]:
    """Our session, greedy, top-20 per step (``ids``: the prompt, or an encoder-decoder's
    encoder input)."""
    settings = SamplerSettings(temperature=0, max_new_tokens=n, min_new_tokens=n)
    session = GenerationSession(model, ids, settings, eos_token_ids=[], top_n=20, fast=fast)
    ready(session, n)  # on CUDA: capture the step before the clock (as the window does)
    device = next(model.parameters()).device
    _, secs = timed(device, lambda: list(session.stream()))
    return n / secs, session.generated_ids


def _generate_rate(model: torch.nn.Module, ids: list[int], n: int) -> tuple[float, list[int]]:
    """transformers.generate, greedy; the new tokens (after the prompt, or after an
    encoder-decoder's decoder start id)."""
    device = next(model.parameters()).device
    x = torch.tensor([ids], device=device)
    kwargs = dict(attention_mask=torch.ones_like(x), do_sample=False, eos_token_id=None)
    out, secs = timed(
        device, lambda: model.generate(input_ids=x, max_new_tokens=n, min_new_tokens=n, **kwargs)
    )
    skip = 1 if model.config.is_encoder_decoder else len(ids)
    return n / secs, out[0, skip:].tolist()


def side_by_side(
    model: torch.nn.Module, ids: list[int], n: int, old: bool = False
) -> tuple[dict[str, float], dict[str, list[int]]]:
    """Our session (fast path, top-20), with ``old`` also our session on model.forward, and
    transformers.generate, warmed up, then alternated; best rates and each one's tokens."""
    runs: dict[str, Callable[[int], tuple[float, list[int]]]] = {
        "ours": lambda k: _session_rate(model, ids, k),
        **({"old": lambda k: _session_rate(model, ids, k, fast=False)} if old else {}),
        "hf": lambda k: _generate_rate(model, ids, k),
    }
    for run in runs.values():  # warm-up: oneDNN packing, compile, capture
        run(4)
    tokens: dict[str, list[int]] = {}

    def measured(kind: str) -> float:
        rate, tokens[kind] = runs[kind](n)
        return rate

    # three rounds: on a shared CPU single runs of a 0.5 B model swing 2-3x with the load
    best = alternate({k: (lambda k=k: measured(k)) for k in runs}, rounds=3)
    return best, tokens


def family_section(
    say: Callable[[str], None],
    new_tokens: int = 32,
    names: Sequence[str] | None = None,
    device: str = "cpu",
    dtype: torch.dtype = torch.float32,
) -> dict[str, Any]:
    """8. Each family at a real model's shape: our fast path (top-20 per step) vs
    transformers.generate, alternated, same tokens."""
    results: dict[str, Any] = {}
    ids = [(37 * i + 11) % 5000 + 100 for i in range(16)]
    for name in names or FAMILY_CONFIGS:
        model = family_model(name, dtype).to(device)
        best, tokens = side_by_side(model, ids, new_tokens)
        same = tokens["ours"] == tokens["hf"]
        say(line(f"8. {name} ({model.config.model_type}), {str(dtype)[6:]}", best["ours"],
                 best["hf"], "tok/s", "ours", "HF"))  # fmt: skip
        say(f"   same {new_tokens} tokens as generate: {'yes' if same else 'NO'}; load "
            f"{os.getloadavg()[0]:.2f}")  # fmt: skip
        results[name] = {"ours": best["ours"], "hf": best["hf"], "identical": same}
        floor = matrix_products_alone(FastStepper(model)) if device == "cpu" else None
        if floor is not None:
            say(f"   matrix products alone {floor * 1e3:.0f} ms/token of {1e3 / best['ours']:.0f}:"
                f" nothing but them would be {1 / floor / best['hf']:.2f}x HF")  # fmt: skip
            results[name]["matmul_ms"] = floor * 1e3
        del model
    return results


T5_CONFIGS: dict[str, dict[str, Any]] = {
    "t5-small": dict(
        vocab_size=32128, d_model=512, d_kv=64, d_ff=2048, num_layers=6, num_heads=8,
        relative_attention_num_buckets=32, feed_forward_proj="relu", tie_word_embeddings=True,
    ),
    "flan-t5-small": dict(
        vocab_size=32128, d_model=512, d_kv=64, d_ff=1024, num_layers=8, num_heads=6,
        relative_attention_num_buckets=32, feed_forward_proj="gated-gelu",
        tie_word_embeddings=False,
    ),
}  # fmt: skip


BUNDLED_T5 = "tiny-t5"  # the bundled model, opened from the catalogue


def t5_model(name: str) -> torch.nn.Module:
    """The bundled tiny T5, or a random model at ``name``'s real shape (T5_CONFIGS)."""
    if name == BUNDLED_T5:
        from engine.models.catalog import open_model

        return open_model(BUNDLED_T5, device="cpu").model
    from transformers import T5Config, T5ForConditionalGeneration

    torch.manual_seed(0)
    cfg = T5Config(**T5_CONFIGS[name], decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
    return T5ForConditionalGeneration(cfg).eval()


def t5_section(
    say: Callable[[str], None], new_tokens: int = 32, names: Sequence[str] | None = None
) -> dict[str, Any]:
    """10. T5 encoder-decoder models: our T5 step (top-20 per step), our old path
    (model.forward) and transformers.generate, greedy from a 16-id encoder input, warmed up and
    alternated, best of three; the encoder runs once in each."""
    results: dict[str, Any] = {}
    for name in names or [BUNDLED_T5, *T5_CONFIGS]:
        model = t5_model(name)
        vocab = model.config.vocab_size
        enc = [(37 * i + 11) % (vocab - 10) + 5 for i in range(16)]
        best, tokens = side_by_side(model, enc, new_tokens, old=True)
        same = tokens["ours"] == tokens["hf"]
        say(line(f"10. {name} ({model.config.model_type}), float32", best["ours"], best["hf"],
                 "tok/s", "ours", "HF"))  # fmt: skip
        say(line("   vs our old path (model.forward)", best["ours"], best["old"], "tok/s",
                 "ours", "old"))  # fmt: skip
        say(f"   same {new_tokens} tokens as generate: {'yes' if same else 'NO'}; load "
            f"{os.getloadavg()[0]:.2f}")  # fmt: skip
        results[name] = {**best, "identical": same}
        del model
    return results


def _stepper_rate(stepper: Any, ids: list[int], n: int) -> float:
    seq = list(ids)
    stepper.logits(seq)  # prompt
    _, secs = timed(
        stepper.device,
        lambda: [seq.append(int(stepper.logits(seq)[-1].argmax())) for _ in range(n)],
    )
    return n / secs


def static_cpu_section(
    say: Callable[[str], None], name: str = "GPT-2", new_tokens: int = 32
) -> dict[str, Any]:
    """9. CPU: the static step (eager over the fixed-capacity cache, and torch.compile'd) vs
    the dynamic fast step (TorchScript on CPU, filled part only), alternated; decides which
    one CPU sessions use."""
    from engine.step.static_step import StaticStepper

    model = family_model(name)
    ids = [(37 * i + 11) % 5000 + 100 for i in range(16)]
    runs: dict[str, Callable[[], float]] = {
        "fast": lambda: _stepper_rate(FastStepper(model), ids, new_tokens),
        "static eager": lambda: _stepper_rate(
            StaticStepper(model, capacity=256, graphs=False, compile=False), ids, new_tokens
        ),
    }
    compiled = StaticStepper(model, capacity=256, graphs=False, compile=True)
    try:
        start = time.perf_counter()
        _stepper_rate(compiled, ids, 2)  # compiles
        say(f"9. torch.compile of the static step on CPU: {time.perf_counter() - start:.0f} s")
        runs["static compiled"] = lambda: _stepper_rate(compiled, ids, new_tokens)
    except Exception as exc:  # noqa: BLE001 - report and go on
        say(f"9. torch.compile of the static step on CPU failed: {str(exc).splitlines()[0]}")
    best = alternate(runs)
    for kind in list(best)[1:]:
        say(line(f"9. {name}, {kind} vs fast step", best[kind], best["fast"],
                 "tok/s", "static", "fast"))  # fmt: skip
    return best


def gpu_section(say: Callable[[str], None], new_tokens: int = 128) -> dict[str, Any] | None:
    """7. GPU: the captured static step vs transformers.generate eager, bf16 and fp32, on
    SmolLM2-135M's architecture and the families at real shapes (no downloads)."""
    if not torch.cuda.is_available():
        say("7. GPU: skipped, no CUDA device on this machine")
        return None
    from transformers import LlamaConfig, LlamaForCausalLM

    say(f"7. GPU: {torch.cuda.get_device_name()}")
    smollm2 = LlamaConfig(
        vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
        num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=8192,
        rope_theta=100000.0, rms_norm_eps=1e-5, tie_word_embeddings=True,
    )  # fmt: skip
    ids = [(37 * i + 11) % 5000 + 100 for i in range(16)]
    results: dict[str, Any] = {}
    for dtype in (torch.bfloat16, torch.float32):
        torch.manual_seed(0)
        model = LlamaForCausalLM(smollm2).to("cuda", dtype).eval()
        model.generation_config.pad_token_id = 0
        best, tokens = side_by_side(model, ids, new_tokens)
        say("   " + line(f"SmolLM2-135M shape, {str(dtype)[6:]}, top-20", best["ours"],
                         best["hf"], "tok/s", "ours", "HF"))  # fmt: skip
        say(f"   same tokens as generate: {'yes' if tokens['ours'] == tokens['hf'] else 'NO'}")
        profiled = token_profile(model, ids)
        say("   " + profiled.describe())
        results[str(dtype)[6:]] = {**best, "profile": asdict(profiled)}
        del model
    results["families"] = family_section(
        lambda m: say("   " + m), new_tokens, device="cuda", dtype=torch.bfloat16
    )
    return results
