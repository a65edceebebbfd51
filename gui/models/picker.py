"""Pick a bundled model, a recent one, or open another (folder, GGUF file, Hugging Face id)."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal, Slot
from PySide6.QtWidgets import QComboBox, QFileDialog, QInputDialog, QWidget

from engine.models.catalog import BUNDLED
from gui.common.fitting import ElidedCombo
from gui.models.served_dialog import parse_served, served_title

OPEN_FOLDER, OPEN_GGUF, OPEN_HUB = "action:folder", "action:gguf", "action:hub"
OPEN_SERVED = "action:served"
MAX_RECENTS = 8

# the weights a model is loaded with: (value given to the engine as its dtype, label, tooltip)
WEIGHTS = (
    ("auto", "Auto weights", "float32 on the CPU, bfloat16 or float16 on a GPU"),
    ("float32", "float32", "32-bit weights: the reference"),
    ("bfloat16", "bfloat16", "16-bit weights: half the bytes read per token"),
    ("int8", "int8 (CPU)", "8-bit integer weights, one scale per row (CPU kernels)"),
    ("int4", "int4 (CPU)", "4-bit integer weights in groups of 32; a GGUF's own 4-bit blocks"),
)


class WeightsChoice(QComboBox):
    """The weights the next model loads with; ``dtype_chosen`` when the user changes it."""

    dtype_chosen = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("weights_choice")
        self.setToolTip("The weights a model is loaded with: int8 and int4 run on the CPU")
        for value, label, tip in WEIGHTS:
            self.addItem(label, value)
            self.setItemData(self.count() - 1, tip, Qt.ItemDataRole.ToolTipRole)
        self.activated.connect(lambda _i: self.dtype_chosen.emit(self.dtype()))

    def dtype(self) -> str:
        return str(self.currentData())

    def select(self, value: str) -> None:
        """Show ``value`` without emitting (a restored setting; unknown values: Auto)."""
        index = self.findData(value)
        self.setCurrentIndex(index if index >= 0 else 0)


class ModelPicker(ElidedCombo):
    """Emits ``source_chosen`` with a bundled name, a path or a hub id."""

    source_chosen = Signal(str)
    served_requested = Signal()  # "Open served model…": the window asks for the endpoint

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("model_picker")
        # as wide as 11 characters, the rest elided (whole in the popup and the tooltip): the
        # toolbars fit a 1280 px screen on one row (a 280 px box hid "A+" and "Export…")
        self.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.setMinimumContentsLength(11)
        self.setToolTip("Pick a bundled model, a recent one, or open another.")
        self.recents: list[str] = []
        self.current_key: str | None = None
        self.weights = WeightsChoice(parent)  # the toolbar shows it beside the picker
        self.activated.connect(self._picked)
        self.fill()

    def remember(self, source: str) -> None:
        """``source`` was loaded: first among the recents, and selected."""
        if source in self.recents:
            self.recents.remove(source)
        self.recents.insert(0, source)
        del self.recents[MAX_RECENTS:]
        self.current_key = source
        self.fill()

    def fill(self, pending: str | None = None) -> None:
        """Rebuild the list; select the current model, or ``pending`` while it loads."""
        self.blockSignals(True)
        self.clear()
        for m in BUNDLED.values():
            self.addItem(f"{m.title}  [{m.kind}]", m.name)
            self.setItemData(self.count() - 1, m.description, Qt.ItemDataRole.ToolTipRole)
        for source in self.recents:
            if source not in BUNDLED:
                title = served_title(source) if parse_served(source) else f"Recent: {source}"
                self.addItem(title, source)
        self.insertSeparator(self.count())
        self.addItem("Open folder…", OPEN_FOLDER)
        self.addItem("Open GGUF file…", OPEN_GGUF)
        self.addItem("Hugging Face id…", OPEN_HUB)
        self.addItem("Served model (vLLM, llama.cpp, Ollama, SGLang)…", OPEN_SERVED)
        key = pending or self.current_key
        if key is not None and self.findData(key) >= 0:
            self.setCurrentIndex(self.findData(key))
        self.blockSignals(False)

    @Slot(int)
    def _picked(self, index: int) -> None:
        data = self.itemData(index)
        source: str | None = None
        if data == OPEN_FOLDER:
            source = QFileDialog.getExistingDirectory(self, "Open a model folder")
        elif data == OPEN_GGUF:
            source, _ = QFileDialog.getOpenFileName(
                self, "Open a GGUF file", "", "GGUF files (*.gguf)"
            )
        elif data == OPEN_SERVED:
            self.fill()
            self.served_requested.emit()
            return
        elif data == OPEN_HUB:
            text, ok = QInputDialog.getText(
                self, "Hugging Face model", "Model id (for example gpt2):"
            )
            source = text.strip() if ok else None
        else:
            source = data
        if source:
            self.source_chosen.emit(source)
        else:
            self.fill()
