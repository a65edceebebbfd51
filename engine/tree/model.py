"""The run as a tree: every continuation kept, with its probabilities and path log-probability.

Plain data, no tensors: the engine grows it (engine.tree.expand), the window draws it, and it
round-trips through JSON (``{"format": "decoding-lab-tree/1", ...}``), validated on the way in.
"""

from __future__ import annotations

import math
from typing import Any

from engine.tree.node import FORMAT, Node
from engine.tree.validate import read_tree

MAX_EXP = 709.0  # math.exp overflows past about 709.78


class RunTree:
    """Nodes by id, a root holding the prompt ids, and the cursor (the node you stand on)."""

    def __init__(self, prompt_ids: list[int], prompt_text: str = "", settings: Any = None,
                 seed: int = 0) -> None:  # fmt: skip
        self.prompt_ids = list(prompt_ids)
        self.settings: dict[str, Any] = dict(settings or {})
        self.seed = seed
        # what continuing the tree needs besides the ids: whether the prompt went through the
        # chat template (None: not known, an older file) and the model that grew it
        self.chat_template: bool | None = None
        self.model = ""
        self.nodes: dict[int, Node] = {0: Node(0, -1, prompt_text, None)}
        self.cursor = 0
        self._next_id = 1  # ids are never reused; max(nodes) per add made long runs quadratic

    # -- building ----------------------------------------------------------------------------
    def add_child(self, parent: int, token_id: int, text: str, raw_prob: float, prob: float,
                  logprob: float, entropy_raw: float = 0.0,
                  top: list[tuple[int, str, float, float]] | None = None) -> int:  # fmt: skip
        """The child of ``parent`` for ``token_id``: the existing one when there is one."""
        up = self.nodes[parent]
        for cid in up.children:
            if self.nodes[cid].token_id == token_id:
                return cid
        nid = self._next_id
        if nid in self.nodes:  # nodes put in by hand (a file): start after the largest
            nid = max(self.nodes) + 1
        self._next_id = nid + 1
        self.nodes[nid] = Node(
            nid, token_id, text, parent, raw_prob, prob, logprob,
            up.path_logprob + logprob, up.depth + 1, entropy_raw, [], list(top or []),
        )  # fmt: skip
        up.children.append(nid)
        return nid

    def path(self, nid: int | None = None) -> list[int]:
        """Node ids from the root's first child down to ``nid`` (default: the cursor)."""
        out = []
        cur = self.cursor if nid is None else nid
        while cur is not None and cur != 0:
            out.append(cur)
            cur = self.nodes[cur].parent
        return out[::-1]

    def path_ids(self, nid: int | None = None) -> list[int]:
        return [self.nodes[n].token_id for n in self.path(nid)]

    def path_text(self, nid: int | None = None) -> str:
        return "".join(self.nodes[n].text for n in self.path(nid))

    def leaves(self) -> list[int]:
        return [n.id for n in self.nodes.values() if not n.children and n.id != 0]

    def per_token(self, nid: int) -> float:
        """The path's probability per token: the geometric mean of the probabilities along the
        path to ``nid`` (1 / perplexity). Unlike the path's total, which falls with every
        token, it compares branches of different lengths fairly; 1.0 at the prompt."""
        node = self.nodes[nid]
        return per_token(node.path_logprob, node.depth)

    def perplexity(self, nid: int) -> float:
        """exp of the mean negative log-probability per token along the path to ``nid``."""
        node = self.nodes[nid]
        if not node.depth:
            return 1.0
        mean = -node.path_logprob / node.depth
        return math.exp(mean) if mean < MAX_EXP else math.inf  # past ~709 exp overflows

    # -- moves (each returns the new cursor; a move that has nowhere to go stays put) ---------
    def goto(self, nid: int) -> int:
        if nid not in self.nodes:
            raise KeyError(f"no node {nid}")
        self.cursor = nid
        return nid

    def to_parent(self) -> int:
        up = self.nodes[self.cursor].parent
        return self.goto(up) if up is not None else self.cursor

    def to_child(self, index: int = 0) -> int:
        kids = self.nodes[self.cursor].children
        return self.goto(kids[index]) if 0 <= index < len(kids) else self.cursor

    def to_sibling(self, step: int = 1) -> int:
        up = self.nodes[self.cursor].parent
        if up is None:
            return self.cursor
        kids = self.nodes[up].children
        i = kids.index(self.cursor) + step
        return self.goto(kids[i]) if 0 <= i < len(kids) else self.cursor

    def fork(self, forward: bool = True, below_prob: float = 0.5, above_bits: float = 3.0,
             use_raw: bool = True) -> int:  # fmt: skip
        """The next (or previous) node along the current path, from the cursor, where the chosen
        token's probability was below ``below_prob`` or the entropy above ``above_bits``."""
        found = self.find_fork(self.cursor, None, forward, below_prob, above_bits, use_raw)
        return self.goto(found) if found is not None else self.cursor

    def find_fork(self, start: int, end: int | None = None, forward: bool = True,
                  below_prob: float = 0.5, above_bits: float = 3.0,
                  use_raw: bool = True) -> int | None:  # fmt: skip
        """``fork`` without moving: from ``start`` along the path to ``end`` (default: ``start``
        followed down through first children); None when there is no fork that way."""
        path = self.path(end if end is not None else self._deepest_on_path(start))
        here = path.index(start) if start in path else -1
        order = path[here + 1 :] if forward else path[:here][::-1] if here > 0 else []
        for nid in order:
            n = self.nodes[nid]
            p = n.raw_prob if use_raw else n.prob
            if p < below_prob or n.entropy_raw > above_bits:
                return nid
        return None

    def _deepest_on_path(self, start: int | None = None) -> int:
        """The cursor followed down through first children: the path shown beyond the cursor."""
        cur = self.cursor if start is None else start
        while self.nodes[cur].children:
            cur = self.nodes[cur].children[0]
        return cur

    # -- JSON --------------------------------------------------------------------------------
    def to_json(self, steps: bool = True, skip: Any = (), nodes: bool = True) -> dict[str, Any]:
        """The tree as plain JSON types; with ``steps`` each node's Step record too (but not
        for the node ids in ``skip``: the autosave holds the current path's steps already);
        without ``nodes`` the head only (a writer that caches the nodes' text adds them)."""
        from engine.classroom.export import step_to_dict  # one spelling of a Step in JSON

        def payload(n: Node) -> dict[str, Any]:
            keep = steps and n.step is not None and n.id not in skip
            return {"step": step_to_dict(n.step)} if keep else {}

        head = {"chat_template": self.chat_template} if self.chat_template is not None else {}
        return {
            "format": FORMAT,
            "prompt_text": self.nodes[0].text,
            "prompt_ids": self.prompt_ids,
            "settings": self.settings,
            "seed": self.seed,
            "cursor": self.cursor,
            **head,
            "model": self.model,
            "nodes": [{**node_dict(n), **payload(n)} for n in self.nodes.values()] if nodes else [],
        }

    @classmethod
    def from_json(cls, data: Any, vocab: int | None = None) -> RunTree:
        """A tree file checked (``TreeFormatError`` names the first bad field); ``vocab``: the
        loaded model's vocabulary size, which every token id must be below."""
        return read_tree(data, cls, vocab)

    def uses_chat_template(self) -> bool:
        """Whether continuing it goes through the chat template: the file's flag, else (older
        files) what its settings say, else not."""
        if self.chat_template is not None:
            return self.chat_template
        return bool(self.settings.get("chat_template", False))


def per_token(path_logprob: float, depth: int) -> float:
    """exp(path_logprob / depth): the geometric mean probability per token of a path of
    ``depth`` tokens (1.0 for none, and for a mean log-probability above 0; 0.0 for NaN)."""
    if depth <= 0:
        return 1.0
    return math.exp(min(0.0, path_logprob / depth)) if not math.isnan(path_logprob) else 0.0


def node_dict(n: Node) -> dict[str, Any]:
    """A node's own fields as JSON types (never changed once the node exists), no record."""
    return {
        # the root's text is the prompt, written once as "prompt_text" (it may be longer than
        # a node's text may be)
        "id": n.id, "token_id": n.token_id, "text": n.text if n.id else "", "parent": n.parent,
        "raw_prob": n.raw_prob, "prob": n.prob, "logprob": n.logprob,
        "path_logprob": n.path_logprob, "entropy_raw": n.entropy_raw,
        "top": [list(t) for t in n.top],
    }  # fmt: skip
