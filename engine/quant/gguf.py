"""A GGUF file run on its own quantised weights (``quantise_gguf``): its 4-bit matrices (Q4_0,
Q4_1, Q4_K) go to the int4 kernel as they are, integers and group scales read from the blocks
(``engine.quant.gguf_blocks``); every other type has no kernel here and is rounded to int8 per
row from its dequantised values (Q8_0, Q6_K, Q5_*, float16 ...), or to the kind asked for.

The model around them (norms, embeddings) is transformers' own conversion of the file
(``engine.models.loading.converted_gguf``), which also names each tensor: a matrix's blocks
are used only if, after transformers' row reordering (Llama's q and k), they dequantise to
the very weights transformers made of them; otherwise the matrix is rounded here from those,
and the summary says so. The result, in the kernels' layout for this CPU, is cached next to
the float conversion, so the next start reads it instead of decoding the file again.

Which GGUF types run as they are (``--dtype int4``):

* Q4_0, Q4_1, Q4_K: the int4 kernel takes the file's integers unchanged; their float16 group
  scale and zero become bfloat16 (the kernel's scale type, a change of at most 2^-9 of each);
* everything else is dequantised (by transformers) and rounded here to int8 per row: Q8_0
  (its scales are per block of 32, the int8 kernel's per row), Q5_*, Q6_K, Q2_K, Q3_K, the
  IQ types, float16 / bfloat16 / float32 matrices;
* the output head is int8 per row whatever the file holds (a tied head is the embedding).

With ``--dtype int8`` every matrix is rounded to int8 per row from the dequantised values.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from engine.quant.apply import (
    Forced,
    Prequantised,
    QuantSummary,
    finish,
    install,
    quantize_model,
)
from engine.quant.formats import INT4, INT8, int4_groups, int4_refusal
from engine.quant.gguf_blocks import FOUR_BIT, read_blocks
from engine.quant.linear import QuantLinear

MATCH = 1e-4  # relative difference allowed between the blocks and transformers' dequantisation
MANIFEST = "decoding-lab-quantised.json"
TENSORS = "layers.safetensors"


def _row_order(processor: Any, name: str, n: int) -> np.ndarray | None:
    """Where transformers takes each row of the GGUF tensor ``name`` from (its processor
    reverses llama.cpp's q/k permutation), found by running the processor on the row numbers;
    None when it does more than reorder rows (a transpose), so blocks cannot follow."""
    rows = np.arange(n, dtype=np.float32)[:, None]
    try:
        out = processor.process(weights=rows, name=name, parsed_parameters={"tensors": {}})
    except Exception:  # noqa: BLE001 - a processor we do not know: no blocks, round instead
        return None
    w = getattr(out, "weights", None)
    if not isinstance(w, np.ndarray) or w.shape != (n, 1):
        return None
    order = w[:, 0].astype(np.int64)
    return order if np.array_equal(np.sort(order), np.arange(n)) else None


def _mapping(reader: Any, model: nn.Module) -> tuple[dict[str, str], Any]:
    """GGUF tensor name -> the model's layer name, and transformers' processor for the file."""
    from transformers.modeling_gguf_pytorch_utils import (
        TENSOR_PROCESSORS,
        TensorProcessor,
        get_gguf_hf_weights_map,
    )

    field = reader.fields.get("general.architecture")
    arch = bytes(field.parts[field.data[0]]).decode() if field is not None else ""
    cfg = model.config
    config = {"num_attention_heads": getattr(cfg, "num_attention_heads", None),
              "num_key_value_heads": getattr(cfg, "num_key_value_heads", None)}  # fmt: skip
    processor = TENSOR_PROCESSORS.get(arch, TensorProcessor)(config=config)
    names = get_gguf_hf_weights_map(model, processor)
    layers = {k.removesuffix(".weight"): k for k in names.values() if k.endswith(".weight")}
    return {g: h.removesuffix(".weight") for g, h in names.items() if h in layers.values()}, (
        processor
    )


def _as_is(t: Any, processor: Any, w: torch.Tensor) -> Prequantised | str:
    """The tensor's own blocks for the int4 kernel, or why not."""
    kind = t.tensor_type.name
    n, k = w.shape
    shape = tuple(int(x) for x in reversed(t.shape.tolist()))
    if shape != (n, k):
        return f"shape {shape} is not the layer's {(n, k)}"
    if why := int4_refusal(n, k):
        return why
    order = _row_order(processor, t.name, n)
    if order is None:
        return "transformers does more than reorder its rows"
    u, scale, offset = read_blocks(t.data, kind, n, k)
    u, scale, offset = u[order], scale[order], offset[order]
    deq = (u.float().reshape(n, -1, 32) * scale[..., None] + offset[..., None]).reshape(n, k)
    diff = float((deq - w.float()).norm() / w.float().norm().clamp_min(1e-30))
    if diff > MATCH:
        return f"its blocks differ from transformers' weights by {diff:.1e}"
    return Prequantised(u, int4_groups(scale, offset), f"int4, GGUF {kind} as it is")


def gguf_plan(path: Path, model: nn.Module, kind: str) -> dict[str, Prequantised | Forced]:
    """What each layer of ``model`` (transformers' conversion of ``path``, in float32) becomes:
    for int4, the file's 4-bit blocks as they are and, for every other type, int8 per row from
    its dequantised values; for int8, int8 per row for all (from the dequantised values)."""
    from gguf import GGUFReader

    reader = GGUFReader(str(path))
    names, processor = _mapping(reader, model)
    layers = {name: m for name, m in model.named_modules()}
    plan: dict[str, Prequantised | Forced] = {}
    for t in reader.tensors:
        layer = names.get(t.name)
        module = layers.get(layer or "")
        if module is None or not hasattr(module, "weight"):
            continue
        w = module.weight.data
        w = w.t() if type(module).__name__ == "Conv1D" else w
        kind_of = t.tensor_type.name
        if kind == INT4 and kind_of in FOUR_BIT:
            got = _as_is(t, processor, w)
            if isinstance(got, Prequantised):
                plan[layer] = got
                continue
            plan[layer] = Forced(
                INT4, f"int4, rounded here from GGUF {kind_of} ({got})", f"GGUF {kind_of}"
            )
        else:
            plan[layer] = Forced(
                INT8, f"int8 per row, rounded here from GGUF {kind_of}", f"GGUF {kind_of}"
            )
    return plan


def _save(model: nn.Module, summary: QuantSummary, folder: Path) -> None:
    """Write every QuantLinear's buffers and origin, under a temporary name, then rename."""
    from safetensors.torch import save_file

    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = folder.parent / f".tmp-{folder.name}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    tensors, origins = {}, {}
    for name, m in model.named_modules():
        if isinstance(m, QuantLinear):
            q, s = m.stored()
            tensors[f"{name}.q"] = q.contiguous()
            tensors[f"{name}.s"] = s.contiguous()
            origins[name] = m.origin
    save_file(tensors, str(tmp / TENSORS))
    manifest = {"kind": summary.kind, "origins": origins, "kept": summary.kept,
                "fell_back": summary.fell_back,
                "bytes": (tmp / TENSORS).stat().st_size}  # fmt: skip
    (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1))
    shutil.rmtree(folder, ignore_errors=True)
    os.replace(tmp, folder)


def _load(model: nn.Module, folder: Path, kind: str) -> QuantSummary | None:
    """Install the cached layers, or None when the cache is missing, incomplete or for
    another model (then it is rebuilt)."""
    from safetensors import safe_open

    try:
        manifest = json.loads((folder / MANIFEST).read_text())
        if manifest["kind"] != kind or (folder / TENSORS).stat().st_size != manifest["bytes"]:
            return None
        layers = dict(model.named_modules())
        if any(name not in layers for name in manifest["origins"]):
            return None
        with safe_open(str(folder / TENSORS), framework="pt") as f:  # all read before any is used
            read = {name: (f.get_tensor(f"{name}.q"), f.get_tensor(f"{name}.s"), origin)
                    for name, origin in manifest["origins"].items()}  # fmt: skip
    except (OSError, ValueError, KeyError, TypeError, RuntimeError):
        return None
    summary = QuantSummary(
        kind, kept=list(manifest["kept"]), fell_back=list(manifest.get("fell_back", []))
    )
    for name, (q, s, origin) in read.items():
        install(model, name, q, s, origin, summary)
    return finish(model, summary)


def quantise_gguf(
    model: nn.Module, path: Path, kind: str, folder: Path, say: Callable[[str], None] = print
) -> QuantSummary:
    """``model`` (transformers' float conversion of ``path``) on the file's own integers where
    a kernel fits them (see the module doc), from the cache ``folder`` when it has been done
    before (``engine.models.loading.quant_cache_folder``: the layout belongs to the CPU)."""
    summary = _load(model, folder, kind)
    if summary is not None:
        say(f"Read the cached {kind} layers of {path.name}")
        return summary
    say(f"Reading {path.name}'s quantised blocks (once; later starts read the cache)")
    summary = quantize_model(model, kind, gguf_plan(path, model, kind), say)
    _save(model, summary, folder)
    return summary
