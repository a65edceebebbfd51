"""The sampler panel's everyday knobs, on top: the preset, the sliders (``KNOBS``), the order
of temperature, the run length, the seed and the pacing, in one form."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSpinBox,
    QWidget,
)

from engine.sampling.help import tooltip
from engine.sampling.settings import SamplerSettings
from gui.common.fitting import ElidedCombo
from gui.controls.knob_row import KnobRow, knob_value
from gui.controls.sampler_tables import KNOBS, ORDERS


class BasicForm(QWidget):
    """Emits ``changed`` when a slider, the run length or the seed moves; the preset, the order
    and the pacing are wired by the panel (they are not plain values of the settings)."""

    changed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        form = QFormLayout(self)
        form.setContentsMargins(0, 0, 0, 0)
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        form.addRow("Preset", self._preset_row())
        self.rows: dict[str, KnobRow] = {}
        for knob in KNOBS:
            self.rows[knob.field] = row = KnobRow(knob)
            row.changed.connect(self.changed)
            label = QLabel(knob.label)
            label.setToolTip(knob.tooltip)
            form.addRow(label, row)
        self.order = ElidedCombo()
        self.order.setObjectName("order")
        for text, value in ORDERS:
            self.order.addItem(text, value)
        self.order.setToolTip(tooltip("order"))
        form.addRow("Order", self.order)
        self.max_new = QSpinBox()
        self.max_new.setObjectName("max_new_tokens")
        self.max_new.setRange(1, 100000)
        self.max_new.setToolTip(tooltip("max_new_tokens"))
        form.addRow("Max new tokens", self.max_new)
        form.addRow("Seed", self._seed_row())
        form.addRow("Pacing", self._pacing())
        for combo in (self.preset, self.order):  # long entries must not widen the panel
            combo.setSizeAdjustPolicy(
                QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon
            )
            combo.setMinimumContentsLength(8)
        self.max_new.valueChanged.connect(self.changed)
        self.seed.valueChanged.connect(self.changed)

    def _preset_row(self) -> QHBoxLayout:
        self.preset = ElidedCombo()
        self.preset.setObjectName("preset")
        self.preset.setToolTip("Ready-made settings. Pick one, then adjust the sliders.")
        self.save_preset = QPushButton("Save…")
        self.save_preset.setToolTip("Save the current settings as a preset of your own.")
        row = QHBoxLayout()
        row.addWidget(self.preset, 1)
        row.addWidget(self.save_preset)
        return row

    def _seed_row(self) -> QHBoxLayout:
        self.seed = QSpinBox()
        self.seed.setObjectName("seed")
        self.seed.setRange(0, 2**31 - 1)
        self.seed.setToolTip(tooltip("seed"))
        self.random_seed = QCheckBox("random")
        self.random_seed.setToolTip(
            "Pick a fresh random seed at every Generate (it is shown here)."
        )
        row = QHBoxLayout()
        row.addWidget(self.seed, 1)
        row.addWidget(self.random_seed)
        return row

    def _pacing(self) -> QDoubleSpinBox:
        self.pacing = QDoubleSpinBox()
        self.pacing.setObjectName("pacing")
        self.pacing.setRange(0.0, 100.0)
        self.pacing.setDecimals(1)
        self.pacing.setSpecialValueText("off")
        self.pacing.setSuffix(" tok/s")
        self.pacing.setToolTip(
            "Slow the output down for the class: at most this many tokens a second."
        )
        return self.pacing

    # -- settings <-> widgets -----------------------------------------------------------------

    def values(self) -> dict[str, Any]:
        """The fields of ``SamplerSettings`` shown here."""
        knobs = {name: knob_value(row.knob, row.value()) for name, row in self.rows.items()}
        return {
            **knobs,
            "order": self.order.currentData(),
            "max_new_tokens": self.max_new.value(),
            "seed": self.seed.value(),
        }

    def show_values(self, s: SamplerSettings) -> None:
        for name, row in self.rows.items():
            row.set_value(getattr(s, name))
        self.order.setCurrentIndex(max(0, self.order.findData(s.order)))
        self.max_new.setValue(s.max_new_tokens)
        self.seed.setValue(s.seed)
