"""The presentation view's sampler: one strip of big sliders (temperature, top-k, top-p, min-p)
that mirrors the sampler panel both ways, so the class sees the knob the teacher moves; and
under it, across the window, the prompt on one line (the editor is hidden there: the class
would read a story with no beginning), cut at its start when long."""

from __future__ import annotations

from PySide6.QtCore import Qt, Slot
from PySide6.QtWidgets import QHBoxLayout, QLabel, QVBoxLayout, QWidget

from engine.sampling.settings import SamplerSettings
from gui.common.fitting import ElidedLabel
from gui.controls.sampler_panel import KNOBS, KnobRow, SamplerPanel

STRIP_FIELDS = ("temperature", "top_k", "top_p", "min_p")


class PresenterStrip(QWidget):
    """Big sliders for the fields in ``STRIP_FIELDS``; the sampler panel stays the one source
    of settings (the strip writes into it and redraws from its ``settings_changed``)."""

    def __init__(self, sampler: SamplerPanel, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("presenter_strip")
        self.sampler = sampler
        self.rows: dict[str, KnobRow] = {}
        self.prompt_line = ElidedLabel(mode=Qt.TextElideMode.ElideLeft, prefix="Prompt: ")
        self.prompt_line.setObjectName("presentation_prompt")
        column = QVBoxLayout(self)
        column.setContentsMargins(8, 4, 8, 4)
        column.setSpacing(2)
        layout = QHBoxLayout()
        layout.setSpacing(12)
        column.addLayout(layout)
        column.addWidget(self.prompt_line)
        for knob in KNOBS:
            if knob.field not in STRIP_FIELDS:
                continue
            row = KnobRow(knob)
            row.setObjectName(f"strip_{knob.field}")
            row.slider.setMinimumWidth(50)
            row.field.setMinimumWidth(0)
            box = QVBoxLayout()
            box.setSpacing(0)
            title = QLabel(knob.label)
            title.setAlignment(Qt.AlignmentFlag.AlignLeft)
            box.addWidget(title)
            box.addWidget(row)
            layout.addLayout(box, 1)
            self.rows[knob.field] = row
            row.changed.connect(lambda f=knob.field: self._moved(f))
        sampler.settings_changed.connect(self.show_settings)
        self.show_settings(sampler.settings())

    @Slot(object)
    def show_settings(self, settings: SamplerSettings) -> None:
        for name, row in self.rows.items():
            value = getattr(settings, name)
            if abs(row.value() - value) > 1e-9:
                row.blockSignals(True)
                row.set_value(value)
                row.blockSignals(False)

    def _moved(self, name: str) -> None:
        value = self.rows[name].value()
        current = self.sampler.settings()
        if abs(getattr(current, name) - value) > 1e-9:
            self.sampler.set_settings(current.with_(**{name: value}))
