"""The session's other trees (issue 34: nothing the user built is lost). A new prompt, another
chat-template choice, Clear or an opened tree file put the tree that was open on this shelf;
a run on a prompt (and template choice) whose tree is here takes that tree back, so unticking
the template again brings its tree back. The Trees list shows the shelf, the autosave keeps
it. Bounded: with the open tree, the last ``MAX_SESSION_TREES`` trees; the oldest goes to
``dropped`` (the window says so in the status bar). No Qt."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from engine.tree import RunTree
from engine.tree.node import MAX_NODES
from engine.validate.limits import MAX_SESSION_TREES


@dataclass(eq=False)
class KeptTree:
    tree: RunTree
    chat_template: bool
    used_at: float = field(default_factory=time.time)  # when it was last the open tree
    cleared: bool = False  # put away by Clear: a new run on its prompt starts a fresh tree
    _text: str | None = None  # its autosave JSON, written once (a kept tree does not change)

    @property
    def key(self) -> tuple[str, bool]:
        return self.tree.nodes[0].text, self.chat_template

    def json_text(self) -> str:
        """The autosave's entry: the tree as a tree file has it (every node's record) and
        the shelf's own fields around it."""
        if self._text is None:
            head = {"chat_template": self.chat_template, "used_at": self.used_at,
                    "cleared": self.cleared}  # fmt: skip
            tree = json.dumps(self.tree.to_json(), ensure_ascii=False)
            self._text = json.dumps(head)[:-1] + f', "tree": {tree}}}'
        return self._text


class TreeShelf:
    def __init__(self) -> None:
        self.kept: list[KeptTree] = []  # oldest first
        self.dropped: list[KeptTree] = []  # pushed out by the bound, not reported yet

    def put(self, tree: RunTree, chat_template: bool, cleared: bool = False) -> KeptTree | None:
        """Keep ``tree`` (unless it holds nothing but its prompt); returns its entry."""
        if len(tree.nodes) <= 1:
            return None
        self.remove(tree)
        entry = KeptTree(tree, bool(chat_template), time.time(), cleared)
        self.kept.append(entry)
        while len(self.kept) > MAX_SESSION_TREES - 1:  # the open tree is the 20th
            self.dropped.append(self.kept.pop(0))
        return entry

    def take(self, key: tuple[str, bool]) -> KeptTree | None:
        """The most recent tree about ``key`` that Clear did not put away, off the shelf."""
        for entry in reversed(self.kept):
            if entry.key == key and not entry.cleared:
                self.kept.remove(entry)
                return entry
        return None

    def remove(self, tree: RunTree) -> None:
        self.kept = [e for e in self.kept if e.tree is not tree]

    def restore(self, saved: list[Any]) -> None:
        """The autosave's trees (``engine.validate.autosave.SavedTree``), oldest first."""
        self.kept = [KeptTree(s.tree, s.chat_template, s.used_at, s.cleared) for s in saved]
        self.kept = self.kept[-(MAX_SESSION_TREES - 1) :]

    def json_text(self) -> str:
        """The autosave's list (a tree past the tree reader's bound is left out: one that
        could not be read back would set the whole autosave aside)."""
        fits = [e.json_text() for e in self.kept if len(e.tree.nodes) <= MAX_NODES]
        return "[" + ",".join(fits) + "]"
