"""The run as a tree (issue 25): the model (RunTree), expansion by probability (batched, one
forward per level), and scoring a text token by token."""

from engine.tree.model import FORMAT, Node, RunTree, TreeFormatError

__all__ = ["FORMAT", "Node", "RunTree", "TreeFormatError"]
