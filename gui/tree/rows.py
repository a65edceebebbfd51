"""What the Tree tab's rows say, worked out from a tree without Qt: the outline (one row per
stretch that does not fork), each row's text (its whole stretch, never cut inside a word), the
path's probability per token beside its total in percent and log p, who chose a row's tokens
where the sampler did not (you, or the class in a live round), the order of the rows (as made,
or the most / least likely leaves first) and the most and least likely leaves.

Branches are compared by their probability per token (the geometric mean, 1 / perplexity): a
path's total probability falls with every token, so by the total the shortest branch would
always be the most likely one."""

from __future__ import annotations

import math
from typing import Any

from engine.words import count
from gui.common.step_text import pct

try:  # a live round's token the class chose (engine.records.CLASS)
    from engine.records import CLASS
except ImportError:  # pragma: no cover - an engine without live rounds' records
    CLASS = "class"

ROW_CHARS = 2000  # a stretch longer than this (a long run) ends with "…" at a word's end
PROMPT_CHARS = 300  # the root row shows the prompt's end (where the tree grows from)
AS_MADE, LIKELY_FIRST, UNLIKELY_FIRST = "made", "likely", "unlikely"
ORDERS = (
    (AS_MADE, "As made"),
    (LIKELY_FIRST, "Most likely first"),
    (UNLIKELY_FIRST, "Least likely first"),
)


def token_label(text: str) -> str:
    """A token as a reader can see it: a leading space as ␣, line breaks as ⏎."""
    shown = text.replace("\n", "⏎").replace("\t", "⇥")
    if shown.startswith(" "):
        shown = "␣" + shown[1:]
    return shown or "∅"


def stretch_text(text: str, limit: int = ROW_CHARS) -> str:
    """A row's text: a single token as ``token_label`` shows it; a stretch whole (line breaks
    as ⏎), or up to the last word that fits in ``limit`` characters, then "…"."""
    shown = token_label(text)
    if len(shown) <= limit:
        return shown
    cut = shown[:limit]
    space = cut.rfind(" ")
    return (cut[:space] if space > limit // 2 else cut) + " …"


def prompt_text(prompt: str, limit: int = PROMPT_CHARS) -> str:
    """The root row: the prompt on one line, its end kept (from a word's start) when long."""
    flat = " ".join(prompt.split())
    if len(flat) <= limit:
        return flat or "(empty prompt)"
    tail = flat[-limit:]
    space = tail.find(" ")
    return "… " + (tail[space + 1 :] if 0 <= space < limit // 2 else tail)


def path_percent(logprob: float) -> str:
    """A path's probability as the lesson says it: 2.6%, 0.2%, <0.1% (never "0%")."""
    return pct(math.exp(logprob)) if math.isfinite(logprob) else "0%"


def per_token(tree: Any, nid: int) -> float:
    """The path's probability per token (``RunTree.per_token``): how branches compare."""
    return tree.per_token(nid)


def who_chose(tree: Any, row: list[int]) -> str:
    """The row's tokens chosen by someone, not the sampler, by step: "step 12: the class's
    choice", "steps 3, 4: chosen by you"; "" when the sampler chose them all."""
    named: dict[str, list[int]] = {}
    for nid in row:
        step = tree.nodes[nid].step
        if step is None:
            continue
        if step.source == CLASS:
            named.setdefault("the class's choice", []).append(tree.nodes[nid].depth)
        elif step.forced:
            named.setdefault("chosen by you", []).append(tree.nodes[nid].depth)
    parts = []
    for label, steps in named.items():
        shown = ", ".join(map(str, steps[:6])) + (", …" if len(steps) > 6 else "")
        parts.append(f"{'step' if len(steps) == 1 else 'steps'} {shown}: {label}")
    return "; ".join(parts)


def row_tip(tree: Any, row: list[int]) -> list[str]:
    """The row's hover, line by line: its text, its first token, who chose, the path."""
    first, last = tree.nodes[row[0]], tree.nodes[row[-1]]
    text = "".join(tree.nodes[n].text for n in row)
    span = f"step {first.depth}" if len(row) == 1 else f"steps {first.depth}–{last.depth}"
    end = "a leaf: the end of a branch" if not last.children else "a fork below"
    lines = [
        text[:2000],
        f"{count(len(row), 'token')} ({span}) · {end}",
        f"first token: p raw {pct(first.raw_prob)} · after the sampler {pct(first.prob)} · "
        f"entropy {first.entropy_raw:.2f} bits",
    ]
    chose = who_chose(tree, row)
    if chose:
        lines.append(chose)
    lines.append(
        f"path: {pct(per_token(tree, last.id))} per token (perplexity "
        f"{tree.perplexity(last.id):.2f}) · in all {path_percent(last.path_logprob)} "
        f"(log p {last.path_logprob:.3f}) over {count(last.depth, 'token')}"
    )
    return lines


def here_text(tree: Any) -> str:
    """The info line's words on the node stood on."""
    node = tree.nodes[tree.cursor]
    if not node.depth:
        return "at the prompt"
    return (
        f"here: {count(node.depth, 'token')}, {pct(per_token(tree, node.id))} per token, path "
        f"{path_percent(node.path_logprob)} in all (log p {node.path_logprob:.2f})"
    )


def rows_of(tree: Any, order: str = AS_MADE) -> list[tuple[int, list[int]]]:
    """The outline: (parent row's last node or 0, the row's nodes), parents before children.
    A row runs down from a node while each node has exactly one child. With ``order`` the
    branches of each row come most (or least) likely first: by the best (worst) leaf under
    them, so the first leaf in the outline is the tree's most (least) likely. No recursion."""
    rank = _leaf_rank(tree, order)
    out: list[tuple[int, list[int]]] = []
    todo = [(0, c) for c in reversed(_ordered(tree.nodes[0].children, rank))]
    while todo:
        up, first = todo.pop()
        row = [first]
        while len(tree.nodes[row[-1]].children) == 1:
            row.append(tree.nodes[row[-1]].children[0])
        out.append((up, row))
        kids = _ordered(tree.nodes[row[-1]].children, rank)
        todo.extend((row[-1], c) for c in reversed(kids))
    return out


def _ordered(children: list[int], rank: dict[int, float] | None) -> list[int]:
    return children if rank is None else sorted(children, key=lambda c: -rank[c])


def _leaf_rank(tree: Any, order: str) -> dict[int, float] | None:
    """Per node, the probability per token of the best (``LIKELY_FIRST``) or, negated, of the
    worst leaf under it; None for the order as made. Children come after their parents in
    ``nodes``."""
    if order == AS_MADE:
        return None
    sign = 1.0 if order == LIKELY_FIRST else -1.0
    rank: dict[int, float] = {}
    for node in reversed(tree.nodes.values()):
        own = sign * per_token(tree, node.id) if not node.children else -math.inf
        rank[node.id] = max([own, *(rank[c] for c in node.children)])
    return rank


def extreme_leaf(tree: Any, likely: bool = True) -> int | None:
    """The leaf whose path is the most (least) likely per token (ties: the likelier path in
    all); None when the tree has no leaf."""
    leaves = tree.leaves()
    if not leaves:
        return None
    key = lambda n: (per_token(tree, n), tree.nodes[n].path_logprob)  # noqa: E731
    return max(leaves, key=key) if likely else min(leaves, key=key)
