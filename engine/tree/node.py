"""The plain parts of a run tree: a node, the file format's name and its limits."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

FORMAT = "decoding-lab-tree/1"
MAX_NODES = 200_000  # a hostile file cannot make us allocate without bound
MAX_TEXT = 10_000
MAX_TOP = 100


class TreeFormatError(ValueError):
    """A tree file that is not what it claims; the message names the field."""


@dataclass(slots=True)
class Node:
    id: int
    token_id: int  # -1 for the root (the prompt)
    text: str
    parent: int | None
    raw_prob: float = 1.0  # softmax of the logits, temperature 1, no filters
    prob: float = 1.0  # after the sampler chain
    logprob: float = 0.0  # log of raw_prob, from log_softmax (not log of a rounded float)
    path_logprob: float = 0.0  # sum of logprob from the root down to here
    depth: int = 0
    entropy_raw: float = 0.0  # bits, of the distribution this token was picked from
    children: list[int] = field(default_factory=list)
    # the top-N of the distribution this token was picked from: (token_id, text, raw, after)
    top: list[tuple[int, str, float, float]] = field(default_factory=list)
    # the whole engine.records.Step this token was generated with (top-N raw and after the
    # sampler, cut-by, settings' notes), when it came from a run; None when it was expanded
    step: Any = None
