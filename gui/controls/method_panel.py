"""Choose how tokens are picked: sampling, beam searches, contrastive search or speculative
decoding; each method shows only its own fields."""

from __future__ import annotations

from PySide6.QtCore import QSettings, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSpinBox,
    QWidget,
)

from engine.records import (
    BEAM,
    CONTRASTIVE,
    GROUP_BEAM,
    RUN_METHODS,
    SAMPLED_BEAM,
    SAMPLING,
    SPEC_DRAFT,
    SPEC_NGRAM,
)
from engine.sampling.help import tooltip
from gui.common.fitting import ElidedCombo


class MethodPanel(QGroupBox):
    method_changed = Signal(str)
    load_draft_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Method", parent)
        form = QFormLayout(self)
        self.method = ElidedCombo()
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
        row = QHBoxLayout()
        row.addWidget(self.draft_label, 1)
        row.addWidget(self.load_draft)
        form.addRow("Draft model", row)
        self.draft_row = row
        self.alpha = QDoubleSpinBox()
        self.alpha.setObjectName("penalty_alpha")
        self.alpha.setRange(0.0, 1.0)
        self.alpha.setSingleStep(0.05)
        self.alpha.setValue(0.6)
        self.alpha.setToolTip(tooltip("penalty_alpha"))
        form.addRow("Penalty α", self.alpha)
        self.contrastive_k = QSpinBox()
        self.contrastive_k.setObjectName("contrastive_k")
        self.contrastive_k.setRange(1, 50)
        self.contrastive_k.setValue(4)
        self.contrastive_k.setToolTip(tooltip("contrastive_k"))
        form.addRow("Candidates k", self.contrastive_k)
        self.groups = QSpinBox()
        self.groups.setObjectName("num_beam_groups")
        self.groups.setRange(1, 16)
        self.groups.setValue(2)
        self.groups.setToolTip(tooltip("num_beam_groups"))
        form.addRow("Beam groups", self.groups)
        self.diversity = QDoubleSpinBox()
        self.diversity.setObjectName("diversity_penalty")
        self.diversity.setRange(0.0, 100.0)
        self.diversity.setSingleStep(0.1)
        self.diversity.setValue(0.5)
        self.diversity.setToolTip(tooltip("diversity_penalty"))
        form.addRow("Diversity penalty", self.diversity)
        self.form = form
        self.stats = QLabel("")
        self.stats.setObjectName("method_stats")
        self.stats.setWordWrap(True)
        form.addRow(self.stats)
        self.method.currentIndexChanged.connect(lambda _i: self._changed())
        self.load_draft.clicked.connect(self.load_draft_requested)
        self._changed()

    def current(self) -> str:
        return self.method.currentData()

    def set_served(self, served: bool) -> None:
        """A served model adds its stream mode (the server samples) to the methods."""
        from engine.records import SERVED_STREAM

        at = self.method.findData(SERVED_STREAM)
        if served and at < 0:
            self.method.addItem("Served: the server samples (stream)", SERVED_STREAM)
        elif not served and at >= 0:
            if self.current() == SERVED_STREAM:
                self.set_current(SAMPLING)
            self.method.removeItem(at)

    def set_current(self, method: str) -> None:
        self.method.setCurrentIndex(max(0, self.method.findData(method)))

    def request_options(self) -> dict[str, float | int]:
        """The method's fields as ``RunRequest`` keywords (``RunRequest(..., **options)``)."""
        return {
            "num_beams": self.beams.value(), "gamma": self.gamma.value(),
            "penalty_alpha": self.alpha.value(), "contrastive_k": self.contrastive_k.value(),
            "num_beam_groups": self.groups.value(),
            "diversity_penalty": self.diversity.value(),
        }  # fmt: skip

    def _changed(self) -> None:
        m = self.current()
        shown = {
            self.beams: m in (BEAM, SAMPLED_BEAM, GROUP_BEAM),
            self.gamma: m in (SPEC_NGRAM, SPEC_DRAFT),
            self.load_draft: m == SPEC_DRAFT,
            self.alpha: m == CONTRASTIVE,
            self.contrastive_k: m == CONTRASTIVE,
            self.groups: m == GROUP_BEAM,
            self.diversity: m == GROUP_BEAM,
        }
        for widget, on in shown.items():
            widget.setEnabled(on)
            self.form.setRowVisible(self.draft_row if widget is self.load_draft else widget, on)
        self.stats.setText("")
        self.method_changed.emit(m)

    def save_state(self, store: QSettings) -> None:
        store.beginGroup("method")
        store.setValue("method", self.current())
        store.setValue("beams", self.beams.value())
        store.setValue("gamma", self.gamma.value())
        store.setValue("penalty_alpha", self.alpha.value())
        store.setValue("contrastive_k", self.contrastive_k.value())
        store.setValue("num_beam_groups", self.groups.value())
        store.setValue("diversity_penalty", self.diversity.value())
        store.endGroup()

    def restore_state(self, store: QSettings) -> None:
        store.beginGroup("method")
        self.set_current(store.value("method", SAMPLING, type=str))
        self.beams.setValue(store.value("beams", 4, type=int))
        self.gamma.setValue(store.value("gamma", 5, type=int))
        self.alpha.setValue(store.value("penalty_alpha", 0.6, type=float))
        self.contrastive_k.setValue(store.value("contrastive_k", 4, type=int))
        self.groups.setValue(store.value("num_beam_groups", 2, type=int))
        self.diversity.setValue(store.value("diversity_penalty", 0.5, type=float))
        store.endGroup()
