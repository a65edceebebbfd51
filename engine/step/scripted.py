"""The fast paths' step functions (``engine.step.forward``) compiled by TorchScript, for the CPU.

Why this remains: on the CPU the bench measured the eager step 0.87x of TorchScript on
SmolLM2-135M in float32, and slower again while another thread holds the GIL (the window
painting), because TorchScript's interpreter runs a token's ~450 op launches without the GIL;
``torch.compile`` took minutes to build and was slower still (resources/notes/
fast-path-python.md has the figures). So ``FastStepper`` and ``T5FastStepper`` run this on CPU,
behind the same interface, and the eager functions everywhere else or when TorchScript is
unavailable (Python 3.14, a torch without it).

No second copy of the model code exists: the source TorchScript compiles is the text of the
Python functions themselves, with the module's integer constants (slot indices, kinds)
written in as numbers because TorchScript cannot read module-level ints. A
``CompilationUnit`` is used rather than ``torch.jit.script``, which warns that it is
deprecated on every call.
"""

from __future__ import annotations

import inspect
import logging
import re
import threading
from collections.abc import Callable
from typing import Any

import torch

from engine.step import forward as step

log = logging.getLogger(__name__)

# the functions each step needs, callees first
DECODER = (
    "linear", "int8_onednn", "mm", "rms", "norm", "affine", "act", "rotate", "attend",
    "rotary_tables", "masks", "write_kv", "decoder_layer", "forward",
)  # fmt: skip
T5 = ("linear", "write_kv", "t5_norm", "t5_act", "t5_bias_mask", "t5_layer", "t5_forward")

_units: dict[str, Any] = {}
_lock = threading.Lock()


def source(names: tuple[str, ...]) -> str:
    """The text of ``engine.step.forward``'s functions ``names``, its int constants inlined."""
    constants = {
        name: value
        for name, value in vars(step).items()
        if name.isupper() and isinstance(value, int)
    }
    pattern = re.compile(r"\b(" + "|".join(sorted(constants, key=len, reverse=True)) + r")\b")
    text = "\n\n".join(inspect.getsource(getattr(step, name)) for name in names)
    return pattern.sub(lambda m: str(constants[m.group(1)]), text)


def _resolve(name: str) -> Any:
    return vars(step).get(name)


def scripted(entry: str) -> Callable[..., torch.Tensor] | None:
    """The TorchScript form of ``engine.step.forward.forward`` (``entry="forward"``) or of
    ``t5_forward``, compiled once per process; None (with a log line) when TorchScript cannot
    compile it here: then callers run the eager function."""
    names = DECODER if entry == "forward" else T5
    with _lock:
        if entry not in _units:
            try:
                unit = torch.jit.CompilationUnit()
                unit.define(source(names), rcb=_resolve)
                _units[entry] = unit
            except Exception as exc:  # noqa: BLE001 - TorchScript is an optimisation here
                log.info("fast path runs eagerly: TorchScript could not compile it: %s", exc)
                _units[entry] = None
    unit = _units[entry]
    return None if unit is None else getattr(unit, entry)


def cpu_step(device: torch.device, entry: str) -> Callable[..., torch.Tensor]:
    """The step a stepper on ``device`` runs: TorchScript on the CPU where it compiles, else
    the eager function."""
    eager = getattr(step, entry)
    if device.type != "cpu":
        return eager
    return scripted(entry) or eager
