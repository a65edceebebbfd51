"""Choose how tokens are picked: sampling, beam search or speculative decoding."""

from __future__ import annotations

from PySide6.QtCore import QSettings, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSpinBox,
    QWidget,
)

from engine.records import BEAM, RUN_METHODS, SAMPLING, SPEC_DRAFT, SPEC_NGRAM


class MethodPanel(QGroupBox):
    method_changed = Signal(str)
    load_draft_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Method", parent)
        self.form = form = QFormLayout(self)
        self.method = QComboBox()
        self.method.setObjectName("method")
        for key, title in RUN_METHODS.items():
            self.method.addItem(title, key)
        self.method.setToolTip("How the next tokens are chosen.")
        self.method.setSizeAdjustPolicy(
            QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon
        )
        self.method.setMinimumContentsLength(8)
        form.addRow("Method", self.method)
        self.beams = QSpinBox()
        self.beams.setObjectName("num_beams")
        self.beams.setRange(1, 16)
        self.beams.setValue(4)
        self.beams.setToolTip(
            "Beam search keeps this many partial texts and extends the best ones."
        )
        form.addRow("Beams", self.beams)
        self.gamma = QSpinBox()
        self.gamma.setObjectName("gamma")
        self.gamma.setRange(1, 16)
        self.gamma.setValue(5)
        self.gamma.setToolTip("How many tokens are guessed ahead before the big model checks them.")
        form.addRow("Draft length", self.gamma)
        self.draft_label = QLabel("none")
        self.draft_label.setWordWrap(True)
        self.load_draft = QPushButton("Load…")
        self.load_draft.setToolTip("A smaller model with the same tokenizer that guesses ahead.")
        self.draft_row = QWidget()
        row = QHBoxLayout(self.draft_row)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.draft_label, 1)
        row.addWidget(self.load_draft)
        form.addRow("Draft model", self.draft_row)
        self.stats = QLabel("")
        self.stats.setObjectName("method_stats")
        self.stats.setWordWrap(True)
        form.addRow(self.stats)
        self.method.currentIndexChanged.connect(lambda _i: self._changed())
        self.load_draft.clicked.connect(self.load_draft_requested)
        self._changed()

    def current(self) -> str:
        return self.method.currentData()

    def set_current(self, method: str) -> None:
        self.method.setCurrentIndex(max(0, self.method.findData(method)))

    def _changed(self) -> None:
        m = self.current()
        # only the fields this method uses are shown (Load… only where a draft model is used)
        self.form.setRowVisible(self.beams, m == BEAM)
        self.form.setRowVisible(self.gamma, m in (SPEC_NGRAM, SPEC_DRAFT))
        self.form.setRowVisible(self.draft_row, m == SPEC_DRAFT)
        self.stats.setText("")
        self.method_changed.emit(m)

    def save_state(self, store: QSettings) -> None:
        store.beginGroup("method")
        store.setValue("method", self.current())
        store.setValue("beams", self.beams.value())
        store.setValue("gamma", self.gamma.value())
        store.endGroup()

    def restore_state(self, store: QSettings) -> None:
        store.beginGroup("method")
        self.set_current(store.value("method", SAMPLING, type=str))
        self.beams.setValue(store.value("beams", 4, type=int))
        self.gamma.setValue(store.value("gamma", 5, type=int))
        store.endGroup()
