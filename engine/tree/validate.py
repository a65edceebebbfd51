"""Reading a tree file: hostile until checked. One clear message naming the first bad field;
no recursion (parents must come before their children, so depth is computed in one pass and a
cycle cannot be expressed)."""

from __future__ import annotations

import math
from typing import Any

from engine.tree.node import FORMAT, MAX_NODES, MAX_TEXT, MAX_TOP, Node, TreeFormatError
from engine.validate.core import InputError
from engine.validate.limits import MAX_TEXT_CHARS
from engine.validate.steps import read_steps


def _need(ok: bool, field: str, what: str) -> None:
    if not ok:
        raise TreeFormatError(f"tree file: {field} {what}")


def _int(value: Any, field: str, low: int = -1) -> int:
    _need(type(value) is int and value >= low, field, f"must be an integer >= {low}")
    return value


def _prob(value: Any, field: str) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    _need(ok and 0.0 <= value <= 1.0, field, "must be a number between 0 and 1")
    return float(value)


def _real(value: Any, field: str, nonpositive: bool = True) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    _need(ok and (not nonpositive or value <= 1e-6), field,
          "must be a finite number" + (" <= 0" if nonpositive else ""))  # fmt: skip
    return float(value)


def _text(value: Any, field: str) -> str:
    _need(isinstance(value, str) and len(value) <= MAX_TEXT, field, f"must be text of at most "
          f"{MAX_TEXT} characters")  # fmt: skip
    return value


def _top(value: Any, field: str) -> list[tuple[int, str, float, float]]:
    _need(isinstance(value, list) and len(value) <= MAX_TOP, field, f"must be a list of at most "
          f"{MAX_TOP} entries")  # fmt: skip
    out = []
    for i, row in enumerate(value):
        f = f"{field}[{i}]"
        _need(isinstance(row, list) and len(row) == 4, f, "must be [token_id, text, raw, after]")
        out.append((_int(row[0], f + "[0]", 0), _text(row[1], f + "[1]"),
                    _prob(row[2], f + "[2]"), _prob(row[3], f + "[3]")))  # fmt: skip
    return out


def _step(value: Any, field: str, node: Node) -> Any:
    """A node's Step record: checked as the autosave checks its steps, and for the same token."""
    _need(isinstance(value, dict), field, "must be an object")
    try:
        (step,) = read_steps([value], prefix=field)
    except InputError as exc:
        raise TreeFormatError(f"tree file: {exc.message}") from None
    _need(step.token_id == node.token_id, field + ".token_id", "must be the node's token")
    return step


def read_tree(data: Any, cls: type) -> Any:
    _need(isinstance(data, dict), "top level", "must be an object")
    _need(data.get("format") == FORMAT, "format", f"must be {FORMAT!r}")
    prompt = data.get("prompt_ids")
    _need(isinstance(prompt, list) and len(prompt) <= MAX_NODES, "prompt_ids", "must be a list")
    prompt = [_int(t, f"prompt_ids[{i}]", 0) for i, t in enumerate(prompt)]
    settings = data.get("settings", {})
    _need(isinstance(settings, dict), "settings", "must be an object")
    nodes = data.get("nodes")
    _need(isinstance(nodes, list) and 1 <= len(nodes) <= MAX_NODES, "nodes",
          f"must be a list of 1 to {MAX_NODES} nodes")  # fmt: skip
    prompt_text = data.get("prompt_text", "")
    _need(isinstance(prompt_text, str) and len(prompt_text) <= MAX_TEXT_CHARS, "prompt_text",
          f"must be text of at most {MAX_TEXT_CHARS} characters")  # fmt: skip
    tree = cls(prompt, prompt_text, settings, _int(data.get("seed", 0), "seed", 0))
    tree.nodes.clear()
    for i, raw in enumerate(nodes):
        f = f"nodes[{i}]"
        _need(isinstance(raw, dict), f, "must be an object")
        nid = _int(raw.get("id"), f + ".id", 0)
        _need(nid not in tree.nodes, f + ".id", "is a duplicate")
        parent = raw.get("parent")
        if i == 0:
            _need(nid == 0 and parent is None, f, "must be the root (id 0, parent null)")
        else:
            _need(type(parent) is int and parent in tree.nodes, f + ".parent",
                  "must name a node listed before it")  # fmt: skip
        up = tree.nodes.get(parent) if parent is not None else None
        node = Node(
            nid, _int(raw.get("token_id"), f + ".token_id"), _text(raw.get("text"), f + ".text"),
            parent, _prob(raw.get("raw_prob"), f + ".raw_prob"),
            _prob(raw.get("prob"), f + ".prob"),
            _real(raw.get("logprob"), f + ".logprob"), _real(raw.get("path_logprob"),
            f + ".path_logprob"), up.depth + 1 if up else 0,
            _real(raw.get("entropy_raw", 0.0), f + ".entropy_raw", False), [],
            _top(raw.get("top", []), f + ".top"),
        )  # fmt: skip
        if raw.get("step") is not None:
            node.step = _step(raw["step"], f + ".step", node)
        tree.nodes[nid] = node
        if up is not None:
            up.children.append(nid)
    cursor = data.get("cursor", 0)
    _need(type(cursor) is int and cursor in tree.nodes, "cursor", "must name a node")
    tree.cursor = cursor
    tree.nodes[0].text = prompt_text or tree.nodes[0].text  # older files had it in the root
    return tree
