"""The small dialogs that start an experiment: which setting to sweep over which values, how
many seeded runs, and which model B runs beside model A. They return plain values; the
controller (``gui.experiments.actions``) turns them into jobs."""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QLabel,
    QLineEdit,
    QSpinBox,
    QWidget,
)

from engine.experiments.records import MAX_RUNS
from engine.sampling.settings import SWEEPABLE, SamplerSettings
from gui.experiments.words import others_on

# The settings a class sweeps first, with values that show the change; any other SWEEPABLE
# setting can be chosen too (the values box is then empty to fill in).
SWEEP_DEFAULTS: dict[str, str] = {
    "temperature": "0, 0.5, 1.0, 1.5, 2.0",
    "top_p": "0.3, 0.6, 0.9, 1.0",
    "min_p": "0, 0.05, 0.1, 0.2, 0.4",
    "top_k": "1, 5, 20, 50, 0",
}
SAME_BF16 = "same-bf16"  # model B = model A in bfloat16
SAME_INT8, SAME_INT4 = "same-int8", "same-int4"  # model B = model A's weights in int8 / int4
SAME_QUANT = "same-quant"  # A against its own int8 and int4 weights, both at once
OTHER = "other"


def parse_values(text: str) -> list[float]:
    """ "0.2, 0.7 1.0" -> [0.2, 0.7, 1.0]; a ValueError names what is not a number."""
    values = []
    for part in text.replace(";", ",").replace(" ", ",").split(","):
        if part.strip():
            try:
                values.append(float(part))
            except ValueError:
                raise ValueError(f"{part.strip()!r} is not a number") from None
    if not values:
        raise ValueError("give at least one value, for example 0.2, 0.7, 1.0")
    return values


def _buttons(dialog: QDialog) -> QDialogButtonBox:
    ok = QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel
    box = QDialogButtonBox(ok)
    box.accepted.connect(dialog.accept)
    box.rejected.connect(dialog.reject)
    return box


class SweepDialog(QDialog):
    """``preset``: a lesson stage's (setting, values), filled in; ``current``: the sampler's
    settings, whose other active stages the dialog names (they stay on at every value unless
    "Only this setting" is ticked)."""

    def __init__(
        self, parent: QWidget | None = None, preset: tuple[str, Sequence[float]] | None = None,
        current: SamplerSettings | None = None,
    ) -> None:  # fmt: skip
        super().__init__(parent)
        self.setWindowTitle("Sweep a setting")
        self.current = current or SamplerSettings()
        self.setting = QComboBox()
        for name in (*SWEEP_DEFAULTS, *(s for s in SWEEPABLE if s not in SWEEP_DEFAULTS)):
            self.setting.addItem(name.replace("_", "-"), name)
        self.values = QLineEdit(SWEEP_DEFAULTS["temperature"])
        self.values.setObjectName("sweep_values")
        self.also_on = QLabel()
        self.also_on.setObjectName("sweep_also_on")
        self.also_on.setWordWrap(True)
        self.only = QCheckBox("Only this setting: the others off for the sweep")
        self.only.setObjectName("sweep_only")
        self.only.setToolTip("Your settings stay as they are; only the sweep's runs turn the "
                             "other stages off.")  # fmt: skip
        form = QFormLayout(self)
        form.addRow(QLabel("The prompt and the seed stay; one run per value."))
        form.addRow("Setting", self.setting)
        form.addRow("Values", self.values)
        form.addRow(self.also_on)
        form.addRow(self.only)
        form.addRow(_buttons(self))
        self.setting.currentIndexChanged.connect(self._setting_changed)
        self.only.toggled.connect(lambda _on: self._say_also_on())
        if preset is not None:
            self.setting.setCurrentIndex(max(0, self.setting.findData(preset[0])))
            self.values.setText(", ".join(f"{v:g}" for v in preset[1]))
        self._say_also_on()

    def _setting_changed(self, _index: int) -> None:
        self.values.setText(SWEEP_DEFAULTS.get(self.chosen()[0], ""))
        self._say_also_on()

    def _say_also_on(self) -> None:
        on = others_on(self.current, self.chosen()[0])
        self.only.setEnabled(bool(on))
        if not on:
            self.also_on.setText("Nothing else is on: the sweep shows this setting alone.")
        elif self.only.isChecked():
            self.also_on.setText(f"Off for the sweep: {', '.join(on)}.")
        else:
            self.also_on.setText(f"<b>Also on at every value</b>: {', '.join(on)}.")

    def chosen(self) -> tuple[str, str]:
        return str(self.setting.currentData()), self.values.text()

    def only_this(self) -> bool:
        """The other stages off for the sweep."""
        return self.only.isEnabled() and self.only.isChecked()


class RunsDialog(QDialog):
    def __init__(self, parent: QWidget | None = None, runs: int = 20) -> None:
        super().__init__(parent)
        self.setWindowTitle("Stochastic variation")
        self.runs = QSpinBox()
        self.runs.setRange(2, MAX_RUNS)
        self.runs.setValue(runs)
        form = QFormLayout(self)
        form.addRow(QLabel("Sampled runs from this prompt, seeds seed, seed+1, …"))
        form.addRow("Runs", self.runs)
        form.addRow(_buttons(self))


class LockstepDialog(QDialog):
    """Model B: model A in bfloat16, int8 or int4 (or int8 and int4 at once), a bundled model,
    a served model (the recents of Open served model…: B's top-N only, so KL is a lower
    bound), or any folder / .gguf / hub id."""

    def __init__(
        self, parent: QWidget | None, bundled: Sequence[tuple[str, str]],
        served: Sequence[tuple[str, str]] = (),
    ) -> None:  # fmt: skip
        super().__init__(parent)
        self.setWindowTitle("Two models in lockstep")
        self.model = QComboBox()
        self.model.setObjectName("lockstep_model")
        self.model.addItem("The same model in bfloat16", SAME_BF16)
        self.model.addItem("The same model: float32 vs int8 vs int4 (CPU)", SAME_QUANT)
        self.model.addItem("The same model in int8 (CPU)", SAME_INT8)
        self.model.addItem("The same model in int4 (CPU)", SAME_INT4)
        for name, title in bundled:
            self.model.addItem(title, name)
        for source, title in served:  # its top-N only: the view says KL is a lower bound
            self.model.addItem(title, source)
            self.model.setItemData(
                self.model.count() - 1,
                "B on a server sends its top-N only: KL values are lower bounds.",
                Qt.ItemDataRole.ToolTipRole,
            )
        self.model.addItem("Another model (folder, .gguf or Hugging Face id)…", OTHER)
        self.other = QLineEdit()
        self.other.setPlaceholderText("e.g. HuggingFaceTB/SmolLM2-360M-Instruct")
        self.other.setEnabled(False)
        self.top_n = QSpinBox()
        self.top_n.setRange(2, 50)
        self.top_n.setValue(10)
        form = QFormLayout(self)
        form.addRow(QLabel("A writes the text; B scores every step. They must share a tokenizer."))
        form.addRow("Model B", self.model)
        form.addRow("", self.other)
        form.addRow("Top-N compared", self.top_n)
        form.addRow(_buttons(self))
        self.model.currentIndexChanged.connect(
            lambda _i: self.other.setEnabled(self.model.currentData() == OTHER)
        )

    def chosen(self) -> tuple[str, int]:
        """(B's source, or one of the SAME_ choices; top-N)."""
        data = str(self.model.currentData())
        return (self.other.text().strip() if data == OTHER else data), self.top_n.value()
