"""What other parts may use of the run feature (imported from here, never from its modules)."""

from gui.run.actions import TREE_METHODS
from gui.run.class_bars import class_shares, show_class
from gui.run.view import RunView

__all__ = ["TREE_METHODS", "RunView", "class_shares", "show_class"]
