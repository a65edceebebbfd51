"""Reading a tree file: hostile until checked. One clear message naming the first bad field;
no recursion (parents must come before their children, so depth is computed in one pass and a
cycle cannot be expressed).

One schema for every place a tree is stored (a tree file, the autosave's tree, lessons), so
that what is read is what the app can write, reopen and show: ids fit a 32-bit int (what Qt
and torch take) and, when the model is known, its vocabulary; a node has at most one child
per token; every value is finite (an impossible token is floored at log(1e-45), as the run
writes it) and a path's log-probability is its parent's plus its own; the file says whether
the chat template was used (``chat_template``) and which model grew it, what continuing it
needs besides the prompt ids, settings and seed.

Each node's fields (types, ranges, sizes) are checked by one pydantic schema over the whole
node list, in Rust: an 80,000-node tree (what the autosave of a run that long holds) is checked
in about 0.4 s, where a field-by-field Python walk took 3 s. What a schema cannot say (ids
unique, each parent listed before its child, siblings' tokens distinct, path sums, the cursor a
node) is checked in one pass after.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, Strict, TypeAdapter, ValidationError
from typing_extensions import NotRequired, TypedDict

from engine.sampling.settings import SamplerSettings
from engine.tree.node import FORMAT, MAX_NODES, MAX_TEXT, MAX_TOP, Node, TreeFormatError
from engine.validate.core import InputError, describe
from engine.validate.limits import MAX_TEXT_CHARS, MAX_TOKEN_ID
from engine.validate.steps import read_steps

MIN_LOGPROB = -1e6  # far below any model's (float32 reaches about -104): sums stay finite
PATH_TOLERANCE = 1e-6  # relative: the app writes a path as its parent's plus its own, exactly

# Strict: a string, a bool or null is not a number (an int is a float: JSON writes 1.0 as 1).
_Id = Annotated[int, Strict(), Field(ge=0, le=MAX_TOKEN_ID)]
_TokenId = Annotated[int, Strict(), Field(ge=-1, le=MAX_TOKEN_ID)]  # -1: the root (the prompt)
_Prob = Annotated[float, Strict(), Field(ge=0.0, le=1.0)]  # NaN fails both bounds
_LogProb = Annotated[float, Strict(), Field(ge=MIN_LOGPROB, le=1e-6, allow_inf_nan=False)]
_PathLogProb = Annotated[float, Strict(), Field(ge=MIN_LOGPROB * MAX_NODES, le=1e-6)]
_Bits = Annotated[float, Strict(), Field(ge=0.0, le=64.0)]  # entropy: log2 of the vocabulary
_Text = Annotated[str, Strict(), Field(max_length=MAX_TEXT)]
_TopRow = tuple[_Id, _Text, _Prob, _Prob]  # token_id, text, raw, after


class NodeFields(TypedDict):
    """One node as the file writes it (``engine.tree.model.node_dict`` plus its Step)."""

    id: _Id
    token_id: _TokenId
    text: _Text
    parent: _Id | None
    raw_prob: _Prob
    prob: _Prob
    logprob: _LogProb
    path_logprob: _PathLogProb
    entropy_raw: NotRequired[_Bits]
    top: NotRequired[Annotated[list[_TopRow], Field(max_length=MAX_TOP)]]
    step: NotRequired[dict[str, Any] | None]  # checked as the autosave checks its steps


class TreeHead(BaseModel):
    """The file's fields around the nodes. ``chat_template`` None: an older file that did not
    say (its settings may carry it); ``model``: what grew it ("" unknown)."""

    model_config = ConfigDict(strict=True, extra="ignore")

    format: str
    prompt_text: Annotated[str, Field(max_length=MAX_TEXT_CHARS)] = ""
    prompt_ids: Annotated[list[_Id], Field(max_length=MAX_NODES)]
    settings: dict[str, Any] = Field(default_factory=dict)
    seed: Annotated[int, Field(ge=0, le=2**63 - 1)] = 0
    cursor: _Id = 0
    chat_template: bool | None = None
    model: Annotated[str, Field(max_length=2000)] = ""
    nodes: Annotated[list[Any], Field(min_length=1, max_length=MAX_NODES)]


_NODES = TypeAdapter(list[NodeFields])


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


def read_head(data: Any, vocab: int | None = None) -> TreeHead:
    """The head checked (the nodes only as a bounded list): ``TreeFormatError`` names the field."""
    _need(isinstance(data, dict), "top level", "must be an object")
    _need(data.get("format") == FORMAT, "format", f"must be {FORMAT!r}")
    try:
        head = TreeHead.model_validate(data)
    except ValidationError as exc:
        raise TreeFormatError(f"tree file: {describe(exc, limit=1)}") from None
    known = {k: v for k, v in head.settings.items() if k in SamplerSettings.__dataclass_fields__}
    try:
        SamplerSettings.from_dict(known)  # continuing the tree takes them as they are
    except (ValueError, TypeError) as exc:
        raise TreeFormatError(f"tree file: settings: {exc}") from None
    _vocab(head.prompt_ids, vocab, "prompt_ids")
    return head


def _vocab(ids: list[int], vocab: int | None, field: str) -> None:
    if vocab is not None:
        bad = next((i for i, t in enumerate(ids) if t >= vocab), None)
        _need(bad is None, f"{field}[{bad}]", f"must be a token id below the vocabulary ({vocab})")


def read_tree(data: Any, cls: type, vocab: int | None = None) -> Any:
    """A checked tree of class ``cls`` (``RunTree``); ``vocab``: the model's vocabulary size,
    when one is loaded (token ids must be below it)."""
    head = read_head(data, vocab)
    try:
        nodes = _NODES.validate_python(head.nodes)
    except ValidationError as exc:
        raise TreeFormatError(f"tree file: {describe(exc, limit=1, prefix='nodes')}") from None
    tree = cls(head.prompt_ids, head.prompt_text, head.settings, head.seed)
    tree.chat_template, tree.model = head.chat_template, head.model
    tree.nodes.clear()
    tokens: dict[int, set[int]] = {}  # each parent's children's tokens
    for i, raw in enumerate(nodes):
        node = _node(tree, raw, f"nodes[{i}]", i, vocab, tokens)
        tree.nodes[node.id] = node
        if node.parent is not None:
            tree.nodes[node.parent].children.append(node.id)
    _need(head.cursor in tree.nodes, "cursor", "must name a node")
    tree.cursor = head.cursor
    tree.nodes[0].text = head.prompt_text or tree.nodes[0].text  # older files had it in the root
    return tree


def _node(tree: Any, raw: Any, f: str, i: int, vocab: int | None,
          tokens: dict[int, set[int]]) -> Node:  # fmt: skip
    """One node checked against those before it (its parent, its siblings)."""
    nid, parent, token = raw["id"], raw["parent"], raw["token_id"]
    _need(nid not in tree.nodes, f + ".id", "is a duplicate")
    if i == 0:
        _need(nid == 0 and parent is None and token == -1, f,
              "must be the root (id 0, parent null, token_id -1)")  # fmt: skip
        _need(raw["path_logprob"] == 0.0, f + ".path_logprob", "must be 0 at the root")
        up = None
    else:
        _need(parent in tree.nodes, f + ".parent", "must name a node listed before it")
        _need(token >= 0, f + ".token_id", "must be a token id >= 0 (only the root has -1)")
        _need(token not in tokens.setdefault(parent, set()), f + ".token_id",
              "repeats a sibling's token (a node has one child per token)")  # fmt: skip
        tokens[parent].add(token)
        up = tree.nodes[parent]
        want = up.path_logprob + raw["logprob"]
        _need(abs(raw["path_logprob"] - want) <= PATH_TOLERANCE * max(1.0, abs(want)),
              f + ".path_logprob", "must be its parent's plus its own logprob")  # fmt: skip
    top = raw.get("top", [])
    _vocab([token, *(row[0] for row in top)] if token >= 0 else [], vocab, f + ".token_id")
    node = Node(
        nid, token, raw["text"], parent, raw["raw_prob"], raw["prob"], raw["logprob"],
        raw["path_logprob"], up.depth + 1 if up else 0, raw.get("entropy_raw", 0.0), [], top,
    )  # fmt: skip
    if raw.get("step") is not None:
        node.step = _step(raw["step"], f + ".step", node)
    return node
