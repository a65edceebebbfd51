"""The run store's tree: every Step the engine sends becomes a node (or finds the node it
already is), so no branch is ever lost. No Qt.

``path`` holds the node of each step the store shows (``path[i]`` is step i's node); a Rewind
shortens it, a Step extends it under the node above. A new run on the same prompt starts again
at the root (its tokens reuse the nodes they share with earlier runs and branch off where they
differ); a different prompt (or chat-template choice) puts the tree on the shelf
(``gui.core.tree_shelf``) and takes that prompt's tree from there, or starts a new one."""

from __future__ import annotations

import json
import math
from collections import deque
from dataclasses import replace
from typing import Any

from engine.records import Candidate, Step
from engine.tree import RunTree
from engine.tree.model import node_dict
from engine.tree.node import Node
from gui.core.tree_shelf import KeptTree, TreeShelf

TOP_KEPT = 5  # candidates copied into the node itself (the Step payload keeps them all)
TINY = 1e-45  # the smallest float32 above 0: a forced token the model gave 0 still has a log


def _prob(p: float | None) -> float:
    if p is not None and 0.0 <= p <= 1.0:  # nearly always: one comparison (NaN fails it)
        return p
    return min(1.0, max(0.0, p)) if p is not None and math.isfinite(p) else 0.0


class TreeTrack:
    def __init__(self) -> None:
        self.tree: RunTree | None = None
        self.key: tuple[str, bool] | None = None  # (prompt, chat template) the tree is about
        self.path: list[int] = []
        self.revision = 0  # bumped whenever the tree changes: the tree view redraws on it
        # each node's JSON, written once (a node never changes), and its record's, by node id
        self._node_text: dict[int, str] = {}
        self._step_text: dict[int, tuple[Step, str]] = {}
        self._texts_of: RunTree | None = None
        self.shelf = TreeShelf()  # the session's other trees
        self.cleared: KeptTree | None = None  # what Clear put away, until something else opens

    def forget(self) -> None:
        """Clear: the tree leaves the screen for the shelf (Undo takes it back)."""
        self.cleared = self._put_away(cleared=True)
        self.tree, self.key, self.path = None, None, []
        self.revision += 1

    def _put_away(self, cleared: bool = False) -> KeptTree | None:
        if self.tree is None or self.key is None:
            return None
        return self.shelf.put(self.tree, self.key[1], cleared)

    def start(self, prompt: str, chat_template: bool | None) -> None:
        """A run begins: at the root of this prompt's tree (the shelf's, or a new one; the
        tree that was open goes on the shelf)."""
        key = (prompt, bool(chat_template))
        if self.tree is None or key != self.key:
            self._put_away()
            kept = self.shelf.take(key)
            self.tree, self.key = kept.tree if kept else RunTree([], prompt), key
            self.tree.chat_template = key[1]  # written in its file: a continuation needs it
        self.cleared = None
        self.tree.cursor = 0
        self.path = []
        self.revision += 1

    def adopt(self, tree: RunTree, chat_template: bool = False, keep_open: bool = True) -> None:
        """Take a tree from a file, the shelf or the autosave; the path is the one to its
        cursor. The tree that was open goes on the shelf (unless ``keep_open`` is off)."""
        if tree is not self.tree and keep_open:
            self._put_away()
        self.shelf.remove(tree)
        self.cleared = None
        self.tree, self.key = tree, (tree.nodes[0].text, bool(chat_template))
        tree.chat_template = bool(chat_template)
        self.path = tree.path()
        self.revision += 1

    def add(self, step: Step) -> None:
        if self.tree is None:
            self.start("", False)
        tree = self.tree
        assert tree is not None
        parent = self.path[-1] if self.path else 0
        raw = _prob(step.raw_prob)
        entropy = step.entropy_raw if math.isfinite(step.entropy_raw) else 0.0
        top = [(c.token_id, c.text, _prob(c.raw_prob), _prob(c.prob))
               for c in step.candidates[:TOP_KEPT]]  # fmt: skip
        nid = tree.add_child(parent, step.token_id, step.text, raw, _prob(step.prob),
                             math.log(max(raw, TINY)), entropy, top)  # fmt: skip
        tree.nodes[nid].step = step  # the newest record of this token (an expanded node gains one)
        self.path.append(nid)
        tree.cursor = nid
        self.revision += 1

    def rewind(self, keep: int) -> None:
        del self.path[keep:]
        if self.tree is not None:
            self.tree.cursor = self.path[-1] if self.path else 0
        self.revision += 1

    def relight(self, index: int, step: Step) -> None:
        """The store lightened step ``index`` (fewer candidates): the node keeps the same."""
        if self.tree is not None and index < len(self.path):
            self.tree.nodes[self.path[index]].step = step

    def graft(self, at: int, grown: RunTree, tail: int) -> int:
        """Copy what grew under ``tail`` of ``grown`` (an expansion made on a copy of the path)
        to under node ``at``, breadth first, reusing children that exist; returns the count of
        nodes added."""
        assert self.tree is not None
        before = len(self.tree.nodes)
        todo = deque([(tail, at)])
        while todo:
            src, dst = todo.popleft()
            for c in grown.nodes[src].children:
                n = grown.nodes[c]
                nid = self.tree.add_child(dst, n.token_id, n.text, n.raw_prob, n.prob,
                                          n.logprob, n.entropy_raw, n.top)  # fmt: skip
                todo.append((c, nid))
        self.revision += 1
        return len(self.tree.nodes) - before

    def json_text(self) -> str:
        """The tree as the autosave writes it: the nodes' text cached, so a long run costs a
        join, not a walk through json; the current path's records are not repeated (the
        autosave's steps hold them)."""
        from engine.classroom.export import step_to_dict

        tree = self.tree
        assert tree is not None
        if self._texts_of is not tree:
            self._node_text, self._step_text, self._texts_of = {}, {}, tree
        on_path, parts = set(self.path), []
        for n in tree.nodes.values():
            text = self._node_text.get(n.id)
            if text is None:
                text = self._node_text[n.id] = json.dumps(node_dict(n), ensure_ascii=False)
            if n.step is not None and n.id not in on_path:
                done = self._step_text.get(n.id)
                if done is None or done[0] is not n.step:
                    done = self._step_text[n.id] = (n.step, json.dumps(step_to_dict(n.step)))
                text = f'{text[:-1]}, "step": {done[1]}}}'
            parts.append(text)
        head = json.dumps(tree.to_json(nodes=False), ensure_ascii=False)
        return head[: head.rindex("[")] + "[" + ",".join(parts) + "]}"

    def steps_to(self, nid: int) -> list[Step]:
        """The records of the path to ``nid``: each node's own Step, or one made from what an
        expanded node knows (its probabilities and the top of its distribution)."""
        assert self.tree is not None
        out = []
        for depth, n in enumerate(self.tree.path(nid)):
            node = self.tree.nodes[n]
            step = node.step if node.step is not None else node_step(node, depth)
            out.append(step if step.index == depth else replace(step, index=depth))
        return out


def node_step(node: Node, index: int) -> Step:
    """A Step for a node that was expanded, not generated: no timing, candidates from its top."""
    ranked = sorted(node.top, key=lambda t: -t[2])
    ids = [t[0] for t in ranked]
    rank = ids.index(node.token_id) + 1 if node.token_id in ids else len(ids) + 1
    return Step(
        index=index, token_id=node.token_id, text=node.text, token_str=node.text,
        raw_prob=node.raw_prob, prob=node.prob, rank=rank,
        candidates=tuple(Candidate(t, s, r, a) for t, s, r, a in ranked),
        survivors=sum(1 for t in ranked if t[3] > 0), entropy_raw=node.entropy_raw,
        entropy=node.entropy_raw, step_time=0.0, tokens_per_s=0.0, source="tree",
    )  # fmt: skip


def path_copy(tree: RunTree, nid: int, prompt_ids: list[int]) -> tuple[RunTree, int]:
    """A new tree over ``prompt_ids`` holding only the path to ``nid`` (its probabilities as
    they are): what an expansion job grows on its own thread. Returns it and the path's end."""
    copy = RunTree(prompt_ids, tree.nodes[0].text, tree.settings, tree.seed)
    end = 0
    for n in tree.path(nid):
        node = tree.nodes[n]
        end = copy.add_child(end, node.token_id, node.text, node.raw_prob, node.prob,
                             node.logprob, node.entropy_raw, node.top)  # fmt: skip
    return copy, end


def common_prefix(a: list[Any], b: list[Any]) -> int:
    k = 0
    while k < len(a) and k < len(b) and a[k] == b[k]:
        k += 1
    return k
