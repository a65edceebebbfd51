"""A job's failure in words a user can act on (no Qt here)."""

from __future__ import annotations

from engine.errors import (
    DrafterMismatchError,
    EmptyPromptError,
    ModelLoadError,
    NonFiniteLogitsError,
)


def friendly_error(exc: BaseException) -> str:
    """One message a user can act on."""
    import torch

    if isinstance(exc, torch.OutOfMemoryError) or "out of memory" in str(exc).lower():
        return (
            "The device ran out of memory. Try fewer new tokens, a smaller model, or the CPU. "
            f"({exc.__class__.__name__})"
        )
    from engine.serve.remote import RemoteError

    if isinstance(
        exc,
        (
            RemoteError,
            ModelLoadError,
            EmptyPromptError,
            DrafterMismatchError,
            NonFiniteLogitsError,
            ValueError,
        ),  # fmt: skip
    ):
        return str(exc)
    return f"{exc.__class__.__name__}: {exc}"
