"""The engine's exceptions. No torch, so the window can name them before the engine loads."""

from __future__ import annotations


class ModelLoadError(Exception):
    """A model could not be loaded; the message says why in words a user can act on."""


class EmptyPromptError(ValueError):
    """The prompt has no tokens to condition on."""


class NonFiniteLogitsError(RuntimeError):
    """The model produced NaN or infinite scores (broken weights, or a dtype overflow)."""

    def __init__(self, step_index: int) -> None:
        super().__init__(
            f"The model produced NaN or infinite scores at step {step_index + 1}, so generation "
            "stopped there. Its weights may be damaged, or the number format overflowed: try "
            "float32 or another model."
        )
        self.step_index = step_index


class DrafterMismatchError(ValueError):
    """The draft model does not share the target's tokenizer."""


class TokenizerMismatchError(ValueError):
    """Two models compared token by token do not share a tokenizer."""


class InternalsUnavailable(ValueError):
    """Inside the step cannot read this model or this step (a served model, an architecture it
    does not know, a token with no context); the message says which."""


class GrammarStop(RuntimeError):
    """The grammar cannot go on (no token it allows is left, its matcher failed, or a chosen
    token broke it): the run stops here with what it made, never continuing unconstrained."""
