"""The lab's own int8 / int4 CPU products (engine.quant.native, csrc/matvec.cpp) against a
float64 product of the same integers, on both routes (a few rows: integer dot products; more:
float32 tiles), on every instruction set the file has (this CPU's, AVX2, plain C++: built in a
child process), with NaN, zero and infinite rows; and the ways they are not used."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from test_quant import PROMPT, quant_sized

from engine.models.device import cpu_flags
from engine.quant import native
from engine.quant.apply import quantize_model
from engine.quant.formats import (
    COMPUTE,
    dequantize_int4,
    dequantize_int8,
    quantize_int4,
    quantize_int8,
)
from engine.quant.linear import QuantLinear
from engine.step.kernels import mm

ROOT = Path(__file__).resolve().parents[2]
needs_native = pytest.mark.skipif(not native.usable(), reason=f"not built here: {native.why_not()}")


def _case(kind: str, rows: int, n: int = 160, k: int = 384, seed: int = 3):
    """(x bfloat16 [rows, K] with an outlier column, the kernel's weights and scales, the float
    weights they stand for, what an activation's rounding meets: None for |w|, int4's s u)."""
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(n, k, generator=g)
    x = torch.randn(rows, k, generator=g)
    x[:, 7] = 14.0  # a hidden state's largest element is 7-18x its RMS
    x = x.to(COMPUTE)
    if kind == "int8":
        q, s = quantize_int8(w)
        return x, q.view(n, k // 32, 32), s, dequantize_int8(q, s), None
    u, sz = quantize_int4(w[: n // 8 * 8])  # int4's kernel takes rows in blocks of 8
    return x, native.pack4(u), native.scales4(sz), dequantize_int4(u, sz), native.scaled_u(u, sz)


def _grid(kind: str) -> int:
    """The activations' integer grid of the kind's products."""
    return native.INT4_GRID if kind == "int4" else native.INT8_GRID


# (n, k): a few plain rows; 167 rows (int8: a tail past the blocks of 4 rows; int4: 160, 20
# blocks of 8) of 1088 columns (34 groups); 600 rows (two tiles of 512)
SHAPES = [(160, 384), (167, 1088), (600, 64)]


@needs_native
@pytest.mark.parametrize("kind", ["int8", "int4"])
@pytest.mark.parametrize("rows", [1, 3, 4, 5, 40])
@pytest.mark.parametrize(("n", "k"), SHAPES)
def test_products_are_within_their_bound_of_the_exact_product(kind, rows, n, k):
    x, w, s, wf, meets = _case(kind, rows, n, k)
    got = mm(x, w, s, False)
    assert got.dtype == COMPUTE and got.shape == (rows, w.shape[0])
    ref = x.double() @ wf.double().t()
    err = (got.double() - ref).abs()
    bound = native.bound(x, wf, ref, rows <= 4, meets, _grid(kind))
    assert bool((err <= bound).all()), (err / bound).max()
    # and the bound is tight enough to mean something: a few percent of the output at most
    assert float((bound / ref.abs().clamp_min(1.0)).median()) < 0.02


@needs_native
@pytest.mark.parametrize("kind", ["int8", "int4"])
def test_activations_the_integer_grid_holds_give_the_product_to_its_last_rounding(kind):
    """Each group's elements are -max, 0 or +max: the integer route rounds nothing but the
    output, so it must equal the float64 product to bfloat16's half unit. Fails with a wrong
    group scale, a nibble read from the wrong half or a zero point off by one."""
    x, w, s, wf, _ = _case(kind, 2)
    g = torch.Generator().manual_seed(9)
    signs = torch.randint(-1, 2, x.shape, generator=g).float()
    scale = torch.rand(x.shape[0], x.shape[1] // 32, 1, generator=g) * 4 + 0.5
    xs = (signs.reshape(x.shape[0], -1, 32) * scale.to(COMPUTE).float()).reshape(x.shape)
    xs[:, ::32] = scale.to(COMPUTE).float()[:, :, 0]  # every group holds its max
    xs = xs.to(COMPUTE)
    ref = xs.double() @ wf.double().t()
    got = mm(xs, w, s, False).double()
    slack = 1e-6 * (xs.double().abs() @ wf.double().abs().t())  # float32 sums
    assert bool(((got - ref).abs() <= ref.abs() * 2.0**-8 + slack).all())


@needs_native
@pytest.mark.parametrize("kind", ["int8", "int4"])
@pytest.mark.parametrize("rows", [2, 3, 9])  # 2, 3: the integer products; 9: the tiles
def test_rows_of_zeros_stay_zero_and_nan_or_inf_stay_in_their_row(kind, rows):
    x, w, s, _, _ = _case(kind, rows)
    x[0] = 0
    x[1, 40] = float("nan")
    if rows > 2:
        x[2, 3] = float("inf")
    got = mm(x.contiguous(), w, s, False)
    assert bool((got[0] == 0).all())
    assert bool(got[1].isnan().all())
    if rows > 2:
        assert not bool(got[2].isfinite().all())
        assert bool(got[3:].isfinite().all())


@needs_native
def test_a_wrong_shape_is_refused_with_its_reason():
    x, w, s, _, _ = _case("int4", 1)
    with pytest.raises(RuntimeError, match="columns"):
        torch.ops.decoding_lab.int4_mm(x[:, :320].contiguous(), w, s)
    with pytest.raises(RuntimeError, match="scales"):
        torch.ops.decoding_lab.int4_mm(x, w, s[:, :, :4].contiguous())


def _child(march: str) -> dict:
    env = {**os.environ, native.MARCH: march}
    env.pop(native.SWITCH, None)
    code = (
        "import json, torch, engine.step.kernels\n"
        "from engine.quant import native\n"
        "native._build()\n"
        "print(json.dumps({'isa': torch.ops.decoding_lab.isa(),"
        " 'agrees': native._probe_agrees(), 'usable': native.usable(), 'why': native.why_not()}))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(shutil.which("c++") is None, reason="no C++ compiler here")
@pytest.mark.parametrize(("march", "isa", "flag"), [("haswell", "avx2", "avx2"),
                                                     ("x86-64", "scalar", "sse2")])  # fmt: skip
def test_the_avx2_and_plain_paths_agree_with_float64_too(march, isa, flag):
    """Whatever this CPU has, the file's other paths are built and checked here (the AVX2 one
    runs on AMD machines without AVX-512); the plain one is right but never used."""
    if flag not in cpu_flags():
        pytest.skip(f"this CPU has no {flag}")
    got = _child(march)
    assert got["isa"] == isa and got["agrees"], got
    assert got["usable"] == (isa != "scalar"), got


def test_they_are_used_wherever_a_compiler_and_avx2_are_here():
    """The tests above skip where the kernels are not built: a machine with a C++ compiler and
    AVX2 must build and use them, so a build or probe gone wrong cannot hide behind a skip."""
    if shutil.which("c++") is None or "avx2" not in cpu_flags():
        pytest.skip("no C++ compiler or no AVX2 here")
    if os.environ.get(native.SWITCH, "").strip().lower() in ("0", "false", "off", "no"):
        pytest.skip(f"{native.SWITCH} turns them off")
    assert native.usable(), native.why_not()


@needs_native
@pytest.mark.parametrize("kind", ["int8", "int4"])
def test_a_quantised_model_runs_on_them_and_matches_pytorchs_kernels(kind, monkeypatch):
    """The same model quantised with the lab's kernels and with PyTorch's (switched off):
    every product on the chosen kernels, the summary says whose, and the logits agree within
    the two kernels' roundings."""
    model = quant_sized("llama")
    summary = quantize_model(model, kind)
    mods = [m for m in model.modules() if isinstance(m, QuantLinear) and not m.on_onednn]
    assert mods and all(m.on_native for m in mods)
    assert f"the lab's kernels ({native.isa()})" in summary.describe()

    monkeypatch.setenv(native.SWITCH, "0")
    native.usable.cache_clear()
    try:
        plain = quant_sized("llama")
        plain_summary = quantize_model(plain, kind)
        plain_mods = [m for m in plain.modules() if isinstance(m, QuantLinear)]
        assert not any(m.on_native for m in plain_mods)
        assert "PyTorch's kernels" in plain_summary.describe()
        assert native.SWITCH in plain_summary.describe()
    finally:
        monkeypatch.delenv(native.SWITCH)
        native.usable.cache_clear()
    assert native.usable()
    ids = torch.tensor([PROMPT])
    with torch.inference_mode():
        a = model(ids).logits.float()
        b = plain(ids).logits.float()
        a1 = model(ids[:, :3]).logits.float()  # three rows: the integer route
        b1 = plain(ids[:, :3]).logits.float()
    spread = b.std()
    assert float((a - b).abs().max()) < 0.05 * float(spread)
    assert float((a1 - b1).abs().max()) < 0.05 * float(spread)
    for m in mods:  # the weights the model reports are the ones its kernel multiplies by
        assert m.weight.shape == (m.out_features, m.in_features)


@needs_native
@pytest.mark.parametrize("kind", ["int8", "int4"])
def test_any_number_of_threads_gives_the_same_numbers(kind):
    """Rows are split among threads in blocks of 4 with single rows at a chunk's end: each row
    is summed in the same order either way, so 1 and 3 threads give the 2 threads' bits."""
    x, w, s, _, _ = _case(kind, 2, 167, 1088)
    threads = torch.get_num_threads()
    want = mm(x, w, s, False)
    try:
        for n in (1, 3):
            torch.set_num_threads(n)
            assert torch.equal(mm(x, w, s, False), want)
    finally:
        torch.set_num_threads(threads)


@needs_native
@pytest.mark.parametrize("kind", ["int8", "int4"])
def test_a_group_of_tiny_activations_counts_as_zeros(kind):
    x, w, s, wf, meets = _case(kind, 2, 64, 128)
    x[0, 32:64] = 1e-36  # a bfloat16 the integer grid's 32767 (16383) / max would overflow for
    x[1] = 1e-36
    got = mm(x, w, s, False).double()
    ref = x.double() @ wf.double().t()
    assert bool(got.isfinite().all())
    if kind == "int8":  # int4 keeps its zero points' exact sums of the row
        assert bool((got[1] == 0).all())
    assert bool(((got - ref).abs() <= native.bound(x, wf, ref, True, meets, _grid(kind))).all())


@needs_native
@pytest.mark.parametrize("kind", ["int8", "int4"])
def test_gradients_go_through_the_weights_the_kernel_multiplies_by(kind):
    x, w, s, wf, _ = _case(kind, 3)
    x.requires_grad_()
    g = torch.randn(3, w.shape[0], generator=torch.Generator().manual_seed(1))
    (mm(x, w, s, False).float() * g).sum().backward()
    want = g.double() @ wf.double()
    assert float((x.grad.double() - want).abs().max()) <= 2.0**-7 * float(want.abs().max())
    assert torch.equal(native.dequantised(w, s), wf)


def test_input_attribution_refuses_a_quantised_model():
    from test_internals import Bundle, model_and_path

    from engine.errors import InternalsUnavailable
    from engine.internals.attribution import attribute_inputs

    model, path = model_and_path("llama")
    quantize_model(model, "int8")
    with pytest.raises(InternalsUnavailable, match="float weights"):
        attribute_inputs(Bundle(model), path, 4, n_steps=64)


@pytest.mark.skipif(shutil.which("c++") is None, reason="no C++ compiler here")
def test_the_avx2_build_passes_these_tests_too():
    """This file's product tests run again in a child process on the AVX2 build (AMD machines
    without AVX-512 take it): the probe alone reaches few of its branches."""
    if "avx2" not in cpu_flags():
        pytest.skip("this CPU has no avx2")
    env = {**os.environ, native.MARCH: "haswell"}
    env.pop(native.SWITCH, None)
    picked = "bound or grid or zeros or threads or tiny or gradients or fused or refuse"
    picked += " or attention or numbers or ties or subnormal or broken or finiteness or cuts"
    fused = str(Path(__file__).with_name("test_fused_layer.py"))  # layer.cpp's ops too
    stats = str(Path(__file__).with_name("test_step_stats.py"))  # and stats.cpp's
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__, fused,
         stats, "-k", picked],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:]
    assert " passed" in done.stdout and " skipped" not in done.stdout, done.stdout[-500:]


def test_a_lock_left_by_a_killed_build_stops_nothing(tmp_path):
    """torch's builder waits on its lock file with no end: a built library loads without it,
    and a lock older than a build is removed before building (a child process on an empty
    cache, with a lock from an hour ago in its build folder)."""
    if shutil.which("c++") is None or "avx2" not in cpu_flags():
        pytest.skip("no C++ compiler or no AVX2 here")
    env = {**os.environ, "DECODING_LAB_CACHE": str(tmp_path)}
    env.pop(native.SWITCH, None)
    code = (
        "import os, time\n"
        "from engine.quant import native\n"
        "folder = native._build_folder()\n"
        "folder.mkdir(parents=True)\n"
        "(folder / 'lock').touch()\n"
        "os.utime(folder / 'lock', (time.time() - 3600,) * 2)\n"
        "print(native.usable(), native.why_not())\n"
    )
    for _ in range(2):  # built with the old lock there; then loaded beside a fresh lock
        done = subprocess.run([sys.executable, "-c", code if _ == 0 else code.replace(
            "folder.mkdir(parents=True)", "folder.mkdir(parents=True, exist_ok=True)").replace(
            "os.utime", "0 and os.utime")], cwd=ROOT, env=env, capture_output=True, text=True,
            timeout=300)  # fmt: skip
        assert done.returncode == 0 and done.stdout.startswith("True"), done.stderr[-2000:]
