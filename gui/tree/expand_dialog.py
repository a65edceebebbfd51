"""Expand by probability: how deep, how many children per node, which cutoff, which
probabilities (the model's raw ones or those after the sampler)."""

from __future__ import annotations

import html

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFormLayout,
    QLabel,
    QSpinBox,
    QWidget,
)

from engine.tree.options import ExpandOptions

MAX_DEPTH, MAX_CHILDREN = 8, 20  # 20 ** 8 nodes would never end: the cutoffs keep it small


class ExpandDialog(QDialog):
    """``start``: the node it grows from, in words (the dialog names it at the top)."""

    def __init__(self, parent: QWidget | None, last: ExpandOptions, start: str = "") -> None:
        super().__init__(parent)
        self.setWindowTitle("Expand by probability")
        self.start = QLabel(f"<b>Grows from</b> {html.escape(start)}" if start else "")
        self.start.setObjectName("expand_start")
        self.start.setWordWrap(True)
        self.start.setTextFormat(Qt.TextFormat.RichText)
        self.depth = QSpinBox(minimum=1, maximum=MAX_DEPTH, value=last.depth)
        self.children = QSpinBox(minimum=1, maximum=MAX_CHILDREN, value=last.max_children)
        self.cutoff = QComboBox()
        self.cutoff.addItem("Minimum probability", "min_prob")
        self.cutoff.addItem("Cumulative top-p", "top_p")
        self.value = QDoubleSpinBox(minimum=0.0, maximum=1.0, singleStep=0.01, decimals=3)
        top_p = last.top_p < 1.0
        self.cutoff.setCurrentIndex(1 if top_p else 0)
        self.value.setValue(last.top_p if top_p else last.min_prob)
        self.probs = QComboBox()
        self.probs.addItem("Raw (the model's)", False)
        self.probs.addItem("After the sampler", True)
        self.probs.setCurrentIndex(1 if last.use_sampler else 0)
        form = QFormLayout(self)
        if start:
            form.addRow(self.start)
        form.addRow("Depth (tokens)", self.depth)
        form.addRow("Children per node, at most", self.children)
        form.addRow("Keep children by", self.cutoff)
        form.addRow("Cutoff", self.value)
        form.addRow("Probabilities", self.probs)
        buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel
        )
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        form.addRow(buttons)

    def options(self) -> ExpandOptions:
        top_p = self.cutoff.currentData() == "top_p"
        value = self.value.value()
        return ExpandOptions(
            depth=self.depth.value(), max_children=self.children.value(),
            min_prob=0.0 if top_p else value, top_p=(value or 1.0) if top_p else 1.0,
            use_sampler=bool(self.probs.currentData()),
        )  # fmt: skip
