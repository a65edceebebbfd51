"""What an expansion by probability keeps (engine.tree.expand): no torch here, so the window
can offer the choice before the engine is imported. Every option is checked when the record is
made, so an expansion is bounded before it starts: at most ``max_nodes`` new nodes, whatever
the depth and the number of children would allow (50 children to depth 6 is 15.6 billion)."""

from __future__ import annotations

import math
from dataclasses import dataclass

MAX_DEPTH = 12  # levels, each one batched forward pass per 64 frontier nodes
MAX_CHILDREN = 50
MAX_TOP_N = 100  # candidates kept on each node (engine.tree.node.MAX_TOP)
# New nodes one expansion may add: 2,000 by default (about 32 batched passes on the frontier;
# seconds on a laptop's CPU for a 135M model), 20,000 at most (a 5 MB tree file).
DEFAULT_MAX_NODES = 2_000
MAX_EXPAND_NODES = 20_000


@dataclass(frozen=True)
class ExpandOptions:
    depth: int = 3
    max_children: int = 3
    min_prob: float = 0.0
    top_p: float = 1.0
    use_sampler: bool = False  # rank and cut by the after-sampler probability, not the raw one
    top_n: int = 5  # candidates kept on each node for the Distribution view
    max_nodes: int = DEFAULT_MAX_NODES  # the node budget: new nodes at most, then it stops

    def __post_init__(self) -> None:
        for name, most in (("depth", MAX_DEPTH), ("max_children", MAX_CHILDREN),
                           ("top_n", MAX_TOP_N), ("max_nodes", MAX_EXPAND_NODES)):  # fmt: skip
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= most:
                raise ValueError(f"{name} must be a whole number from 1 to {most:,}, got {value!r}")
        for name in ("min_prob", "top_p"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not (
                math.isfinite(value) and 0 <= value <= 1
            ):
                raise ValueError(f"{name} must be a probability in [0, 1], got {value!r}")
