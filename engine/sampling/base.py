"""The stage contract shared by every sampler stage: the transformers-protocol base
class, the value checks, and the per-step state the chain hands its stateful stages.

Each processor follows ``__call__(input_ids, scores) -> scores`` with ``input_ids: [batch,
seq]`` and ``scores: [batch, vocab]``. A processor validates its arguments in ``__init__``
(``ValueError``) and never modifies ``scores`` in place: it returns a new tensor. Removed tokens
get ``-inf``. Every filter keeps at least one token. ``label`` names the stage as a person reads
it ("top-p 0.90"); the plots say which stage cut a token.

``build_chain`` adds a stage only when its value is not neutral (as transformers builds its
list), so no stage needs an "off" branch. It is the one place greedy is decided: temperature 0
makes the chain greedy, and ``Chain.pick`` then takes the argmax.

Boundary rules (documented because implementations differ):

* top-k keeps every token whose score is >= the k-th largest score, so tokens tied with the
  k-th are kept (transformers' rule; more than k can survive on exact ties).
* top-p keeps the smallest set of most-probable tokens whose mass reaches p: a token is kept
  when the mass of the tokens ranked above it is < p. The token that crosses p is therefore
  kept, and a set whose mass is exactly p keeps no extra token. Equal probabilities are ranked
  by token id (stable sort), so at a tie on the boundary the lower id is kept.
  ``top_p == 0`` keeps only the most probable token; ``top_p == 1`` is off.
* min-p keeps tokens with ``p >= min_p * p_max`` (ties with the threshold kept).
* temperature 0 means greedy: every token but the first maximal one is removed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

NEG_INF = float("-inf")


def _check(cond: bool, message: str) -> None:
    if not cond:
        raise ValueError(message)


class LogitsProcessor:
    """Base of the transformers-protocol processors."""

    uses_ids = False  # whether the stage reads input_ids (the chain builds them only if so)
    reweights = False  # a penalty: changes scores without removing tokens (before/after shown)
    needs_state = False  # reads the run's per-step state (generator, mirostat's mu)
    # a contract (the grammar): its cut is never skipped, and a row it leaves empty stops the
    # run with the stage's reason (``stops``) instead of going on without it
    binding = False

    @property
    def idle(self) -> bool:
        """Whether the stage changes no score whatever the run (a chain leaves it out)."""
        return False

    def stops(self) -> list[str | None]:
        """A binding stage: per row of the last call, why it cannot go on (None: it can)."""
        return []

    @property
    def label(self) -> str:
        return type(self).__name__

    def note(self, before: torch.Tensor, after: torch.Tensor) -> torch.Tensor | str | None:
        """What this stage did at this step, for the Step record: a small tensor ``[batch, k]``
        that goes to the host with the step's one copy (``describe`` words it), a string
        already known on the host, or None. ``before``/``after``: the stage's input and output."""
        return None

    def describe(self, values: Sequence[float], show: Callable[[int], str]) -> str:
        """Word the host copy of ``note``'s tensor (one row); ``show`` prints a token id."""
        return ""

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({args})"


def _window(input_ids: torch.Tensor, last_n: int) -> torch.Tensor:
    return input_ids[..., -last_n:] if last_n > 0 else input_ids


def _keep_top(remove: torch.Tensor, scores: torch.Tensor, k: int = 1) -> torch.Tensor:
    """``remove`` without the ``k`` highest scores (transformers' min_tokens_to_keep)."""
    kth = torch.topk(scores, min(k, scores.shape[-1]), dim=-1).values[..., -1:]
    return remove & (scores < kth)


class StepState:
    """What a chain's stateful stages read at each step: the step's seeded generator (XTC's
    draw) and mirostat's running target surprise mu. The session fills it before each step."""

    def __init__(self) -> None:
        self.generator: torch.Generator | None = None
        self.mu: float | None = None
