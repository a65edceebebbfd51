"""The sampler panel's collapsible "Advanced" group: every other stage of the chain (penalties,
DRY, XTC, mirostat, ...) as number and text fields (``NUMBERS``, ``TEXT_FIELDS``), and the order
of the stages: a list to drag, Up / Down, and the orders of llama.cpp and transformers."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt, Signal, Slot
from PySide6.QtWidgets import (
    QAbstractItemView,
    QDoubleSpinBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QSpinBox,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from engine.sampling.help import tooltip
from engine.sampling.settings import ORDER_OF, SamplerSettings, stage_order
from gui.common.fitting import ElidedCombo
from gui.controls.knob_row import number_field
from gui.controls.sampler_tables import (
    MIROSTAT_VERSIONS,
    NUMBERS,
    ORDER_BUTTONS,
    STAGE_TITLES,
    TEXT_FIELDS,
    TextField,
)


def _shortest(listed: tuple[str, ...], preset: tuple[str, ...]) -> tuple[str, ...]:
    """The shortest user order that expands to ``listed`` (the rest in the preset's order)."""
    for k in range(len(listed) + 1):
        head = listed[:k]
        if head + tuple(n for n in preset if n not in head) == listed:
            return head
    return listed


class AdvancedGroup(QWidget):
    """Emits ``changed`` when a field or the stage order changes, ``order_chosen`` with the
    order (``ORDER_TEMPERATURE_*``) when a library's order button is clicked. The body is
    hidden until ``toggle`` opens it."""

    changed = Signal()
    order_chosen = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.toggle = self._toggle_button()
        self.body = QWidget()
        form = QFormLayout(self.body)
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        self.numbers: dict[str, QSpinBox | QDoubleSpinBox] = {}
        for knob in NUMBERS:
            self.numbers[knob.field] = box = number_field(knob, knob.field)
            box.valueChanged.connect(self.changed)
            form.addRow(knob.label, box)
        self.mirostat = ElidedCombo()
        self.mirostat.setObjectName("mirostat")
        for text, value in MIROSTAT_VERSIONS:
            self.mirostat.addItem(text, value)
        self.mirostat.setToolTip(tooltip("mirostat"))
        self.mirostat.currentIndexChanged.connect(self.changed)
        form.addRow("Mirostat", self.mirostat)
        self.texts: dict[str, QLineEdit] = {}
        self.text_values: dict[str, Any] = {}  # the last valid value of each text field
        for spec in TEXT_FIELDS:
            self.texts[spec.field] = edit = self._text_field(spec)
            form.addRow(spec.label, edit)
        self._stage_rows(form)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.addWidget(self.toggle)
        outer.addWidget(self.body)
        self.body.setVisible(False)
        self.toggle.toggled.connect(self._open)

    def _toggle_button(self) -> QToolButton:
        button = QToolButton()
        button.setObjectName("advanced")
        button.setText("Advanced")
        button.setCheckable(True)
        button.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        button.setArrowType(Qt.ArrowType.RightArrow)
        button.setAutoRaise(True)
        button.setToolTip("Show every other stage of the chain and the order of the stages.")
        return button

    def _text_field(self, spec: TextField) -> QLineEdit:
        edit = QLineEdit()
        edit.setObjectName(spec.field)
        edit.setPlaceholderText(spec.hint)
        edit.setToolTip(tooltip(spec.field))
        edit.editingFinished.connect(lambda: self._text_edited(spec))
        return edit

    def _stage_rows(self, form: QFormLayout) -> None:
        self.stage_list = QListWidget()
        self.stage_list.setObjectName("stage_order")
        self.stage_list.setToolTip(tooltip("stage_order"))
        self.stage_list.setDragDropMode(QAbstractItemView.DragDropMode.InternalMove)
        self.stage_list.setMinimumHeight(120)
        self.stage_list.model().rowsMoved.connect(self.changed)
        buttons = QHBoxLayout()
        for name, text, tip, delta in (
            ("stage_up", "Up", "Move the selected stage earlier in the chain.", -1),
            ("stage_down", "Down", "Move the selected stage later in the chain.", 1),
        ):
            button = self._button(name, text, tip, buttons)
            button.clicked.connect(lambda _=False, d=delta: self.move_stage(d))
        for name, text, tip, order in ORDER_BUTTONS:
            button = self._button(name, text, tip, buttons)
            button.clicked.connect(lambda _=False, o=order: self.order_chosen.emit(o))
        form.addRow(QLabel("Stage order (drag, or Up / Down)"))
        form.addRow(self.stage_list)
        form.addRow(buttons)

    @staticmethod
    def _button(name: str, text: str, tip: str, row: QHBoxLayout) -> QPushButton:
        button = QPushButton(text)
        button.setObjectName(name)
        button.setToolTip(tip)
        row.addWidget(button)
        return button

    @Slot(bool)
    def _open(self, on: bool) -> None:
        self.body.setVisible(on)
        self.toggle.setArrowType(Qt.ArrowType.DownArrow if on else Qt.ArrowType.RightArrow)

    # -- the stage order ----------------------------------------------------------------------

    def fill_stages(self, names: tuple[str, ...]) -> None:
        self.stage_list.clear()
        for name in names:
            item = QListWidgetItem(STAGE_TITLES.get(name, name))
            item.setData(Qt.ItemDataRole.UserRole, name)
            item.setToolTip(tooltip(name) or tooltip(name.split("_")[0]))
            self.stage_list.addItem(item)

    def listed_stages(self) -> tuple[str, ...]:
        items = (self.stage_list.item(i) for i in range(self.stage_list.count()))
        return tuple(item.data(Qt.ItemDataRole.UserRole) for item in items)

    def move_stage(self, delta: int) -> None:
        """Move the selected stage ``delta`` places (the Up / Down buttons)."""
        row = self.stage_list.currentRow()
        to = row + delta
        if row < 0 or not 0 <= to < self.stage_list.count():
            return
        item = self.stage_list.takeItem(row)
        self.stage_list.insertItem(to, item)
        self.stage_list.setCurrentRow(to)
        self.changed.emit()

    def _text_edited(self, spec: TextField) -> None:
        edit = self.texts[spec.field]
        try:
            value = spec.parse(edit.text())
            edit.setStyleSheet("")
        except (ValueError, TypeError):
            edit.setStyleSheet("color: #cf222e")  # kept the last valid value
            return
        if value != self.text_values[spec.field]:
            self.text_values[spec.field] = value
            self.changed.emit()

    # -- settings <-> widgets -----------------------------------------------------------------

    def values(self, order: str) -> dict[str, Any]:
        """The fields of ``SamplerSettings`` shown here; ``order`` is the preset order the
        stage list is stored against (only what differs from it is kept)."""
        numbers = {
            name: (int(w.value()) if isinstance(w, QSpinBox) else round(w.value(), 6))
            for name, w in self.numbers.items()
        }
        return {
            **numbers,
            "mirostat": self.mirostat.currentData(),
            **self.text_values,
            "stage_order": _shortest(self.listed_stages(), ORDER_OF[order]),
        }

    def show_values(self, s: SamplerSettings) -> None:
        for name, w in self.numbers.items():
            w.setValue(getattr(s, name))
        self.mirostat.setCurrentIndex(max(0, self.mirostat.findData(s.mirostat)))
        self.text_values = {spec.field: getattr(s, spec.field) for spec in TEXT_FIELDS}
        for spec in TEXT_FIELDS:
            self.texts[spec.field].setText(spec.show(self.text_values[spec.field]))
        self.fill_stages(stage_order(s))
