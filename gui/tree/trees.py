"""The session's trees in the window (issue 34): Tree > Trees… lists them (the run store's
shelf, ``gui.core.tree_shelf``) and opens one, Undo after Clear brings the cleared tree back, and
the status bar says when the bound of 20 trees drops the oldest. ``TreeList`` never imports
the window; it opens a tree through the tree controller (``gui.tree.actions``)."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QObject, Slot

from engine.validate.limits import MAX_SESSION_TREES
from gui.core.session import Session
from gui.core.tree_shelf import KeptTree
from gui.tree.trees_dialog import TreeRow, TreesDialog, one_line


class TreeList(QObject):
    def __init__(self, w: Session, open_tree: Callable[..., None]) -> None:
        super().__init__(w.parent)
        self.w, self.store, self._open_tree = w, w.store, open_tree
        self.dialog: TreesDialog | None = None  # the one open (tests reach it)

    def entries(self) -> list[KeptTree | None]:
        """None for the tree open now (first, when it has nodes), then the kept ones, newest
        first."""
        track = self.store.track
        shown = track.tree is not None and len(track.tree.nodes) > 1
        return [*([None] if shown else []), *reversed(track.shelf.kept)]

    def rows(self) -> list[TreeRow]:
        track, out = self.store.track, []
        for entry in self.entries():
            tree = entry.tree if entry is not None else track.tree
            chat = entry.chat_template if entry is not None else bool(track.key and track.key[1])
            used = entry.used_at if entry is not None else None
            out.append(TreeRow(tree.nodes[0].text, chat, len(tree.nodes) - 1,
                               len(tree.leaves()), used))  # fmt: skip
        return out

    @Slot()
    def ask(self) -> None:
        entries = self.entries()
        if not entries:
            self.w.say("No tree yet: generate or expand first.")
            return
        self.dialog = TreesDialog(self.w.parent, self.rows())
        try:
            if self.dialog.exec() != TreesDialog.DialogCode.Accepted:
                return
            chosen = self.dialog.chosen()
        finally:
            self.dialog = None
        if chosen is not None and entries[chosen] is not None:
            self.open(entries[chosen])

    def open(self, entry: KeptTree) -> None:
        """Show a kept tree at the node it stood on; the prompt and the chat-template tick
        become its own, so the next run goes on in it. The open tree goes on the shelf."""
        self._open_tree(entry.tree, entry.chat_template)

    def undo_clear(self) -> bool:
        """After Clear (nothing shown since): the cleared tree back. False when there is none."""
        cleared = self.store.track.cleared
        if cleared is None or self.store.tree is not None:
            return False
        self.open(cleared)
        self.w.say("Undo: the cleared tree is back.")
        return True

    def report(self) -> None:
        """On the display clock: say when the bound dropped the oldest trees."""
        dropped = self.store.track.shelf.dropped
        if not dropped:
            return
        names = "; ".join(f"“{one_line(e.tree.nodes[0].text, 40)}” ({len(e.tree.nodes) - 1} "
                          "nodes)" for e in dropped)  # fmt: skip
        dropped.clear()
        self.w.say(
            f"The list of trees keeps the last {MAX_SESSION_TREES}: dropped the oldest, {names}."
        )
