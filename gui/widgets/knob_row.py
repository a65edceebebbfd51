"""A number the user sets, built from a ``Knob``: a spin box (``number_field``), and a slider
and a spin box that move together (``KnobRow``, in the sampler panel and the presenter strip)."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal, Slot
from PySide6.QtWidgets import QDoubleSpinBox, QHBoxLayout, QSlider, QSpinBox, QWidget

from gui.widgets.sampler_tables import Knob


def number_field(knob: Knob, name: str) -> QSpinBox | QDoubleSpinBox:
    """A spin box over the knob's range (an integer one for decimals 0), named ``name``."""
    if knob.decimals == 0:
        box: QSpinBox | QDoubleSpinBox = QSpinBox()
        box.setRange(int(knob.lo), int(knob.hi))
    else:
        box = QDoubleSpinBox()
        box.setDecimals(knob.decimals)
        box.setRange(knob.lo, knob.hi)
        box.setSingleStep(knob.step)
    box.setObjectName(name)
    box.setToolTip(knob.tooltip)
    return box


def knob_value(knob: Knob, value: float) -> float:
    """The value as the settings store it: an integer, or rounded to 4 decimals."""
    return int(value) if knob.decimals == 0 else round(value, 4)


class KnobRow(QWidget):
    """A slider and a number field that move together."""

    changed = Signal()

    def __init__(self, knob: Knob, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.knob = knob
        self.scale = 1 if knob.decimals == 0 else 10**knob.decimals
        self.slider = QSlider(Qt.Orientation.Horizontal)
        self.slider.setRange(round(knob.lo * self.scale), round(knob.hi * self.scale))
        self.slider.setObjectName(f"{knob.field}_slider")
        self.field = number_field(knob, f"{knob.field}_field")
        self.field.setMinimumWidth(80)
        for w in (self, self.slider):
            w.setToolTip(knob.tooltip)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.slider, 1)
        layout.addWidget(self.field)
        self.slider.valueChanged.connect(self._from_slider)
        self.field.valueChanged.connect(self._from_field)

    def value(self) -> float:
        return self.field.value()

    def set_value(self, value: float) -> None:
        self.field.setValue(value)

    @Slot(int)
    def _from_slider(self, v: int) -> None:
        value = v / self.scale
        if abs(self.field.value() - value) > 1e-9:
            self.field.setValue(int(value) if self.knob.decimals == 0 else value)

    @Slot()
    def _from_field(self, *_args: object) -> None:
        v = round(self.field.value() * self.scale)
        if self.slider.value() != v:
            self.slider.blockSignals(True)
            self.slider.setValue(v)
            self.slider.blockSignals(False)
        self.changed.emit()
