"""Every check box's indicator and every slider's groove at least 3:1 against the window, on
the rendered pixels, in both themes (WCAG 2.1 non-text contrast). On the dark theme Fusion drew
"Use the chat template" and "random" black on dark grey and the grooves of temperature, top-k
and min-p not at all; on the light one the boxes were about 2:1."""

from __future__ import annotations

import pytest
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QCheckBox,
    QSlider,
    QStyle,
    QStyleOptionButton,
    QStyleOptionSlider,
)

from gui.common.theme import THEMES


def luminance(c: QColor) -> float:
    def channel(v: int) -> float:
        s = v / 255
        return s / 12.92 if s <= 0.03928 else ((s + 0.055) / 1.055) ** 2.4

    return 0.2126 * channel(c.red()) + 0.7152 * channel(c.green()) + 0.0722 * channel(c.blue())


def contrast(a: QColor, b: QColor) -> float:
    hi, lo = sorted((luminance(a), luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def best_contrast(widget, rect, background: QColor, row: int | None = None) -> float:
    image = widget.grab().toImage()
    ys = [row] if row is not None else range(rect.top(), rect.bottom() + 1)
    return max(
        contrast(QColor(image.pixel(x, y)), background)
        for y in ys
        for x in range(max(0, rect.left()), min(image.width(), rect.right() + 1))
    )


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_check_boxes_and_slider_grooves_read_against_the_window(qtbot, window, theme):
    window.set_theme(theme)
    qtbot.wait(20)
    background = QColor(THEMES[theme].window)
    boxes = [b for b in window.findChildren(QCheckBox) if b.isVisible()]
    sliders = [s for s in window.findChildren(QSlider) if s.isVisible()]
    names = {b.text() for b in boxes}
    assert {"Use the chat template", "random"} <= names, names
    assert len(sliders) >= 4
    low = {}
    for box in boxes:
        opt = QStyleOptionButton()
        opt.initFrom(box)
        rect = box.style().subElementRect(QStyle.SubElement.SE_CheckBoxIndicator, opt, box)
        if (c := best_contrast(box, rect, background)) < 3.0:
            low[box.text()] = round(c, 2)
    for slider in sliders:
        slider.setValue(slider.minimum())  # the handle at the left: the groove's right part
        opt = QStyleOptionSlider()
        slider.initStyleOption(opt)
        groove = slider.style().subControlRect(
            QStyle.ComplexControl.CC_Slider, opt, QStyle.SubControl.SC_SliderGroove, slider
        )
        right = groove.adjusted(groove.width() * 3 // 5, 0, 0, 0)
        if (c := best_contrast(slider, right, background, groove.center().y())) < 3.0:
            low[slider.objectName() or str(slider.parent().objectName())] = round(c, 2)
    assert not low, f"below 3:1 against the window on the {theme} theme: {low}"
