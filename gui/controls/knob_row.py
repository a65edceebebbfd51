"""A number the user sets, built from a ``Knob``: a spin box (``number_field``), and a slider
and a spin box that move together (``KnobRow``, in the sampler panel and the presenter strip);
and the wheel rule of a scrolling panel (``guard_wheel``)."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, Qt, Signal, Slot
from PySide6.QtWidgets import (
    QAbstractSlider,
    QAbstractSpinBox,
    QApplication,
    QComboBox,
    QDoubleSpinBox,
    QHBoxLayout,
    QScrollArea,
    QSlider,
    QSpinBox,
    QWidget,
)

from gui.controls.sampler_tables import Knob


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


class _WheelGuard(QObject):
    """Hands the wheel over a control that has no keyboard focus to the scroll area around it
    (the panel scrolls); a control the user clicked or tabbed into takes it as usual."""

    def __init__(self, area: QScrollArea) -> None:
        super().__init__(area)
        self.area = area

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt's name
        if event.type() != QEvent.Type.Wheel or not isinstance(watched, QWidget):
            return False
        if watched.hasFocus():
            return False
        # sent on by hand: Qt offers an ignored wheel event to the parents only when it came
        # from the window system, and the panel must scroll either way
        QApplication.sendEvent(self.area.verticalScrollBar(), event)
        return True


CONTROLS = (QAbstractSlider, QAbstractSpinBox, QComboBox)


def guard_wheel(area: QScrollArea) -> None:
    """The wheel rule of most desktop apps, for every slider, spin box and combo box in the
    scrolling panel ``area``: turning the wheel over one scrolls the panel unless that control
    has the keyboard focus; the wheel no longer gives them the focus either."""
    guard = _WheelGuard(area)
    for control in area.widget().findChildren(QWidget):
        if isinstance(control, CONTROLS):
            if control.focusPolicy() == Qt.FocusPolicy.WheelFocus:
                control.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
            control.installEventFilter(guard)
