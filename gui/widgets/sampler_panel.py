"""Sliders and fields for the sampler chain, presets, seed and order."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass

from PySide6.QtCore import QSettings, Qt, Signal, Slot
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QInputDialog,
    QLabel,
    QPushButton,
    QSlider,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from engine.settings import (
    DEFAULT_SETTINGS,
    ORDER_TEMPERATURE_FIRST,
    ORDER_TEMPERATURE_LAST,
    PRESETS,
    SamplerSettings,
)


@dataclass(frozen=True)
class Knob:
    field: str
    label: str
    lo: float
    hi: float
    step: float
    decimals: int
    tooltip: str


KNOBS = (
    Knob("temperature", "Temperature", 0.0, 2.5, 0.01, 2,
         "Low = safe, predictable words; high = surprising ones. 0 always picks the top token."),
    Knob("top_k", "Top-k", 0, 200, 1, 0,
         "Only the k most likely tokens may be picked. 0 switches this filter off."),
    Knob("top_p", "Top-p", 0.0, 1.0, 0.01, 2,
         "Keep the most likely tokens until their chances add up to p. 1 switches it off."),
    Knob("min_p", "Min-p", 0.0, 1.0, 0.01, 2,
         "Drop tokens less likely than this fraction of the top token. 0 switches it off."),
    Knob("repetition_penalty", "Repetition penalty", 1.0, 2.0, 0.01, 2,
         "Above 1, tokens already in the text become less likely, so the model repeats less."),
)  # fmt: skip


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
        if knob.decimals == 0:
            self.field: QSpinBox | QDoubleSpinBox = QSpinBox()
            self.field.setRange(int(knob.lo), int(knob.hi))
        else:
            self.field = QDoubleSpinBox()
            self.field.setRange(knob.lo, knob.hi)
            self.field.setDecimals(knob.decimals)
            self.field.setSingleStep(knob.step)
        self.field.setObjectName(f"{knob.field}_field")
        self.field.setMinimumWidth(80)
        for w in (self, self.slider, self.field):
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


class SamplerPanel(QGroupBox):
    """Emits ``settings_changed`` with a new ``SamplerSettings`` whenever a control moves."""

    settings_changed = Signal(object)
    pacing_changed = Signal(float)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Sampler", parent)
        self._loading = False
        self.user_presets: dict[str, SamplerSettings] = {}
        form = QFormLayout()
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)

        self.preset = QComboBox()
        self.preset.setObjectName("preset")
        self.preset.setToolTip("Ready-made settings. Pick one, then adjust the sliders.")
        self.save_preset = QPushButton("Save…")
        self.save_preset.setToolTip("Save the current settings as a preset of your own.")
        row = QHBoxLayout()
        row.addWidget(self.preset, 1)
        row.addWidget(self.save_preset)
        form.addRow("Preset", row)

        self.rows: dict[str, KnobRow] = {}
        for knob in KNOBS:
            r = KnobRow(knob)
            r.changed.connect(self._emit)
            self.rows[knob.field] = r
            label = QLabel(knob.label)
            label.setToolTip(knob.tooltip)
            form.addRow(label, r)

        self.order = QComboBox()
        self.order.setObjectName("order")
        self.order.addItem("Temperature first (transformers)", ORDER_TEMPERATURE_FIRST)
        self.order.addItem("Temperature last (llama.cpp, seed)", ORDER_TEMPERATURE_LAST)
        self.order.setToolTip(
            "Whether the temperature reshapes the chances before or after top-k/top-p/min-p cut."
        )
        form.addRow("Order", self.order)

        self.max_new = QSpinBox()
        self.max_new.setObjectName("max_new_tokens")
        self.max_new.setRange(1, 100000)
        self.max_new.setToolTip("The most tokens one Generate or Continue will write.")
        form.addRow("Max new tokens", self.max_new)

        self.seed = QSpinBox()
        self.seed.setObjectName("seed")
        self.seed.setRange(0, 2**31 - 1)
        self.seed.setToolTip("The same seed and settings always give the same text.")
        self.random_seed = QCheckBox("random")
        self.random_seed.setToolTip(
            "Pick a fresh random seed at every Generate (it is shown here)."
        )
        row = QHBoxLayout()
        row.addWidget(self.seed, 1)
        row.addWidget(self.random_seed)
        form.addRow("Seed", row)

        self.pacing = QDoubleSpinBox()
        self.pacing.setObjectName("pacing")
        self.pacing.setRange(0.0, 100.0)
        self.pacing.setDecimals(1)
        self.pacing.setSpecialValueText("off")
        self.pacing.setSuffix(" tok/s")
        self.pacing.setToolTip(
            "Slow the output down for the class: at most this many tokens a second."
        )
        form.addRow("Pacing", self.pacing)

        for combo in (self.preset, self.order):  # long entries must not widen the panel
            combo.setSizeAdjustPolicy(
                QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon
            )
            combo.setMinimumContentsLength(8)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addStretch(1)

        self._fill_presets()
        self.set_settings(DEFAULT_SETTINGS)
        self.preset.currentIndexChanged.connect(self._apply_preset)
        self.save_preset.clicked.connect(self._save_preset)
        self.order.currentIndexChanged.connect(self._emit)
        self.max_new.valueChanged.connect(self._emit)
        self.seed.valueChanged.connect(self._emit)
        self.pacing.valueChanged.connect(self.pacing_changed)

    # -- values -------------------------------------------------------------------------------

    def settings(self) -> SamplerSettings:
        return SamplerSettings(
            temperature=round(self.rows["temperature"].value(), 4),
            top_k=int(self.rows["top_k"].value()),
            top_p=round(self.rows["top_p"].value(), 4),
            min_p=round(self.rows["min_p"].value(), 4),
            repetition_penalty=round(self.rows["repetition_penalty"].value(), 4),
            order=self.order.currentData(),
            max_new_tokens=self.max_new.value(),
            seed=self.seed.value(),
        )

    def set_settings(self, s: SamplerSettings) -> None:
        self._loading = True
        try:
            for name, row in self.rows.items():
                row.set_value(getattr(s, name))
            self.order.setCurrentIndex(max(0, self.order.findData(s.order)))
            self.max_new.setValue(s.max_new_tokens)
            self.seed.setValue(s.seed)
        finally:
            self._loading = False
        self._emit()

    def next_run_settings(self) -> SamplerSettings:
        """The settings for a new run: draws a fresh seed first when asked to."""
        if self.random_seed.isChecked():
            self.seed.setValue(random.randrange(2**31 - 1))
        return self.settings()

    @Slot()
    def _emit(self, *_args: object) -> None:
        if not self._loading:
            self.settings_changed.emit(self.settings())

    # -- presets ------------------------------------------------------------------------------

    def _fill_presets(self) -> None:
        self.preset.blockSignals(True)
        self.preset.clear()
        self.preset.addItem("— choose —", None)
        for name in PRESETS:
            self.preset.addItem(name, name)
        for name in self.user_presets:
            self.preset.addItem(f"{name} (mine)", f"user:{name}")
        self.preset.blockSignals(False)

    @Slot(int)
    def _apply_preset(self, _index: int) -> None:
        key = self.preset.currentData()
        if key is None:
            return
        chosen = self.user_presets[key[5:]] if key.startswith("user:") else PRESETS[key]
        current = self.settings()
        # A preset sets the sampler; it keeps the run length and the seed.
        self.set_settings(chosen.with_(max_new_tokens=current.max_new_tokens, seed=current.seed))

    @Slot()
    def _save_preset(self) -> None:
        name, ok = QInputDialog.getText(self, "Save preset", "Name of the preset:")
        if ok and name.strip():
            self.add_user_preset(name.strip(), self.settings())

    def add_user_preset(self, name: str, settings: SamplerSettings) -> None:
        self.user_presets[name] = settings
        self._fill_presets()
        self.preset.blockSignals(True)  # show it as selected without re-applying it
        self.preset.setCurrentIndex(self.preset.findData(f"user:{name}"))
        self.preset.blockSignals(False)

    # -- persistence (values, not indices) ------------------------------------------------------

    def save_state(self, store: QSettings) -> None:
        store.beginGroup("sampler")
        store.setValue("settings", json.dumps(self.settings().to_dict()))
        store.setValue("random_seed", self.random_seed.isChecked())
        store.setValue("pacing", self.pacing.value())
        store.setValue(
            "user_presets", json.dumps({k: v.to_dict() for k, v in self.user_presets.items()})
        )
        store.endGroup()

    def restore_state(self, store: QSettings) -> None:
        store.beginGroup("sampler")
        try:
            raw = store.value("settings", "", type=str)
            presets = store.value("user_presets", "", type=str)
            if presets:
                self.user_presets = {
                    k: SamplerSettings.from_dict(v) for k, v in json.loads(presets).items()
                }
                self._fill_presets()
            if raw:
                self.set_settings(SamplerSettings.from_dict(json.loads(raw)))
            self.random_seed.setChecked(store.value("random_seed", False, type=bool))
            self.pacing.setValue(store.value("pacing", 0.0, type=float))
        except (ValueError, TypeError):
            pass  # a damaged or older settings file: keep the defaults
        finally:
            store.endGroup()
