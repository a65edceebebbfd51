"""The Qt binding must not leak references to None/True/False: on Python 3.11 such a leak
aborts the app after a few thousand calls (PySide6-Essentials 6.12.0 did, hence the pin)."""

import sys

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QLabel


class Emitter(QObject):
    happened = Signal(int)


def test_void_calls_and_signals_keep_singleton_refcounts(qtbot):
    label = QLabel()
    emitter = Emitter()
    label.setText("warm-up")
    emitter.happened.emit(0)
    before = (sys.getrefcount(None), sys.getrefcount(True), sys.getrefcount(False))
    for i in range(200):
        label.setText(str(i))
        emitter.happened.emit(i)  # no receivers
    after = (sys.getrefcount(None), sys.getrefcount(True), sys.getrefcount(False))
    # other code may move these by a few; a leak moves them by hundreds
    assert all(abs(a - b) < 50 for a, b in zip(after, before, strict=True)), (before, after)
