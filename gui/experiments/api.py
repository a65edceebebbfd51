"""What other parts may use of the experiments feature: a stage's button, in a class's words."""

from gui.experiments.words import EXPERIMENT_PRESS

__all__ = ["EXPERIMENT_PRESS"]
