"""The bench's helpers: the CPU header, alternated runs, llama-cpp-python's crash isolation,
and the families' real-shape configs (built as configs only: no weights)."""

import os
import stat

import pytest
import torch
from transformers import AutoConfig

from engine.drivers import bench, bench_common, bench_families, bench_llama_cpp


def test_header_names_the_cpu_its_flags_and_the_load():
    name, flags = bench.cpu_info()
    assert name
    if os.path.exists("/proc/cpuinfo"):
        with open("/proc/cpuinfo") as f:
            text = f.read()
        assert all(f" {flag}" in text for flag in flags)
        assert ("avx2" in flags) == (" avx2" in text)
    line = bench.header(threads=3)
    assert name in line and "3 threads" in line and "load average" in line


def test_alternate_interleaves_the_runs_and_keeps_the_best():
    order: list[str] = []
    rates = {"a": iter([1.0, 3.0]), "b": iter([5.0, 2.0])}

    def run(kind: str) -> float:
        order.append(kind)
        return next(rates[kind])

    best = bench.alternate({"a": lambda: run("a"), "b": lambda: run("b")}, rounds=2)
    assert order == ["a", "b", "a", "b"]
    assert best == {"a": 3.0, "b": 5.0}


def test_a_crashing_comparator_prints_a_line_and_the_bench_goes_on(tmp_path, monkeypatch):
    crash = tmp_path / "python"
    crash.write_text("#!/bin/sh\nkill -SEGV $$\n")  # as llama.cpp did on some builds
    crash.chmod(crash.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setattr(bench_llama_cpp.sys, "executable", str(crash))
    said: list[str] = []
    assert bench_llama_cpp.llama_cpp_in_subprocess("x.gguf", [1, 2], 4, said.append) is None
    assert len(said) == 1 and "signal 11" in said[0]


@pytest.mark.parametrize("name", list(bench.FAMILY_CONFIGS))
def test_family_configs_build_and_take_the_fast_path(name):
    values = dict(bench.FAMILY_CONFIGS[name])
    cfg = AutoConfig.for_model(values.pop("model_type"), **values)
    for key, value in values.items():  # every attribute name is one transformers knows
        if key not in ("rope_theta", "rope_local_base_freq"):  # folded into rope_parameters
            assert getattr(cfg, key) == value, key
    if "rope_theta" in values:  # the real model's rotary base reached the config
        params = cfg.rope_parameters
        thetas = (
            [params["rope_theta"]]
            if "rope_theta" in params
            else [p["rope_theta"] for p in params.values()]
        )
        assert values["rope_theta"] in thetas
    from engine.step.fastpath import FAMILIES

    assert cfg.model_type in FAMILIES


def test_matrix_products_alone_times_the_steppers_own_products():
    from engine.step.fastpath import FastStepper
    from tiny_models import tiny_llama

    stepper = FastStepper(tiny_llama())
    calls = []
    real = bench_common.mm

    def counting(x, w, s, onednn):
        calls.append((tuple(x.shape), tuple(w.shape) if w.dim() == 2 else None))
        return real(x, w, s, onednn)

    bench_common.mm = counting
    try:
        secs = bench.matrix_products_alone(stepper, rounds=2)
    finally:
        bench_common.mm = real
    per_token = 4 * len(stepper.layers) + 1  # qkv, o, up, down per layer, and the head
    assert secs is not None and secs > 0
    assert len(calls) == 3 * per_token  # a warm-up and two rounds
    assert all(x[0] == 1 for x, _ in calls)
    assert bench.matrix_products_alone(object()) is None
    calls.clear()
    bench_common.mm = counting
    try:  # a round of 5 passes in a row, per token: a run's mean, as a decode's rate is
        assert bench.matrix_products_alone(stepper, rounds=2, passes=5) > 0
    finally:
        bench_common.mm = real
    assert len(calls) == (1 + 2 * 5) * per_token


def test_matrix_products_alone_takes_int8_and_int4_steppers():
    from transformers import LlamaConfig, LlamaForCausalLM

    from engine.quant.apply import quantize_model
    from engine.step.fastpath import FastStepper

    cfg = LlamaConfig(
        vocab_size=384, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2,
    )  # fmt: skip
    for kind in ("int8", "int4"):
        model = LlamaForCausalLM(cfg).eval()
        quantize_model(model, kind)
        assert bench.matrix_products_alone(FastStepper(model), rounds=1) > 0


def test_family_section_prints_the_ratio_the_tokens_check_and_the_floor(monkeypatch):
    from tiny_models import tiny_llama

    monkeypatch.setattr(bench_families, "family_model", lambda name, dtype: tiny_llama(vocab=6000))
    said: list[str] = []
    results = bench.family_section(said.append, new_tokens=3, names=["Tiny"])
    assert said[0].startswith("8. Tiny (llama), float32") and "x   ours" in said[0]
    assert "same 3 tokens as generate: yes" in said[1]
    assert said[2].startswith("   matrix products alone") and "x HF" in said[2]
    figures = results["Tiny"]
    assert figures["identical"] and figures["ours"] > 0 and figures["hf"] > 0
    assert figures["matmul_ms"] > 0


def test_t5_section_prints_both_ratios_and_the_tokens_check(monkeypatch):
    from tiny_models import tiny_t5

    monkeypatch.setattr(bench_families, "t5_model", lambda name: tiny_t5())
    said: list[str] = []
    results = bench.t5_section(said.append, new_tokens=3, names=["Tiny"])
    assert said[0].startswith("10. Tiny (t5), float32") and "x   ours" in said[0]
    assert "x   ours" in said[1] and "old" in said[1]
    assert "same 3 tokens as generate: yes" in said[2]
    figures = results["Tiny"]
    assert figures["identical"] and min(figures["ours"], figures["old"], figures["hf"]) > 0


def test_token_profile_separates_the_session_from_the_step_alone():
    """Bench section 7's profile line, run on the CPU: no GPU kernels, the wall time all host
    time, and both times measured. Which is larger (the step alone is usually cheaper than a
    session token) is the bench's to print: on a loaded machine the order flipped here, and a
    unit test does not time things."""
    from engine.drivers.bench_profile import token_profile
    from family_models import tiny

    p = token_profile(tiny("llama"), list(range(5, 21)), n=8)
    assert p.kernels == 0 and p.gpu_busy == 0 and p.host_ms == p.wall_ms
    assert p.step_ms > 0 and p.wall_ms > 0
    assert "bound by the session's host work" in p.describe()


def test_quant_rows_give_the_session_and_the_decode_rates():
    """Section 11's rows on tiny models: both rates of each kind, their ratios to float32 (1.0
    for float32 itself), the share taken on the decode rate, and the products beside it."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from engine.drivers import bench_quant
    from engine.quant.apply import quantize_model

    cfg = LlamaConfig(
        vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2,
    )  # fmt: skip
    models = {}
    for kind in ("float32", "int8", "int4"):
        torch.manual_seed(0)
        models[kind] = LlamaForCausalLM(cfg).eval()
        if kind != "float32":
            quantize_model(models[kind], kind)
    said: list[str] = []
    rows = bench_quant._rows(models, [5, 6, 7, 8], 6, 1e10, said.append, "Tiny")
    assert len(said) == 3 and all("decode alone" in line for line in said)
    assert all("best single pass" in line and "x its products" in line for line in said)
    assert rows["float32"]["vs_fp32"] == 1.0 and rows["float32"]["decode_vs_fp32"] == 1.0
    for kind, row in rows.items():
        assert row["tok_s"] > 0 and row["decode_tok_s"] > 0 and row["matmul_ms"] > 0
        assert row["matmul_best_pass_ms"] > 0
        assert row["token_vs_matmul"] == pytest.approx(row["token_ms"] / row["matmul_ms"])
        assert row["copy_share"] == pytest.approx(row["decode_tok_s"] * row["weight_mb"] / 1e4)
        assert row["weight_mb"] * 1e6 == pytest.approx(bench_quant.weight_bytes(models[kind]))
    # each quantised model's products on its kernels and on PyTorch's, side by side
    said.clear()
    bench_quant._say_heads(models, said.append, "Tiny")
    both = [bench_quant.products_both_ways(m) for m in models.values()]
    assert both[0] is None and len(said) == 2
    assert all("layers" in line and "head" in line and "PyTorch's" in line for line in said)
    for got in both[1:]:
        assert min(got["layers"] + got["head"]) > 0
        assert got["head_kernel"] in ("the lab's", "oneDNN's", "PyTorch's")


def test_quant_rows_survive_a_rate_that_cannot_be_measured(monkeypatch):
    """One new token has no decode to time: the row prints nan, it does not divide by 0."""
    from engine.drivers import bench_quant
    from tiny_models import tiny_llama

    monkeypatch.setattr(bench_quant, "matrix_products_alone", lambda stepper, **_: None)
    said: list[str] = []
    rows = bench_quant._rows({"float32": tiny_llama(vocab=300)}, [5, 6], 1, 1e10, said.append, "T")
    assert "nan" in said[0] and rows["float32"]["tok_s"] > 0
    assert rows["float32"]["decode_tok_s"] != rows["float32"]["decode_tok_s"]  # NaN


def test_llama_rows_print_both_ways_llama_cpp_runs(monkeypatch):
    """Section 11 prints llama-cpp-python and llama-server side by side where both answer
    (their top-20 costs differ by far), and skips the one that does not."""
    from engine.drivers import bench_quant

    py = {"plain": 90.0, "logprobs20": 24.0}
    server = {"plain": 84.0, "logprobs20": 81.0, "plain_decode": 100.0,
              "logprobs20_decode": 97.0, "plain_threads": 2, "logprobs20_threads": 2}  # fmt: skip
    monkeypatch.setattr(bench_quant, "llama_cpp_in_subprocess", lambda *a: py)
    monkeypatch.setattr(bench_quant, "llama_server_rates", lambda *a: server)
    said: list[str] = []
    int4 = {"tok_s": 72.0, "decode_tok_s": 77.0}
    found = bench_quant._llama_rows("x.gguf", [1, 2], 8, int4, said.append)
    assert found == {"llama_cpp": py, "llama_server": server}
    text = "\n".join(said)
    assert "llama-cpp-python on the same Q4_1 file, top-20 probs: 24.0 tok/s" in text
    assert "our int4 3.00x of it" in text and "llama-server" in text
    assert "decode alone: our int4 77.0 tok/s, 0.77x of llama.cpp's" in text
    monkeypatch.setattr(bench_quant, "llama_cpp_in_subprocess", lambda *a: None)
    said.clear()
    assert bench_quant._llama_rows("x.gguf", [1, 2], 8, int4, said.append) == {
        "llama_server": server
    }
    assert not any("llama-cpp-python on" in line for line in said)
