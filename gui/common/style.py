"""Fusion, with check boxes and sliders that read on both themes: their marks at least 3:1
against the window (WCAG 2.1 non-text contrast). Fusion draws a check box's frame and a
slider's groove from the window colour made darker: black on dark grey on the dark theme,
about 2:1 on the light one. (A style sheet would do it too, but an application style sheet
stops QApplication.setFont from reaching the widgets, and the zoom relies on it.)"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QPainter, QPen
from PySide6.QtWidgets import QProxyStyle, QStyle, QStyleFactory, QStyleOption, QWidget

# a check box's frame and a slider's groove, per theme: >= 3:1 against its window colour
MARKS = {"light": ("#6b6b76", "#7a7a85"), "dark": ("#a4a4b0", "#8c8c99")}


class MarkedStyle(QProxyStyle):
    def __init__(self) -> None:
        super().__init__(QStyleFactory.create("Fusion"))
        self.theme: Any = None  # gui.common.theme.Theme (set by apply_palette)

    def _colours(self) -> tuple[QColor, QColor, QColor, QColor]:
        t = self.theme
        box, groove = MARKS.get(t.name if t else "light", MARKS["light"])
        accent, base = (t.accent, t.base) if t else ("#0072b2", "#ffffff")
        return QColor(box), QColor(groove), QColor(accent), QColor(base)

    def drawPrimitive(  # noqa: N802 - Qt's name
        self, element: QStyle.PrimitiveElement, option: QStyleOption, painter: QPainter,
        widget: QWidget | None = None,
    ) -> None:  # fmt: skip
        if element != QStyle.PrimitiveElement.PE_IndicatorCheckBox:
            super().drawPrimitive(element, option, painter, widget)
            return
        box, _groove, accent, base = self._colours()
        state = option.state
        on = bool(state & QStyle.StateFlag.State_On)
        enabled = bool(state & QStyle.StateFlag.State_Enabled)
        rect = QRectF(option.rect).adjusted(1.5, 1.5, -1.5, -1.5)
        painter.save()
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        frame = accent if on else box
        if not enabled:
            frame.setAlpha(110)
        painter.setPen(QPen(frame, 2))
        painter.setBrush(accent if on and enabled else base)
        painter.drawRoundedRect(rect, 3, 3)
        if on:  # a tick in the base colour on the accent
            painter.setPen(QPen(base, 2))
            w, h, x, y = rect.width(), rect.height(), rect.x(), rect.y()
            painter.drawPolyline([QPointF(x + w * 0.22, y + h * 0.52),
                                  QPointF(x + w * 0.42, y + h * 0.72),
                                  QPointF(x + w * 0.78, y + h * 0.3)])  # fmt: skip
        painter.restore()

    def drawComplexControl(  # noqa: N802 - Qt's name
        self, control: QStyle.ComplexControl, option: Any, painter: QPainter,
        widget: QWidget | None = None,
    ) -> None:  # fmt: skip
        horizontal = getattr(option, "orientation", None) == Qt.Orientation.Horizontal
        if control != QStyle.ComplexControl.CC_Slider or not horizontal:
            super().drawComplexControl(control, option, painter, widget)
            return
        box, groove, accent, base = self._colours()
        sc = QStyle.SubControl
        groove_rect = self.subControlRect(control, option, sc.SC_SliderGroove, widget)
        handle = self.subControlRect(control, option, sc.SC_SliderHandle, widget)
        painter.save()
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        track = QRectF(groove_rect.x(), groove_rect.center().y() - 3, groove_rect.width(), 6)
        painter.setPen(Qt.PenStyle.NoPen)
        painter.setBrush(groove)
        painter.drawRoundedRect(track, 3, 3)
        done = QRectF(track.x(), track.y(), handle.center().x() - track.x(), track.height())
        painter.setBrush(accent)
        painter.drawRoundedRect(done, 3, 3)
        knob = QRectF(handle).adjusted(1, 1, -1, -1)
        side = min(knob.width(), knob.height())
        knob = QRectF(knob.center().x() - side / 2, knob.center().y() - side / 2, side, side)
        focused = bool(option.state & QStyle.StateFlag.State_HasFocus)
        painter.setPen(QPen(accent if focused else box, 2))
        painter.setBrush(base)
        painter.drawEllipse(knob.adjusted(1, 1, -1, -1))
        painter.restore()
