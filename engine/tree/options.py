"""What an expansion by probability keeps (engine.tree.expand): no torch here, so the window
can offer the choice before the engine is imported."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ExpandOptions:
    depth: int = 3
    max_children: int = 3
    min_prob: float = 0.0
    top_p: float = 1.0
    use_sampler: bool = False  # rank and cut by the after-sampler probability, not the raw one
    top_n: int = 5  # candidates kept on each node for the Distribution view
