"""The run's tree on the shared web page: a collapsible tree of plain HTML (``<details>`` and
``<summary>``, no script, nothing fetched). No Qt.

Every node shows its token (spaces as ``␣``, line breaks as ``↵``, so a leading space is
visible), the model's probability for it (raw, before the sampler; its colour as in the
window's Tree tab) and the path log-probability from the prompt down to it (its title: the
probability per token too, which compares paths of different lengths). The current path (the
node the window stood on and its ancestors) is marked and unfolded; other branches start
folded.

A run of nodes with one child each (a plain generated stretch) is drawn as one line, so the
nesting follows the branch points, not the tokens. Both are bounded, because a tree file may
hold 200,000 nodes: at most ``MAX_PAGE_NODES`` nodes off the current path are drawn (the
current path always is, down to the nesting bound), nesting stops at ``MAX_NESTING`` levels
of ``<details>``, and a token is cut at ``TOKEN_CHARS`` characters (its first ``TITLE_CHARS``
in the hover title). What is left out is counted on the page. Drawing is iterative: no
recursion, whatever the depth.
"""

from __future__ import annotations

import html
import math
import re
from typing import Any

from engine.palette import tree_band
from engine.tree.model import per_token
from engine.words import count

MAX_PAGE_NODES = 5000  # nodes off the current path; a 3x3 expansion has 39
MAX_NESTING = 32  # levels of <details> below the prompt
TOKEN_CHARS = 40
TITLE_CHARS = 60
PROMPT_CHARS = 200  # the prompt at the top of the tree (it is in full above, on the page)

TREE_STYLE = """
#tree { font: .95rem/1.7 ui-monospace, monospace; border: 1px solid var(--line);
  border-radius: 4px; padding: .4rem .8rem; overflow-x: auto; }
#tree details > :not(summary) { margin-left: 1.4rem; border-left: 1px dotted var(--line);
  padding-left: .4rem; }
#tree summary { cursor: pointer; }
#tree .tn { white-space: pre; margin-right: .5rem; }
#tree .tn small { color: var(--muted); margin-left: .25rem; }
#tree .sw { display: inline-block; width: .6rem; height: .6rem; margin-right: .25rem;
  border-radius: 2px; }
#tree .cur { font-weight: bold; outline: 2px solid var(--accent); border-radius: 2px; }
#tree .t0 { background: var(--t0); } #tree .t1 { background: var(--t1); }
#tree .t2 { background: var(--t2); } #tree .t3 { background: var(--t3); }
#tree .more { color: var(--muted); font-style: italic; }
"""

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def band(p: float) -> int:
    """The colour band (0-9) of a probability: the page's ten bands of the window's colours."""
    if not math.isfinite(p):
        return 0
    return min(9, max(0, int(p * 10)))


def shown_token(text: str, spaces: bool = True) -> str:
    """A token as a label: whitespace made visible (spaces too unless ``spaces`` is False),
    control characters as ``\\xNN``."""
    if not text:
        return "\u2205"
    text = text.replace(" ", "\u2423") if spaces else text
    text = text.replace("\n", "\u21b5").replace("\t", "\u21e5")
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def _cut(text: str, most: int) -> str:
    return text if len(text) <= most else text[: most - 1] + "\u2026"


def _pct(p: float) -> str:
    return f"{100 * p:.{1 if p >= 0.1 else 2}f}%" if math.isfinite(p) else "?"


def _logp(x: float) -> str:
    return f"{x:.2f}".replace("-", "\u2212") if math.isfinite(x) else "\u2212\u221e"


def _chip(node: Any, current: bool) -> str:
    label = shown_token(node.text)
    cut = _cut(label, TOKEN_CHARS)
    title = (
        f"{label[:TITLE_CHARS]}: model {_pct(node.raw_prob)}, after the sampler "
        f"{_pct(node.prob)}, path log-probability {_logp(node.path_logprob)} "
        f"({_pct(per_token(node.path_logprob, node.depth))} per token)"
    )
    e = html.escape
    return (
        f'<span class="tn{" cur" if current else ""}" title="{e(title)}">'
        f'<span class="sw t{tree_band(node.raw_prob)}"></span>{e(cut)}'
        f"<small>{_pct(node.raw_prob)} \u00b7 {_logp(node.path_logprob)}</small></span>"
    )


def _size(tree: Any, nid: int) -> int:
    """Nodes in the subtree under ``nid``, itself included (iterative)."""
    count, todo = 0, [nid]
    while todo:
        count += 1
        todo.extend(tree.nodes[todo.pop()].children)
    return count


def _within_budget(chain: list[int], path: set[int], budget: int) -> list[int]:
    """The head of ``chain`` that may be drawn: nodes on the current path always, others while
    the budget lasts. Off the path once, a chain stays off it (the path is one line down)."""
    shown = []
    for n in chain:
        if n not in path:
            if budget <= 0:
                break
            budget -= 1
        shown.append(n)
    return shown


def tree_html(tree: Any) -> str:
    """The tree (an ``engine.tree.RunTree``) as nested ``<details>``; see the module's note."""
    path = set(tree.path(tree.cursor))
    root = tree.nodes[0]
    out = [
        '<details open class="tree-root"><summary class="prompt-node">'
        f"{html.escape(_cut(shown_token(root.text, spaces=False), PROMPT_CHARS))}</summary>"
    ]
    budget, left_out, too_deep = MAX_PAGE_NODES, 0, 0
    # work: ("node", id, level) to draw, or ("close", "") to end a <details>
    work: list[tuple[str, int, int]] = [("node", c, 1) for c in reversed(root.children)]
    while work:
        kind, nid, level = work.pop()
        if kind == "close":
            out.append("</details>")
            continue
        chain = [nid]
        while len(tree.nodes[chain[-1]].children) == 1:
            chain.append(tree.nodes[chain[-1]].children[0])
        shown = _within_budget(chain, path, budget)
        budget -= sum(1 for n in shown if n not in path)
        if len(shown) < len(chain):  # out of budget: the rest of this subtree is counted
            left_out += _size(tree, chain[len(shown)])
            if not shown:
                continue
        label = "".join(_chip(tree.nodes[n], n in path) for n in shown)
        kids = tree.nodes[shown[-1]].children if len(shown) == len(chain) else []
        if len(shown) < len(chain):
            out.append(f'<div>{label}<span class="more">\u2026</span></div>')
        elif not kids:
            out.append(f"<div>{label}</div>")
        elif level > MAX_NESTING:
            too_deep += sum(_size(tree, k) for k in kids)
            out.append(f'<div>{label}<span class="more">\u2026</span></div>')
        else:
            is_open = " open" if shown[-1] in path else ""
            out.append(f"<details{is_open}><summary>{label}</summary>")
            work.append(("close", 0, level))
            work.extend(("node", k, level + 1) for k in reversed(kids))
    out.append("</details>")
    return f'<div id="tree">{"".join(out)}</div>{_notes(left_out, too_deep)}'


def _notes(left_out: int, too_deep: int) -> str:
    """What the page leaves out, counted."""
    notes = []
    if left_out:
        notes.append(f"{count(left_out, 'node')} off the current path {_are(left_out)} not "
                     f"shown (the page shows at most {MAX_PAGE_NODES:,})")  # fmt: skip
    if too_deep:
        notes.append(f"{count(too_deep, 'node')} more than {MAX_NESTING} branch points deep "
                     f"{_are(too_deep)} not shown")  # fmt: skip
    return "".join(f'<p class="more">{n}.</p>' for n in notes)


def _are(n: int) -> str:
    return "is" if n == 1 else "are"
