"""What other parts may use of the models feature: how a served source is spelt and read."""

from gui.models.actions import served_run_options
from gui.models.served_dialog import parse_served, served_title

__all__ = ["parse_served", "served_run_options", "served_title"]
