"""The bundled GGUF with every tensor dequantised to float32, written once (cached): the same
weights our engine runs, in the file format llama-server reads. With it (and no flash
attention, a float32 KV cache) llama.cpp computes what our engine computes, so its
log-probabilities can be held to a tight tolerance; on the Q4_1 file itself llama.cpp
multiplies with 8-bit quantised activations, which moves them by tenths of a nat."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from gguf import GGUFReader, GGUFValueType, GGUFWriter, LlamaFileType, dequantize

SKIP = ("general.architecture", "general.file_type")  # the writer sets these itself


def f32_copy(src: Path, cache: Path) -> Path:
    """``src`` as an all-float32 GGUF under ``cache`` (written once, ~0.5 GB for SmolLM2)."""
    out = cache / f"{src.stem}-f32.gguf"
    if out.exists():
        return out
    cache.mkdir(parents=True, exist_ok=True)
    reader = GGUFReader(src)
    part = out.with_suffix(".part")
    writer = GGUFWriter(part, reader.fields["general.architecture"].contents())
    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name in SKIP:
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == GGUFValueType.ARRAY else None
        writer.add_key_value(name, field.contents(), vtype, sub_type=sub)
    writer.add_file_type(LlamaFileType.ALL_F32)
    for t in reader.tensors:
        shape = tuple(int(x) for x in reversed(t.shape))  # GGML lists the fastest axis first
        writer.add_tensor(
            t.name, dequantize(t.data, t.tensor_type).astype(np.float32).reshape(shape)
        )
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    part.rename(out)
    return out
