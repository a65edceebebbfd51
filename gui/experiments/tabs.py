"""The Experiments tab of the plot area: one page per experiment (the histogram of a sampled
step, the sweep, the stochastic variation, two models in lockstep)."""

from __future__ import annotations

from PySide6.QtWidgets import QTabWidget, QWidget

from gui.experiments.histogram_view import HistogramView
from gui.experiments.lockstep_view import LockstepView
from gui.experiments.sweep_view import SweepView, VariationView


class ExperimentTabs(QTabWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("experiment_tabs")
        self.setDocumentMode(True)
        self.histogram = HistogramView()
        self.sweep = SweepView()
        self.variation = VariationView()
        self.lockstep = LockstepView()
        self.addTab(self.histogram, "Sample N×")
        self.addTab(self.sweep, "Sweep")
        self.addTab(self.variation, "Variation")
        self.addTab(self.lockstep, "Lockstep")
