"""Builds the QApplication and the main window."""

from __future__ import annotations

import sys

from PySide6.QtWidgets import QApplication

from gui.core.runtime import set_switch_interval
from gui.shell.window import MainWindow


def make_app(argv: list[str] | None = None) -> QApplication:
    set_switch_interval()
    app = QApplication.instance()
    if not isinstance(app, QApplication):
        app = QApplication([sys.argv[0], *(argv or [])])
    app.setApplicationName("Decoding Lab")
    app.setOrganizationName("DecodingLab")
    from PySide6.QtGui import QIcon

    from engine.models.catalog import RESOURCES

    app.setWindowIcon(QIcon(str(RESOURCES / "icons" / "decoding-lab.png")))
    return app


def run_app(argv: list[str] | None = None) -> int:
    argv = list(argv or [])
    present = "--presentation" in argv
    app = make_app([a for a in argv if a != "--presentation"])
    window = MainWindow()
    window.show()
    if present:
        window.set_presentation(True)
    return app.exec()
