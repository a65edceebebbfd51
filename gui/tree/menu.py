"""The tree part's menu entries, declared as data."""

from __future__ import annotations

from typing import Any

from gui.common.actions import ActionSpec, Place

# Branches compare by their probability per token (issue 54): by the total, which falls with
# every token, the shortest branch would always be the most likely.
LIKELIEST = ("The leaf whose path has the highest probability per token (a path's total falls "
             "with every token)")  # fmt: skip
UNLIKELIEST = "The leaf whose path has the lowest probability per token"


def tree_specs(self: Any) -> list[ActionSpec]:  # gui.tree.actions.TreeActions
    """The Tree menu, Open / Save tree in File too, and Edit's Undo / Redo choice, as data
    (gui.common.actions); ``self`` is the tree part the entries call."""
    busy, store = lambda: self.runner.busy, self.store

    def tree(
        aid: str, text: str, slot: Any, section: str, order: int, tip: str, keys: Any = None
    ) -> ActionSpec:
        return ActionSpec(aid, text, slot, (Place("tree", section, order),), keys, tip)

    moves = [(f"tree_{m}", t, k, m) for t, k, m in (
        ("Go to parent", "Alt+Left", "parent"), ("Go to child", "Alt+Right", "child"),
        ("Next sibling", "Alt+Down", "next"), ("Previous sibling", "Alt+Up", "previous"),
    )]  # fmt: skip
    return [
        ActionSpec("undo", "Undo choice", self.undo,
                   (Place("edit", "choice", 0), Place("toolbar.main", "run", 4)),
                   "Alt+Backspace", "Go back to the text before your last token choice",
                   keys_in_tip=True, icon_text="Undo",
                   enabled_when=lambda: not busy() and store.can_undo()),
        ActionSpec("redo", "Redo choice", self.redo, (Place("edit", "choice", 1),),
                   "Alt+Shift+Backspace", "Take the undone choice again", keys_in_tip=True,
                   enabled_when=lambda: not busy() and store.choices.can_redo),
        tree("expand", "Expand from here…", self.ask_expand, "moves", 0,
             "Grow the likely continuations of the node you stand on", "Ctrl+E"),
        tree("next_fork", "Next fork", lambda: self.fork(True), "moves", 1,
             "The next step where the model hesitated", "F8"),
        tree("previous_fork", "Previous fork", lambda: self.fork(False), "moves", 2,
             "The previous such step", "Shift+F8"),
        tree("fork_thresholds", "Fork thresholds…", self.ask_thresholds, "moves", 3,
             "What counts as a fork"),
        tree("tree_root", "Go to the prompt", lambda: self.goto(0), "go", 0,
             "The tree's root: the prompt"),
        tree("likeliest", "Most likely branch per token", lambda: self.view.go_to_extreme(True),
             "go", 1, LIKELIEST),
        tree("unlikeliest", "Least likely branch per token",
             lambda: self.view.go_to_extreme(False), "go", 2, UNLIKELIEST),
        *(tree(aid, text, lambda m=move: self.move(m), "go", 3 + i,
               f"Move along the tree: {text}", keys)
          for i, (aid, text, keys, move) in enumerate(moves)),
        ActionSpec("save_tree", "Save tree…", lambda: self.save_tree(),
                   (Place("tree", "files", 0), Place("file", "tree", 1)),
                   tip="Every branch, as JSON"),
        ActionSpec("open_tree", "Open tree…", lambda: self.open_tree_file(),
                   (Place("tree", "files", 1), Place("file", "tree", 0)), tip="A saved tree"),
        ActionSpec("trees", "Trees…", self.trees.ask, (Place("tree", "files", 2),),
                   tip="Every tree of this session: open one to go on with it"),
    ]  # fmt: skip
