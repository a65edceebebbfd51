"""The lab's own CPU kernels: the int8 / int4 products (``csrc/matvec.cpp``), one token's
step in one call (``csrc/layer.cpp``, ``csrc/step.cpp``'s Decoder) and a step's passes over
the vocabulary (``csrc/stats.cpp``: the record's numbers, a stage's cuts; ``csrc/greedy.cpp``:
a greedy step's).
Built on the machine that runs them, used where they are built and the products agree with
a reference; PyTorch's kernels and operations otherwise.

Why they exist: PyTorch's weight-only kernels are bound by their arithmetic on a 2-core CPU
(``_weight_int8pack_mm`` about 5 G weights a second a core, the int4 one 12), so a
quantised token reads its weights at a fraction of the memory's speed
(resources/notes/quantized-weights.md). Ours meet the integer weights with integer activations
(each group of 32 with its own scale: int16 for int8's products, 15 bits for int4's) in
integer dot products; see the C++ file's head.

Built once per CPU and torch (``-march=native``: AVX512-VNNI, AVX-512, AVX2 or plain C++)
with ``torch.utils.cpp_extension`` into the user's cache, a few seconds; the build and a
probe against float64 happen at the first CPU model (``prepare``, said while it loads). No
compiler, a failed build, a plain C++ build (no faster than PyTorch's) or a probe that
disagrees: PyTorch's kernels run, and ``why_not()`` says why. ``DECODING_LAB_NATIVE_KERNELS=0``
turns them off.

Layouts (what ``mm`` in ``engine.step.kernels`` tells apart by the weights' rank): int8
``[N, K / 32, 32]`` (the plain matrix, viewed); int4 ``[N, K / 64, 32]`` bytes with scales
``[N, 2, K / 32]`` by shape, in memory blocks of 8 rows with the rows side by side (``pack4``,
``scales4``; csrc/dots.h): the kernel's vectors hold 8 rows' sums, never summed across.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import re
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

import engine.step.kernels  # defines the ops' schemas this library implements
from engine.models.device import cpu_flags, switched_off

SOURCE = Path(__file__).with_name("csrc") / "matvec.cpp"
# the products; a layer's small steps; its attention; a whole token's step; a step record's numbers
# (engine.decode.measure), a sampler stage's cuts (engine.sampling.chain), a greedy step's
SOURCES = tuple(
    SOURCE.with_name(f)
    for f in ("matvec.cpp", "layer.cpp", "attention.cpp", "step.cpp", "stats.cpp", "greedy.cpp")
)
# integer dots; exp, log and bfloat16 rounding; what the files share
HEADERS = tuple(SOURCE.with_name(f) for f in ("dots.h", "vmath.h", "lab.h", "stats.h"))
SWITCH = "DECODING_LAB_NATIVE_KERNELS"
# The lab's int4 layout, named in the quantised-layer caches' folders (a cache written in an
# earlier layout is not read as this one): rows in blocks of 8 since stop 49
LAYOUT = "lab8"
# The CPU the build is for: this one by default; the tests build the AVX2 and plain C++ paths
# too (haswell, x86-64) in a child process, whatever this machine has.
MARCH = "DECODING_LAB_NATIVE_MARCH"
# The activations' integer grids (csrc/dots.h): int8's products take them as int16, int4's
# in 15 bits (two bytes each, x = 128 h + l): an element is off by max|x_g| / (2 grid) at most
INT8_GRID = 32767
INT4_GRID = 16383
BUILD_WAIT_S = 180  # a build takes ~6 s here; another process's, waited for this long
_state: dict[str, str] = {}


def _march() -> str:
    want = os.environ.get(MARCH, "native").strip() or "native"
    return want if re.fullmatch(r"[a-z0-9][a-z0-9._-]{0,31}", want) else "native"


def tried() -> bool:
    """Whether this process has tried to build and load the kernels yet."""
    return usable.cache_info().currsize > 0


def prepare(say: Callable[[str], None] | None) -> bool:
    """``usable()``, saying first what happens where this process has not tried yet: the
    kernels are built (a few seconds, once per CPU and torch), or a build is loaded."""
    if say is not None and not tried() and not switched_off(SWITCH):
        built = (_build_folder() / f"{_library_name()}.so").exists()
        say("Loading the lab's CPU kernels" if built else
            "Building the lab's CPU kernels for this CPU (once, a few seconds)")  # fmt: skip
    return usable()


def why_not() -> str:
    """Why the lab's kernels do not run here ("" where they do, or before the first try)."""
    return _state.get("why", "")


def isa() -> str:
    """The instruction set the kernels were built for ("" where they were not)."""
    return _state.get("isa", "")


def _build_folder() -> Path:
    from engine.models.cache import cache_root

    text = b"".join(path.read_bytes() for path in (*SOURCES, *HEADERS))
    cpu = " ".join(sorted(cpu_flags()))
    built_with = "|".join((*engine.step.kernels.SCHEMAS, *_flags(), torch.__version__, cpu))
    key = hashlib.sha256(text + built_with.encode())
    return cache_root() / "kernels" / f"matvec-{_march()}-{key.hexdigest()[:16]}"


def _library_name() -> str:
    return f"decoding_lab_matvec_{_march().replace('-', '_').replace('.', '_')}"


def _flags() -> list[str]:
    # No floating-point traps are ever enabled: saying so lets GCC turn the branch-free
    # selects of csrc/vmath.h's exp and log (and stats.cpp's loops) into vector code. GCC
    # keeps to 256-bit vectors on AVX-512 CPUs unless asked: stats.cpp's passes over a
    # vocabulary take 0.75x the time at 512 (no effect on an AVX2 build)
    flags = ["-O3", f"-march={_march()}", "-fopenmp", "-fno-trapping-math"]
    return [*flags, "-mprefer-vector-width=512"]


def _build() -> None:
    """Load the built library (its ops then have their CPU kernels), building it first where
    it is not built. One process at a time (a file lock the system drops with a process that
    dies; waiting at most BUILD_WAIT_S): torch's builder waits on its own lock file with no
    end, so that one, when there, was left by a build that was killed, and is removed."""
    from filelock import FileLock, Timeout

    folder = _build_folder()
    folder.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(folder.parent / f".{folder.name}.lock"))
    try:
        lock.acquire(timeout=BUILD_WAIT_S)
    except Timeout:
        raise RuntimeError(f"another process has been building them for {BUILD_WAIT_S} s") from None
    try:
        built = folder / f"{_library_name()}.so"
        if built.exists():
            try:
                torch.ops.load_library(str(built))
                with contextlib.suppress(OSError):
                    os.utime(folder)  # in use: kept by another version's clean-up
                return
            except OSError:  # a damaged file (a full disk, say): built again, once
                shutil.rmtree(folder, ignore_errors=True)
        compiler = os.environ.get("CXX", "c++")
        if shutil.which(compiler) is None:
            raise RuntimeError(f"no C++ compiler ({compiler}) on PATH")
        _compile(folder)
    finally:
        lock.release()


def _compile(folder: Path) -> None:
    from torch.utils import cpp_extension

    try:
        import ninja  # the build tool, from PyPI: on PATH for torch's builder

        os.environ["PATH"] = ninja.BIN_DIR + os.pathsep + os.environ.get("PATH", "")
    except ImportError:
        pass
    folder.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(OSError):
        (folder / "lock").unlink()  # torch's, left by a killed build: we hold the real lock
    for old in folder.parent.glob(f"matvec-{_march()}-*"):  # an earlier source's, unused a day
        with contextlib.suppress(OSError):
            if old != folder and time.time() - old.stat().st_mtime > 86400:
                shutil.rmtree(old, ignore_errors=True)
    cpp_extension.load(
        name=_library_name(), sources=[str(path) for path in SOURCES], extra_cflags=_flags(),
        extra_ldflags=["-fopenmp"], build_directory=str(folder), is_python_module=False,
        verbose=False,
    )  # fmt: skip


def bound(
    x: Tensor,
    w: Tensor,
    ref: Tensor,
    few_rows: bool,
    rounded: Tensor | None = None,
    grid: int = INT8_GRID,
) -> Tensor:
    """How far the kernels' product of x [M, K] (bfloat16) and the float weights w [N, K]
    they stand for may be from the exact one ``ref`` [M, N]: the output's rounding to
    bfloat16 (half a unit: at most 2^-8 of it), float32 sums of K terms (K 2^-24 of the sum of
    |x w|), and, for a few rows of x (the integer products), each activation off by at most
    half its group's step, max|x_g| / (2 ``grid``) (``INT8_GRID`` or ``INT4_GRID``; a group
    under 1e-30 counts as zeros: off by its max), times the weight it meets: ``rounded``
    [N, K] (int4: scale * u, the kernel's integers times their scale; default |w|)."""
    xd, wd = x.double(), w.double()
    slack = xd.abs() @ wd.abs().t()
    out = ref.abs() * 2.0**-8 + slack * (x.shape[1] * 2.0**-24) + 1e-33  # 1e-33: tiny sums
    if few_rows:
        top = xd.reshape(x.shape[0], -1, 32).abs().amax(-1, keepdim=True)
        step = torch.where(top < 1e-30, top, top / (2.0 * grid))  # under 1e-30: zeros
        per_column = step.expand(-1, -1, 32).reshape(x.shape)
        meets = wd.abs() if rounded is None else rounded.double().abs()
        out = out + per_column @ meets.t()
    return out


def scaled_u(u: Tensor, sz: Tensor) -> Tensor:
    """scale * u [N, K] of int4 integers u [N, K] and PyTorch's pairs sz [K / 32, N, 2]: what
    an activation's rounding meets in the int4 kernel (its zero term uses exact sums)."""
    scale = sz[..., 0].float().t().repeat_interleave(u.shape[1] // sz.shape[0], 1)
    return u.float() * scale


def agrees(n: int, k: int, rows: int, seed: int = 44) -> bool:
    """Both products of ``rows`` rows of x with an [n, k] matrix against a float64 product of
    the same integers, within ``bound`` (more than 4 rows take the tile route); int4 takes
    the first rows in whole blocks of 8."""
    from engine.quant.formats import dequantize_int4, dequantize_int8, quantize_int4, quantize_int8

    gen = torch.Generator().manual_seed(seed)
    w = torch.randn(n, k, generator=gen)
    q8, s8 = quantize_int8(w)
    u4, sz = quantize_int4(w[: n // 8 * 8])
    x = torch.randn(rows, k, generator=gen)
    x[:, 5] = 9.0  # a hidden state's largest element is 7-18x its RMS
    x = x.to(torch.bfloat16)
    got8 = torch.ops.decoding_lab.int8_mm(x, q8.view(n, k // 32, 32), s8)
    got4 = torch.ops.decoding_lab.int4_mm(x, pack4(u4), scales4(sz))
    few = rows <= 4
    for got, ref_w, meets, grid in (
        (got8, dequantize_int8(q8, s8), None, INT8_GRID),
        (got4, dequantize_int4(u4, sz), scaled_u(u4, sz), INT4_GRID),
    ):
        ref = x.double() @ ref_w.double().t()
        if not bool(((got.double() - ref).abs() <= bound(x, ref_w, ref, few, meets, grid)).all()):
            return False
    return True


def _probe_agrees() -> bool:
    """``agrees`` at shapes that reach every branch: 167 rows (int8: a tail of 3 past the
    blocks of 4; int4: 20 blocks of 8), 34 groups, one to four rows of x, and a tile route over
    two tiles of 512 rows."""
    return all(agrees(167, 1088, rows) for rows in (1, 4)) and agrees(600, 64, 7)


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
        if _state["isa"] == "scalar":
            _state["why"] = "no AVX2 or AVX-512 here: PyTorch's kernels are faster"
            return False
        if not _probe_agrees():
            _state["why"] = "the lab's kernels disagreed with float64 here"
            return False
    except Exception as e:  # noqa: BLE001 - any build failure means PyTorch's kernels run
        lines = str(e).strip().splitlines() or [type(e).__name__]
        said = next((ln for ln in lines if "error" in ln.lower()), lines[0])  # the compiler's
        _state["why"] = f"no build of the lab's kernels here ({said.strip()[:200]})"
        return False
    _state["why"] = ""
    return True


def pack4(u: Tensor) -> Tensor:
    """u uint8 [N, K] in 0..15 (N a multiple of 8) -> the int4 kernel's [N, K / 64, 32]: in
    memory, blocks of 8 rows; per 8 columns, the block's 8 rows' 4 bytes, byte t / 2 holding
    columns t (low nibble) and t + 1 (csrc/dots.h)."""
    n, k = u.shape
    v = u.reshape(n // 8, 8, k // 8, 8)
    b = v[..., 0::2] | (v[..., 1::2] << 4)  # [blocks, 8 rows, K / 8, 4 bytes]
    return b.permute(0, 2, 1, 3).contiguous().reshape(n, k // 64, 32)


def unpack4(w: Tensor) -> Tensor:
    """The inverse of ``pack4``: [N, K / 64, 32] -> u uint8 [N, K]."""
    n, k = w.shape[0], w.shape[1] * 64
    b = w.reshape(n // 8, k // 8, 8, 4).permute(0, 2, 1, 3)  # [blocks, 8 rows, K / 8, 4]
    return torch.stack((b & 15, b >> 4), -1).reshape(n, k)


def scales4(sz: Tensor) -> Tensor:
    """PyTorch's int4 (scale, zero) pairs [K / 32, N, 2] -> ours [N, 2, K / 32] by shape, in
    memory per block of 8 rows and group: the 8 scales, then the 8 zeros."""
    g, n, _ = sz.shape
    return sz.reshape(g, n // 8, 8, 2).permute(1, 0, 3, 2).contiguous().reshape(n, 2, g)


def unscales4(s: Tensor) -> Tensor:
    """The inverse of ``scales4``: ours [N, 2, K / 32] -> PyTorch's [K / 32, N, 2]."""
    n, _, g = s.shape
    return s.reshape(n // 8, g, 2, 8).permute(1, 0, 3, 2).reshape(g, n, 2).contiguous()


def takes_int4(k: int, group: int, n: int) -> bool:
    """Whether an int4 matrix of ``n`` rows and ``k`` columns in groups of ``group`` runs on
    our kernel (blocks of 8 rows)."""
    return group == 32 and k % 64 == 0 and n % 8 == 0 and usable()


def takes_int8(k: int) -> bool:
    """Whether an int8 matrix of ``k`` columns runs on our kernel."""
    return k % 32 == 0 and usable()


def takes_rows(*rows: Tensor | None) -> bool:
    """Whether the lab's CPU passes over a vocabulary (``csrc/stats.cpp``: a step record's
    numbers, a sampler stage's cuts) take these: float32 [rows, vocab] CPU tensors, where the
    kernels are built. None (an absent argument) is taken."""
    for t in rows:  # a loop, not all() over a generator: a few calls a token
        if t is not None and (t.dtype != torch.float32 or t.dim() != 2 or not t.is_cpu):
            return False
    return usable()


def dequantised(w: Tensor, s: Tensor) -> Tensor:
    """The float32 weights [N, K] of a matrix in the lab's layouts (int8 or int4)."""
    from engine.quant.formats import dequantize_int4, dequantize_int8

    if w.dtype == torch.int8:
        return dequantize_int8(w.reshape(w.shape[0], -1), s)
    return dequantize_int4(unpack4(w), unscales4(s))


def _keep(ctx: Any, inputs: tuple[Tensor, Tensor, Tensor], output: Tensor) -> None:
    ctx.save_for_backward(inputs[1], inputs[2])
    ctx.x_dtype = inputs[0].dtype


def _grad_x(ctx: Any, grad: Tensor) -> tuple[Tensor, None, None]:
    """d(x W^T)/dx: the gradient times the weights the kernel multiplies by (input
    attribution through a quantised model, engine.internals.attribution)."""
    w, s = ctx.saved_tensors
    return (grad.float() @ dequantised(w, s)).to(ctx.x_dtype), None, None


def _meta(x: Tensor, w: Tensor, s: Tensor) -> Tensor:
    """The products' shapes for tracing (torch.compile): [M, N], float32 from an int8 head's
    float32 scales, else bfloat16."""
    out = torch.float32 if s.dtype == torch.float32 else torch.bfloat16
    return x.new_empty((x.shape[0], w.shape[0]), dtype=out)


for _op in ("decoding_lab::int8_mm", "decoding_lab::int4_mm"):
    torch.library.register_autograd(_op, _grad_x, setup_context=_keep)
    torch.library.register_fake(_op)(_meta)
