"""The run as a tree (issue 25): the model (RunTree), expansion by probability (batched, one
forward per level), and scoring a text token by token."""

from engine.tree.model import RunTree
from engine.tree.node import FORMAT, Node, TreeFormatError

__all__ = ["FORMAT", "Node", "RunTree", "TreeFormatError"]
