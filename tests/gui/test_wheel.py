"""Issue 34, item 3: turning the mouse wheel over the sampler panel scrolls the panel; a
slider, spin box or combo box under the pointer changes only when it has the keyboard focus
(clicked or tabbed into), as in most desktop apps."""

from PySide6.QtCore import QPoint, QPointF, Qt
from PySide6.QtGui import QWheelEvent
from PySide6.QtWidgets import QApplication


def wheel(widget, notches: int = -3) -> None:
    """A real wheel turn over the middle of ``widget`` (negative: towards the user)."""
    centre = QPointF(widget.rect().center())
    event = QWheelEvent(
        centre, QPointF(widget.mapToGlobal(centre.toPoint())), QPoint(),
        QPoint(0, 120 * notches), Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier,
        Qt.ScrollPhase.NoScrollPhase, False,
    )  # fmt: skip
    QApplication.sendEvent(widget, event)


def test_the_wheel_scrolls_the_panel_and_changes_no_setting(qtbot, window):
    window.resize(1280, 720)
    column = window.left
    bar = column.verticalScrollBar()
    sampler = window.sampler
    sampler.advanced.setChecked(True)  # the Advanced group open: the column is taller
    qtbot.waitUntil(lambda: bar.maximum() > 0)
    window.setFocus()
    before = sampler.settings()
    method = window.method.current()
    controls = [sampler.order, sampler.max_new, sampler.rows["temperature"].slider,
                sampler.rows["top_p"].field, window.method.method]  # fmt: skip
    for control in controls:
        bar.setValue(0)
        assert not control.hasFocus()
        wheel(control)
        assert sampler.settings() == before, control.objectName()
        assert window.method.current() == method
        assert bar.value() > 0, f"{control.objectName()}: the panel did not scroll"


def test_a_control_with_the_focus_takes_the_wheel(qtbot, window):
    sampler = window.sampler
    box = sampler.max_new
    box.setFocus()
    qtbot.waitUntil(box.hasFocus)
    start = box.value()
    wheel(box, notches=2)
    assert box.value() == start + 2
