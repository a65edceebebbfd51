"""The tree part of `main.py bench` (issue 25): the batched expansion (one forward per level)
against the node-by-node reference on the same model, depth 3, 3 children; both must build the
same tree. Interleaved rounds (A B A B) so a shared CPU's load falls on both alike."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from engine.tree import RunTree
from engine.tree.expand import ExpandOptions, expand, expand_node_by_node

PROMPT = "The most surprising thing about the ocean is"


def _shape(tree: RunTree) -> list[tuple[int, ...]]:
    return sorted(tuple(tree.path_ids(n)) for n in tree.nodes)


def tree_section(
    bundle: Any, say: Callable[[str], None], depth: int = 3, children: int = 3, rounds: int = 2
) -> dict[str, Any]:
    ids = bundle.encode_prompt(PROMPT, False)
    opts = ExpandOptions(depth=depth, max_children=children)
    best = {"batched": float("inf"), "node by node": float("inf")}
    runs = {"batched": expand, "node by node": expand_node_by_node}
    trees, stats = {}, {}
    for _ in range(rounds):
        for name, fn in runs.items():
            tree = RunTree(ids)
            t0 = time.perf_counter()
            stats[name] = fn(bundle, tree, 0, opts)
            best[name] = min(best[name], time.perf_counter() - t0)
            trees[name] = tree
    same = _shape(trees["batched"]) == _shape(trees["node by node"])
    ratio = best["node by node"] / best["batched"]
    fb, fn_ = stats["batched"].forwards, stats["node by node"].forwards
    say(
        f"tree expansion ({bundle.name}, depth {depth}, {children} children, "
        f"{len(trees['batched'].nodes) - 1} nodes): batched {best['batched']:.3f}s in {fb} "
        f"forwards, node by node {best['node by node']:.3f}s in {fn_} forwards: "
        f"{ratio:.2f}x, same tree: {same}"
    )
    return {
        "nodes": len(trees["batched"].nodes) - 1,
        "batched_s": best["batched"],
        "node_by_node_s": best["node by node"],
        "forwards_batched": fb,
        "forwards_node_by_node": fn_,
        "ratio": ratio,
        "same_tree": same,
    }
