"""Reading a tree file: hostile until checked. One clear message naming the first bad field;
no recursion (parents must come before their children, so depth is computed in one pass and a
cycle cannot be expressed).

Each node's fields (types, ranges, sizes) are checked by one pydantic schema over the whole
node list, in Rust: an 80,000-node tree (what the autosave of a run that long holds) is checked
in about 0.4 s, where a field-by-field Python walk took 3 s. What a schema cannot say (ids
unique, each parent listed before its child, the cursor a node) is checked in one pass after.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, Strict, TypeAdapter, ValidationError
from typing_extensions import NotRequired, TypedDict

from engine.tree.node import FORMAT, MAX_NODES, MAX_TEXT, MAX_TOP, Node, TreeFormatError
from engine.validate.core import InputError, describe
from engine.validate.limits import MAX_TEXT_CHARS
from engine.validate.steps import read_steps

# Strict: a string, a bool or null is not a number (an int is a float: JSON writes 1.0 as 1).
_Id = Annotated[int, Strict(), Field(ge=0)]
_Prob = Annotated[float, Strict(), Field(ge=0.0, le=1.0)]  # NaN fails both bounds
_LogProb = Annotated[float, Strict(), Field(le=1e-6, allow_inf_nan=False)]
_Real = Annotated[float, Strict(), Field(allow_inf_nan=False)]
_Text = Annotated[str, Strict(), Field(max_length=MAX_TEXT)]
_TopRow = tuple[_Id, _Text, _Prob, _Prob]  # token_id, text, raw, after


class _NodeFields(TypedDict):
    id: _Id
    token_id: Annotated[int, Strict(), Field(ge=-1)]
    text: _Text
    parent: Annotated[int, Strict()] | None
    raw_prob: _Prob
    prob: _Prob
    logprob: _LogProb
    path_logprob: _LogProb
    entropy_raw: NotRequired[_Real]
    top: NotRequired[Annotated[list[_TopRow], Field(max_length=MAX_TOP)]]
    step: NotRequired[dict[str, Any] | None]  # checked as the autosave's steps are


_NODES = TypeAdapter(list[_NodeFields])


def _need(ok: bool, field: str, what: str) -> None:
    if not ok:
        raise TreeFormatError(f"tree file: {field} {what}")


def _step(value: dict[str, Any], field: str, node: Node) -> Any:
    """A node's Step record: checked as the autosave checks its steps, and for the same token."""
    try:
        (step,) = read_steps([value], prefix=field)
    except InputError as exc:
        raise TreeFormatError(f"tree file: {exc.message}") from None
    _need(step.token_id == node.token_id, field + ".token_id", "must be the node's token")
    return step


def _head(data: Any) -> tuple[list[int], str, dict[str, Any], int, list[Any]]:
    """The file's fields around the nodes: prompt ids and text, settings, seed, the node list."""
    _need(isinstance(data, dict), "top level", "must be an object")
    _need(data.get("format") == FORMAT, "format", f"must be {FORMAT!r}")
    prompt = data.get("prompt_ids")
    _need(isinstance(prompt, list) and len(prompt) <= MAX_NODES, "prompt_ids", "must be a list")
    for i, t in enumerate(prompt):
        _need(type(t) is int and t >= 0, f"prompt_ids[{i}]", "must be an integer >= 0")
    settings = data.get("settings", {})
    _need(isinstance(settings, dict), "settings", "must be an object")
    nodes = data.get("nodes")
    _need(isinstance(nodes, list) and 1 <= len(nodes) <= MAX_NODES, "nodes",
          f"must be a list of 1 to {MAX_NODES} nodes")  # fmt: skip
    prompt_text = data.get("prompt_text", "")
    _need(isinstance(prompt_text, str) and len(prompt_text) <= MAX_TEXT_CHARS, "prompt_text",
          f"must be text of at most {MAX_TEXT_CHARS} characters")  # fmt: skip
    seed = data.get("seed", 0)
    _need(type(seed) is int and seed >= 0, "seed", "must be an integer >= 0")
    return prompt, prompt_text, settings, seed, nodes


def read_tree(data: Any, cls: type) -> Any:
    prompt, prompt_text, settings, seed, raw_nodes = _head(data)
    try:
        nodes = _NODES.validate_python(raw_nodes)
    except ValidationError as exc:
        raise TreeFormatError(f"tree file: {describe(exc, limit=1, prefix='nodes')}") from None
    tree = cls(prompt, prompt_text, settings, seed)
    tree.nodes.clear()
    for i, raw in enumerate(nodes):
        f = f"nodes[{i}]"
        nid, parent = raw["id"], raw["parent"]
        _need(nid not in tree.nodes, f + ".id", "is a duplicate")
        if i == 0:
            _need(nid == 0 and parent is None, f, "must be the root (id 0, parent null)")
        else:
            _need(parent in tree.nodes, f + ".parent", "must name a node listed before it")
        up = tree.nodes.get(parent) if parent is not None else None
        node = Node(
            nid, raw["token_id"], raw["text"], parent, raw["raw_prob"], raw["prob"],
            raw["logprob"], raw["path_logprob"], up.depth + 1 if up else 0,
            raw.get("entropy_raw", 0.0), [], raw.get("top", []),
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
