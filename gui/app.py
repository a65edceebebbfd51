"""Builds the QApplication and the main window."""

from __future__ import annotations

import sys

from PySide6.QtWidgets import QApplication

from gui.window import MainWindow


def make_app(argv: list[str] | None = None) -> QApplication:
    app = QApplication.instance()
    if not isinstance(app, QApplication):
        app = QApplication([sys.argv[0], *(argv or [])])
    app.setApplicationName("Decoding Lab")
    app.setOrganizationName("DecodingLab")
    return app


def run_app(argv: list[str] | None = None) -> int:
    app = make_app(argv)
    window = MainWindow()
    window.show()
    return app.exec()
