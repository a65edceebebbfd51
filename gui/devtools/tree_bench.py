"""A 2,000-node run tree in the window (issue 25): the event loop's longest stall while the
Tree tab draws it and the keys and clicks move about it, and the time to reopen it from the
autosave. A figure for ``main.py bench``; no model (the tree is made up, as a long session's
would be: a generated path with full records and an expansion beside it)."""

from __future__ import annotations

import random
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from engine.records import Candidate, Step
from engine.tree import RunTree


def synthetic_tree(nodes: int = 2000, path_len: int = 600, fan: int = 3) -> RunTree:
    """A path of ``path_len`` generated tokens (each with a 20-candidate Step record), and an
    expansion, ``fan`` children per node breadth first, from points along it up to ``nodes``."""
    rng = random.Random(0)
    tree = RunTree(list(range(12)), "Once upon a time")
    at = 0
    for i in range(path_len):
        token = 100 + rng.randrange(400)
        cands = tuple(Candidate(token + k, f" w{k}", 0.5 / (k + 1), 0.5 / (k + 1))
                      for k in range(20))  # fmt: skip
        step = Step(i, token, f" w{token}", f" w{token}", 0.5, 0.5, 1, cands, 20, 2.0, 1.5,
                    0.01, 50.0)  # fmt: skip
        at = tree.add_child(at, token, step.text, 0.5, 0.5, -0.69, 2.0, [])
        tree.nodes[at].step = step
    frontier = [n for n in tree.path(at)[::40]]
    while len(tree.nodes) <= nodes and frontier:
        nid = frontier.pop(0)
        for k in range(fan):
            p = rng.uniform(0.01, 0.6)
            child = tree.add_child(nid, 1000 + k, f" t{k}", p, p, -1.0 - k, 3.0)
            frontier.append(child)
            if len(tree.nodes) > nodes:
                break
    tree.cursor = at
    return tree


def run_tree_bench(
    say: Callable[[str], None], nodes: int = 2000, moves: int = 300
) -> dict[str, Any]:
    from PySide6.QtWidgets import QApplication

    from gui.devtools.harness import Heartbeat, isolated_window
    from gui.devtools.open_bench import time_open
    from gui.shell.app import make_app

    app = make_app()
    folder = Path(tempfile.mkdtemp())
    w = isolated_window(folder, (1280, 720))
    tree = synthetic_tree(nodes)
    start = time.perf_counter()
    w.tree.open_tree(tree)  # the path in the pane and plots, the Tree tab drawn
    QApplication.processEvents()
    first_draw = time.perf_counter() - start
    beat = Heartbeat()
    beat.start()
    rng = random.Random(1)
    leaves = tree.leaves()
    for i in range(moves):
        if i % 10 == 0:
            w.tree.goto(rng.choice(leaves))  # a click on a leaf far away
        else:
            w.tree.move(rng.choice(("parent", "parent", "child", "next", "previous")))
        app.processEvents()
    gaps = beat.stop()
    w.autosave()
    mb = w.autosave_path.stat().st_size / 2**20
    w.close()
    seconds, _steps = time_open(w.autosave_path)
    worst = max(gaps) * 1000
    median = sorted(gaps)[len(gaps) // 2] * 1000
    say(
        f"8. a {len(tree.nodes) - 1}-node tree (1280x720): opened and drawn (path in the pane "
        f"and plots, Tree tab) in {first_draw * 1000:.0f} ms; then {moves} moves (keys, and a "
        f"click on a far leaf every 10th), each redrawn: longest event-loop stall {worst:.0f} "
        f"ms, median {median:.0f} ms; reopened from its autosave ({mb:.1f} MB) in "
        f"{seconds:.2f} s"
    )
    return {"tree_nodes": len(tree.nodes) - 1, "tree_first_draw_ms": first_draw * 1000,
            "tree_max_stall_ms": worst, "tree_reopen_s": seconds}  # fmt: skip
