"""Quantised weights on the CPU: int8 per row and int4 in groups of 32 (the formats PyTorch's
own CPU kernels take), a model's matrices replaced by them, and a GGUF file's 4-bit blocks
turned into them without a second rounding (``formats``, ``linear``, ``apply``, ``gguf``)."""
