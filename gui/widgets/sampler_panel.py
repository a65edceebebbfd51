"""Sliders and fields for the sampler chain, presets, seed and order. The everyday knobs sit
on top; every other stage (penalties, DRY, XTC, mirostat, ...) and the order of the stages (a
list to drag, with the presets of llama.cpp and transformers) in the collapsible "Advanced"
group. Every tooltip comes from ``engine.sampling.help``."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass

from PySide6.QtCore import QSettings, Qt, Signal, Slot
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QInputDialog,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QSlider,
    QSpinBox,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from engine.sampling.checks import check_grammar_spec
from engine.sampling.help import tooltip
from engine.sampling.settings import (
    DEFAULT_SETTINGS,
    ORDER_OF,
    ORDER_TEMPERATURE_FIRST,
    ORDER_TEMPERATURE_LAST,
    PRESETS,
    SamplerSettings,
    stage_order,
)
from engine.validate.settings import json_object
from gui.widgets.fitting import ElidedCombo


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
    Knob("temperature", "Temperature", 0.0, 2.5, 0.01, 2, tooltip("temperature")),
    Knob("top_k", "Top-k", 0, 200, 1, 0, tooltip("top_k")),
    Knob("top_p", "Top-p", 0.0, 1.0, 0.01, 2, tooltip("top_p")),
    Knob("min_p", "Min-p", 0.0, 1.0, 0.01, 2, tooltip("min_p")),
    Knob("repetition_penalty", "Repetition penalty", 1.0, 2.0, 0.01, 2,
         tooltip("repetition_penalty")),
)  # fmt: skip

# The "Advanced" group: (field, label, low, high, decimals); decimals 0 = an integer.
NUMBERS = (
    ("typical_p", "Typical-p", 0.01, 1.0, 2),
    ("penalty_last_n", "Penalty range (last N)", 0, 1_000_000, 0),
    ("frequency_penalty", "Frequency penalty", -2.0, 2.0, 2),
    ("presence_penalty", "Presence penalty", -2.0, 2.0, 2),
    ("no_repeat_ngram_size", "No repeat n-gram", 0, 10, 0),
    ("min_new_tokens", "Min new tokens", 0, 100_000, 0),
    ("dry_multiplier", "DRY multiplier", 0.0, 5.0, 2),
    ("dry_base", "DRY base", 1.0, 4.0, 2),
    ("dry_allowed_length", "DRY allowed length", 1, 50, 0),
    ("dry_penalty_last_n", "DRY range (last N)", 0, 1_000_000, 0),
    ("top_n_sigma", "Top-nσ", 0.0, 5.0, 2),
    ("epsilon_cutoff", "Epsilon cutoff", 0.0, 0.99, 4),
    ("eta_cutoff", "Eta cutoff", 0.0, 0.99, 4),
    ("top_a", "Top-a", 0.0, 5.0, 2),
    ("xtc_threshold", "XTC threshold", 0.0, 1.0, 2),
    ("xtc_probability", "XTC probability", 0.0, 1.0, 2),
    ("dynatemp_range", "Dynamic temperature ±", 0.0, 5.0, 2),
    ("dynatemp_exponent", "Dynamic temp. exponent", 0.01, 10.0, 2),
    ("smoothing_factor", "Smoothing factor", 0.0, 10.0, 2),
    ("smoothing_curve", "Smoothing curve", 1.0, 3.0, 2),
    ("mirostat_tau", "Mirostat τ", 0.0, 20.0, 2),
    ("mirostat_eta", "Mirostat η", 0.0, 1.0, 3),
    ("adaptive_p_target", "Adaptive-p target (< 0 off)", -1.0, 1.0, 2),
    ("adaptive_p_decay", "Adaptive-p decay", 0.0, 0.99, 2),
)
STAGE_TITLES = {
    "logit_bias": "Logit bias", "repetition_penalty": "Repetition penalty",
    "frequency_presence": "Frequency / presence", "dry": "DRY",
    "no_repeat_ngram_size": "No repeat n-gram", "banned_strings": "Banned words",
    "min_new_tokens": "Min new tokens", "suppress_tokens": "Suppressed tokens",
    "top_n_sigma": "Top-nσ", "smoothing_factor": "Smoothing", "temperature": "Temperature",
    "top_k": "Top-k", "top_p": "Top-p", "min_p": "Min-p", "typical_p": "Typical-p",
    "epsilon_cutoff": "Epsilon", "eta_cutoff": "Eta", "top_a": "Top-a", "xtc": "XTC",
    "mirostat": "Mirostat", "grammar": "Grammar", "adaptive_p": "Adaptive-p",
}  # fmt: skip


def format_bias(bias: tuple[tuple[str, float], ...]) -> str:
    return "; ".join(f"{k}: {v:g}" for k, v in bias)


def parse_bias(text: str) -> tuple[tuple[str, float], ...]:
    """``"word: 2; #13: -inf"`` -> (("word", 2.0), ("#13", -inf)); ValueError if malformed."""
    out = []
    for part in filter(None, (p.strip() for p in text.split(";"))):
        key, sep, value = part.rpartition(":")
        if not sep or not key.strip():
            raise ValueError(f"write word: bias, got {part!r}")
        out.append((key.strip(), float(value)))
    return tuple(out)


def _shortest(listed: tuple[str, ...], preset: tuple[str, ...]) -> tuple[str, ...]:
    """The shortest user order that expands to ``listed`` (the rest in the preset's order)."""
    for k in range(len(listed) + 1):
        head = listed[:k]
        if head + tuple(n for n in preset if n not in head) == listed:
            return head
    return listed


def parse_ids(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.replace(",", " ").split())


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

        self.preset = ElidedCombo()
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

        self.order = ElidedCombo()
        self.order.setObjectName("order")
        self.order.addItem("Temperature first (transformers)", ORDER_TEMPERATURE_FIRST)
        self.order.addItem("Temperature last (llama.cpp, seed)", ORDER_TEMPERATURE_LAST)
        self.order.setToolTip(tooltip("order"))
        form.addRow("Order", self.order)

        self.max_new = QSpinBox()
        self.max_new.setObjectName("max_new_tokens")
        self.max_new.setRange(1, 100000)
        self.max_new.setToolTip(tooltip("max_new_tokens"))
        form.addRow("Max new tokens", self.max_new)

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
        layout.addWidget(self._advanced_group())
        layout.addStretch(1)

        self._fill_presets()
        self.set_settings(DEFAULT_SETTINGS)
        self.preset.currentIndexChanged.connect(self._apply_preset)
        self.save_preset.clicked.connect(self._save_preset)
        self.order.currentIndexChanged.connect(self._order_preset_changed)
        self.max_new.valueChanged.connect(self._emit)
        self.seed.valueChanged.connect(self._emit)
        self.pacing.valueChanged.connect(self.pacing_changed)

    # -- values -------------------------------------------------------------------------------

    def settings(self) -> SamplerSettings:
        """Every field of ``SamplerSettings``, from the controls."""
        order = self.order.currentData()
        listed = tuple(self.stage_list.item(i).data(Qt.ItemDataRole.UserRole)
                       for i in range(self.stage_list.count()))  # fmt: skip
        numbers = {
            name: (int(w.value()) if isinstance(w, QSpinBox) else round(w.value(), 6))
            for name, w in self.numbers.items()
        }
        return SamplerSettings(
            temperature=round(self.rows["temperature"].value(), 4),
            top_k=int(self.rows["top_k"].value()),
            top_p=round(self.rows["top_p"].value(), 4),
            min_p=round(self.rows["min_p"].value(), 4),
            repetition_penalty=round(self.rows["repetition_penalty"].value(), 4),
            order=order,
            max_new_tokens=self.max_new.value(),
            seed=self.seed.value(),
            mirostat=self.mirostat.currentData(),
            logit_bias=self._texts["logit_bias"],
            banned_strings=self._texts["banned_strings"],
            suppress_tokens=self._texts["suppress_tokens"],
            dry_sequence_breakers=self._texts["dry_sequence_breakers"],
            grammar=self._texts["grammar"],
            stage_order=_shortest(listed, ORDER_OF[order]),
            **numbers,
        )

    def set_settings(self, s: SamplerSettings) -> None:
        """Show every field of ``s``."""
        self._loading = True
        try:
            for name, row in self.rows.items():
                row.set_value(getattr(s, name))
            self.order.setCurrentIndex(max(0, self.order.findData(s.order)))
            self.max_new.setValue(s.max_new_tokens)
            self.seed.setValue(s.seed)
            for name, w in self.numbers.items():
                w.setValue(getattr(s, name))
            self.mirostat.setCurrentIndex(max(0, self.mirostat.findData(s.mirostat)))
            self._texts = {
                "logit_bias": s.logit_bias,
                "banned_strings": s.banned_strings,
                "suppress_tokens": s.suppress_tokens,
                "dry_sequence_breakers": s.dry_sequence_breakers,
                "grammar": s.grammar,
            }
            self.texts["logit_bias"].setText(format_bias(s.logit_bias))
            self.texts["banned_strings"].setText("; ".join(s.banned_strings))
            self.texts["suppress_tokens"].setText(", ".join(map(str, s.suppress_tokens)))
            self.texts["dry_sequence_breakers"].setText(json.dumps(list(s.dry_sequence_breakers)))
            self.texts["grammar"].setText(s.grammar)
            self._fill_stages(stage_order(s))
        finally:
            self._loading = False
        self._emit()

    # -- the advanced group -------------------------------------------------------------------

    def _advanced_group(self) -> QWidget:
        box = QWidget()
        self.advanced = QToolButton()
        self.advanced.setObjectName("advanced")
        self.advanced.setText("Advanced")
        self.advanced.setCheckable(True)
        self.advanced.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.advanced.setArrowType(Qt.ArrowType.RightArrow)
        self.advanced.setAutoRaise(True)
        self.advanced.setToolTip("Show every other stage of the chain and the order of the stages.")
        inner = QWidget()
        form = QFormLayout(inner)
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        self.numbers: dict[str, QSpinBox | QDoubleSpinBox] = {}
        for name, label, lo, hi, decimals in NUMBERS:
            if decimals == 0:
                w: QSpinBox | QDoubleSpinBox = QSpinBox()
                w.setRange(int(lo), int(hi))
            else:
                w = QDoubleSpinBox()
                w.setDecimals(decimals)
                w.setRange(lo, hi)
                w.setSingleStep(10**-decimals if decimals > 2 else 0.05)
            w.setObjectName(name)
            w.setToolTip(tooltip(name))
            w.valueChanged.connect(self._emit)
            self.numbers[name] = w
            form.addRow(label, w)
        self.mirostat = ElidedCombo()
        self.mirostat.setObjectName("mirostat")
        for text, value in (("off", 0), ("v1", 1), ("v2", 2)):
            self.mirostat.addItem(text, value)
        self.mirostat.setToolTip(tooltip("mirostat"))
        self.mirostat.currentIndexChanged.connect(self._emit)
        form.addRow("Mirostat", self.mirostat)
        self.texts: dict[str, QLineEdit] = {}
        self._texts: dict[str, tuple] = {}
        for name, label, hint in (
            ("logit_bias", "Logit bias", "word: 2; #13: -inf"),
            ("banned_strings", "Banned words", "word; other words; #13"),
            ("suppress_tokens", "Suppressed ids", "0, 13"),
            ("dry_sequence_breakers", "DRY breakers", '["\\n", ":"]'),
            ("grammar", "Grammar", "choice:yes|no, regex:..., json:{...}"),
        ):
            edit = QLineEdit()
            edit.setObjectName(name)
            edit.setPlaceholderText(hint)
            edit.setToolTip(tooltip(name))
            edit.editingFinished.connect(lambda n=name: self._text_edited(n))
            self.texts[name] = edit
            form.addRow(label, edit)
        self.stage_list = QListWidget()
        self.stage_list.setObjectName("stage_order")
        self.stage_list.setToolTip(tooltip("stage_order"))
        self.stage_list.setDragDropMode(QAbstractItemView.DragDropMode.InternalMove)
        self.stage_list.setMinimumHeight(120)
        self.stage_list.model().rowsMoved.connect(self._emit)
        up, down = QPushButton("Up"), QPushButton("Down")
        up.setObjectName("stage_up")
        down.setObjectName("stage_down")
        up.setToolTip("Move the selected stage earlier in the chain.")
        down.setToolTip("Move the selected stage later in the chain.")
        up.clicked.connect(lambda: self.move_stage(-1))
        down.clicked.connect(lambda: self.move_stage(1))
        llama, hf = QPushButton("llama.cpp"), QPushButton("transformers")
        llama.setObjectName("order_llama_cpp")
        hf.setObjectName("order_transformers")
        llama.setToolTip("llama.cpp's default chain (common/common.h), temperature last.")
        hf.setToolTip("transformers' order (generation/utils.py), temperature first.")
        llama.clicked.connect(lambda: self.use_order_preset(ORDER_TEMPERATURE_LAST))
        hf.clicked.connect(lambda: self.use_order_preset(ORDER_TEMPERATURE_FIRST))
        buttons = QHBoxLayout()
        for b in (up, down, llama, hf):
            buttons.addWidget(b)
        form.addRow(QLabel("Stage order (drag, or Up / Down)"))
        form.addRow(self.stage_list)
        form.addRow(buttons)
        outer = QVBoxLayout(box)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.addWidget(self.advanced)
        outer.addWidget(inner)
        inner.setVisible(False)

        def toggle(on: bool) -> None:
            inner.setVisible(on)
            self.advanced.setArrowType(Qt.ArrowType.DownArrow if on else Qt.ArrowType.RightArrow)

        self.advanced.toggled.connect(toggle)
        self.advanced_body = inner
        return box

    def _fill_stages(self, names: tuple[str, ...]) -> None:
        self.stage_list.clear()
        for name in names:
            item = QListWidgetItem(STAGE_TITLES.get(name, name))
            item.setData(Qt.ItemDataRole.UserRole, name)
            item.setToolTip(tooltip(name) or tooltip(name.split("_")[0]))
            self.stage_list.addItem(item)

    def move_stage(self, delta: int) -> None:
        """Move the selected stage ``delta`` places (the Up / Down buttons)."""
        row = self.stage_list.currentRow()
        to = row + delta
        if row < 0 or not 0 <= to < self.stage_list.count():
            return
        item = self.stage_list.takeItem(row)
        self.stage_list.insertItem(to, item)
        self.stage_list.setCurrentRow(to)
        self._emit()

    def use_order_preset(self, order: str) -> None:
        """The stage order of llama.cpp or transformers, exactly."""
        self._loading = True
        try:
            self.order.setCurrentIndex(max(0, self.order.findData(order)))
            self._fill_stages(ORDER_OF[order])
        finally:
            self._loading = False
        self._emit()

    @Slot(int)
    def _order_preset_changed(self, _index: int) -> None:
        if not self._loading:
            self.use_order_preset(self.order.currentData())

    def _text_edited(self, name: str) -> None:
        text = self.texts[name].text()
        try:
            if name == "logit_bias":
                value: tuple = parse_bias(text)
            elif name == "banned_strings":
                value = tuple(p.strip() for p in text.split(";") if p.strip())
            elif name == "suppress_tokens":
                value = parse_ids(text)
            elif name == "grammar":  # the form here; the text itself when the chain builds
                check_grammar_spec(text.strip())
                value = text.strip()  # type: ignore[assignment]
            else:
                value = tuple(str(x) for x in json.loads(text or "[]"))
            self.texts[name].setStyleSheet("")
        except (ValueError, TypeError):
            self.texts[name].setStyleSheet("color: #cf222e")  # kept the last valid value
            return
        if value != self._texts[name]:
            self._texts[name] = value
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
