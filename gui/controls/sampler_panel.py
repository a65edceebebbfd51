"""Sliders and fields for the sampler chain, presets, seed and order. The everyday knobs sit
on top (``BasicForm``); every other stage (penalties, DRY, XTC, mirostat, ...) and the order of
the stages (a list to drag, with the presets of llama.cpp and transformers) in the collapsible
"Advanced" group (``AdvancedGroup``). The controls are laid out as data in ``sampler_tables``;
every tooltip comes from ``engine.sampling.help``."""

from __future__ import annotations

import json
import random

from PySide6.QtCore import QSettings, Signal, Slot
from PySide6.QtWidgets import QGroupBox, QInputDialog, QVBoxLayout, QWidget

from engine.sampling.settings import DEFAULT_SETTINGS, ORDER_OF, PRESETS, SamplerSettings
from engine.validate.settings import json_object
from gui.controls.knob_row import KnobRow
from gui.controls.sampler_advanced import AdvancedGroup
from gui.controls.sampler_basic import BasicForm
from gui.controls.sampler_tables import (
    KNOBS,
    NUMBERS,
    STAGE_TITLES,
    Knob,
    format_bias,
    parse_bias,
    parse_ids,
)

# Where they were before the panel was split (gui.controls.presenter_strip, the tests).
__all__ = [
    "KNOBS",
    "NUMBERS",
    "STAGE_TITLES",
    "Knob",
    "KnobRow",
    "SamplerPanel",
    "format_bias",
    "parse_bias",
    "parse_ids",
]


class SamplerPanel(QGroupBox):
    """Emits ``settings_changed`` with a new ``SamplerSettings`` whenever a control moves."""

    settings_changed = Signal(object)
    pacing_changed = Signal(float)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Sampler", parent)
        self._loading = False
        self.user_presets: dict[str, SamplerSettings] = {}
        self.basic = BasicForm()
        self.advanced_group = AdvancedGroup()
        layout = QVBoxLayout(self)
        layout.addWidget(self.basic)
        layout.addWidget(self.advanced_group)
        layout.addStretch(1)
        # The controls the window, the presenter strip and the tests reach by these names.
        self.rows = self.basic.rows
        self.preset = self.basic.preset
        self.save_preset = self.basic.save_preset
        self.order = self.basic.order
        self.max_new = self.basic.max_new
        self.seed = self.basic.seed
        self.random_seed = self.basic.random_seed
        self.pacing = self.basic.pacing
        self.advanced = self.advanced_group.toggle
        self.advanced_body = self.advanced_group.body
        self.numbers = self.advanced_group.numbers
        self.mirostat = self.advanced_group.mirostat
        self.texts = self.advanced_group.texts
        self.stage_list = self.advanced_group.stage_list

        self._fill_presets()
        self.set_settings(DEFAULT_SETTINGS)
        self.basic.changed.connect(self._emit)
        self.advanced_group.changed.connect(self._emit)
        self.advanced_group.order_chosen.connect(self.use_order_preset)
        self.preset.currentIndexChanged.connect(self._apply_preset)
        self.save_preset.clicked.connect(self._save_preset)
        self.order.currentIndexChanged.connect(self._order_preset_changed)
        self.pacing.valueChanged.connect(self.pacing_changed)

    # -- values -------------------------------------------------------------------------------

    def settings(self) -> SamplerSettings:
        """Every field of ``SamplerSettings``, from the controls."""
        basic = self.basic.values()
        return SamplerSettings(**basic, **self.advanced_group.values(basic["order"]))

    def set_settings(self, s: SamplerSettings) -> None:
        """Show every field of ``s``."""
        self._loading = True
        try:
            self.basic.show_values(s)
            self.advanced_group.show_values(s)
        finally:
            self._loading = False
        self._emit()

    def move_stage(self, delta: int) -> None:
        """Move the selected stage ``delta`` places (the Up / Down buttons)."""
        self.advanced_group.move_stage(delta)

    def use_order_preset(self, order: str) -> None:
        """The stage order of llama.cpp or transformers, exactly."""
        self._loading = True
        try:
            self.order.setCurrentIndex(max(0, self.order.findData(order)))
            self.advanced_group.fill_stages(ORDER_OF[order])
        finally:
            self._loading = False
        self._emit()

    @Slot(int)
    def _order_preset_changed(self, _index: int) -> None:
        if not self._loading:
            self.use_order_preset(self.order.currentData())

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
            if presets:  # checked JSON objects: {} for anything else (engine.validate)
                self.user_presets = {
                    k: SamplerSettings.from_dict(v)
                    for k, v in json_object(presets).items()
                    if isinstance(v, dict)
                }
                self._fill_presets()
            if raw:
                self.set_settings(SamplerSettings.from_dict(json_object(raw)))
            self.random_seed.setChecked(store.value("random_seed", False, type=bool))
            self.pacing.setValue(store.value("pacing", 0.0, type=float))
        except (ValueError, TypeError):
            pass  # a damaged or older settings file: keep the defaults
        finally:
            store.endGroup()
