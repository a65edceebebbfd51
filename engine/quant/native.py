"""The lab's own int8 / int4 CPU products (``csrc/matvec.cpp``): built on the machine that
runs them, used where they are built and agree with a reference, PyTorch's kernels otherwise.

Why they exist: PyTorch's weight-only kernels are bound by their arithmetic on a 2-core CPU
(``_weight_int8pack_mm`` about 5 G weights a second a core, the int4 one 12), so a
quantised token reads its weights at a fraction of the memory's speed
(resources/notes/quantized-weights.md). Ours meet the integer weights with 16-bit activations
(each group of 32 with its own scale) in integer dot products; see the C++ file's head.

Built once per CPU and torch (``-march=native``: AVX512-VNNI, AVX-512, AVX2 or plain C++)
with ``torch.utils.cpp_extension`` into the user's cache, a few seconds; the build and a
probe against float64 happen at the first quantised model. No compiler, a failed build, a
plain C++ build (no faster than PyTorch's) or a probe that disagrees: PyTorch's kernels run,
and ``why_not()`` says why. ``DECODING_LAB_NATIVE_KERNELS=0`` turns them off.

Layouts (what ``mm`` in ``engine.step.kernels`` tells apart by the weights' rank): int8
``[N, K / 32, 32]`` (the plain matrix, viewed); int4 ``[N, K / 64, 32]`` bytes, in each run
of 64 columns byte j holds column j (low nibble) and column 32 + j (high), with scales
``[N, 2, K / 32]`` (the groups' scales, then their zeros).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import re
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import torch
from torch import Tensor

from engine.models.device import switched_off

SOURCE = Path(__file__).with_name("csrc") / "matvec.cpp"
SOURCES = (SOURCE, SOURCE.with_name("layer.cpp"))  # the products; a layer's small steps
SWITCH = "DECODING_LAB_NATIVE_KERNELS"
# The CPU the build is for: this one by default; the tests build the AVX2 and plain C++ paths
# too (haswell, x86-64) in a child process, whatever this machine has.
MARCH = "DECODING_LAB_NATIVE_MARCH"
_state: dict[str, str] = {}


def _march() -> str:
    want = os.environ.get(MARCH, "native").strip() or "native"
    return want if re.fullmatch(r"[a-z0-9][a-z0-9._-]{0,31}", want) else "native"


def tried() -> bool:
    """Whether this process has tried to build and load the kernels yet."""
    return usable.cache_info().currsize > 0


def prepare(say: Callable[[str], None] | None) -> bool:
    """``usable()``, saying first that the kernels are being built where this process has not
    tried yet (a few seconds, once per CPU and torch; later starts load the build)."""
    if say is not None and not tried():
        say("Building the lab's int8 / int4 kernels for this CPU (once, a few seconds)")
    return usable()


def why_not() -> str:
    """Why the lab's kernels do not run here ("" where they do, or before the first try)."""
    return _state.get("why", "")


def isa() -> str:
    """The instruction set the kernels were built for ("" where they were not)."""
    return _state.get("isa", "")


def _build_folder() -> Path:
    from engine.models.cache import cache_root

    flags = ""
    with contextlib.suppress(OSError):
        flags = next((line for line in Path("/proc/cpuinfo").read_text().splitlines()
                      if line.startswith("flags")), "")  # fmt: skip
    text = b"".join(path.read_bytes() for path in SOURCES)
    key = hashlib.sha256(text + flags.encode() + torch.__version__.encode())
    return cache_root() / "kernels" / f"matvec-{_march()}-{key.hexdigest()[:16]}"


def _build() -> None:
    """Compile and load the library (its ops then have their CPU kernels)."""
    from torch.utils import cpp_extension

    try:
        import ninja  # the build tool, from PyPI: on PATH for torch's builder

        os.environ["PATH"] = ninja.BIN_DIR + os.pathsep + os.environ.get("PATH", "")
    except ImportError:
        pass
    folder = _build_folder()
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.parent.glob(f"matvec-{_march()}-*"):  # builds of an earlier source
        if old != folder:
            shutil.rmtree(old, ignore_errors=True)
    flags = ["-O3", f"-march={_march()}", "-fopenmp"]
    cpp_extension.load(
        name=f"decoding_lab_matvec_{_march().replace('-', '_').replace('.', '_')}",
        sources=[str(path) for path in SOURCES], extra_cflags=flags,
        extra_ldflags=["-fopenmp"], build_directory=str(folder), is_python_module=False,
        verbose=False,
    )  # fmt: skip


def bound(x: Tensor, w: Tensor, ref: Tensor, few_rows: bool) -> Tensor:
    """How far the kernels' product of x [M, K] (bfloat16) and the float weights w [N, K]
    they stand for may be from the exact one ``ref`` [M, N]: the output's rounding to
    bfloat16 (half a unit: at most 2^-8 of it), float32 sums, and, for a few rows of x (the integer
    products), each activation off by at most half its group's step, max|x_g| / 65,534."""
    xd, wd = x.double(), w.double()
    slack = xd.abs() @ wd.abs().t()
    out = ref.abs() * 2.0**-8 + slack * 2e-6
    if few_rows:
        step = xd.reshape(x.shape[0], -1, 32).abs().amax(-1, keepdim=True) / 65534.0
        per_column = step.expand(-1, -1, 32).reshape(x.shape)
        out = out + per_column @ wd.abs().t()
    return out


def _probe_agrees() -> bool:
    """Both products, at shapes that take the few-rows route and the tile route, against a
    float64 product of the same integers, within ``bound``."""
    from engine.quant.formats import dequantize_int4, dequantize_int8, quantize_int4, quantize_int8

    gen = torch.Generator().manual_seed(44)
    w = torch.randn(96, 192, generator=gen)
    q8, s8 = quantize_int8(w)
    u4, sz = quantize_int4(w)
    for rows in (1, 4, 7):
        x = torch.randn(rows, 192, generator=gen)
        x[:, 5] = 9.0  # a hidden state's largest element is 7-18x its RMS
        x = x.to(torch.bfloat16)
        got8 = torch.ops.decoding_lab.int8_mm(x, q8.view(96, 6, 32), s8)
        got4 = torch.ops.decoding_lab.int4_mm(x, pack4(u4), scales4(sz))
        for got, ref_w in ((got8, dequantize_int8(q8, s8)), (got4, dequantize_int4(u4, sz))):
            ref = x.double() @ ref_w.double().t()
            if not bool(((got.double() - ref).abs() <= bound(x, ref_w, ref, rows <= 4)).all()):
                return False
    return True


@functools.cache
def usable() -> bool:
    """Whether the lab's kernels run here (built, not plain C++, probe agrees, not off)."""
    if switched_off(SWITCH):
        _state["why"] = f"{SWITCH} turns them off"
        return False
    if sys.platform == "win32":
        _state["why"] = "not built on Windows"
        return False
    try:
        _build()
        _state["isa"] = torch.ops.decoding_lab.isa()
    except Exception as e:  # noqa: BLE001 - any build failure means PyTorch's kernels run
        lines = str(e).strip().splitlines() or [type(e).__name__]
        said = next((ln for ln in lines if "error" in ln.lower()), lines[0])  # the compiler's
        _state["why"] = f"no build of the lab's kernels here ({said.strip()[:200]})"
        return False
    if _state["isa"] == "scalar":
        _state["why"] = "no AVX2 or AVX-512 here: PyTorch's kernels are faster"
        return False
    if not _probe_agrees():
        _state["why"] = "the lab's kernels disagreed with float64 here"
        return False
    _state["why"] = ""
    return True


def pack4(u: Tensor) -> Tensor:
    """u uint8 [N, K] in 0..15 -> [N, K / 64, 32]: per run of 64 columns, byte j = column j
    | column 32 + j << 4."""
    n, k = u.shape
    runs = u.reshape(n, k // 64, 2, 32)
    return (runs[:, :, 0] | (runs[:, :, 1] << 4)).contiguous()


def unpack4(w: Tensor) -> Tensor:
    """The inverse of ``pack4``: [N, K / 64, 32] -> u uint8 [N, K]."""
    return torch.stack((w & 15, w >> 4), 2).reshape(w.shape[0], -1)


def scales4(sz: Tensor) -> Tensor:
    """PyTorch's int4 (scale, zero) pairs [K / 32, N, 2] -> ours [N, 2, K / 32]."""
    return sz.permute(1, 2, 0).contiguous()


def takes_int4(k: int, group: int) -> bool:
    """Whether an int4 matrix of ``k`` columns in groups of ``group`` runs on our kernel."""
    return group == 32 and k % 64 == 0 and usable()


def takes_int8(k: int) -> bool:
    """Whether an int8 matrix of ``k`` columns runs on our kernel."""
    return k % 32 == 0 and usable()
