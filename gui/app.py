"""Builds the QApplication and the main window."""

from __future__ import annotations

import sys

from PySide6.QtWidgets import QApplication

from gui.window import MainWindow


def make_app(argv: list[str] | None = None) -> QApplication:
    # The worker needs the GIL between its many small tensor ops; a shorter switch interval
    # stops long GUI paints from starving it (the default is 5 ms).
    sys.setswitchinterval(0.001)
    # Leave one core to the GUI thread: batch-1 decoding is bound by memory bandwidth, so
    # torch loses almost nothing (measured 23.2 -> 22.7 tok/s on 2 cores) and the window
    # stops competing with the model for the CPU.
    import os

    import torch

    torch.set_num_threads(max(1, (os.cpu_count() or 2) - 1))
    app = QApplication.instance()
    if not isinstance(app, QApplication):
        app = QApplication([sys.argv[0], *(argv or [])])
    app.setApplicationName("Decoding Lab")
    app.setOrganizationName("DecodingLab")
    from PySide6.QtGui import QIcon

    from engine.catalog import RESOURCES

    app.setWindowIcon(QIcon(str(RESOURCES / "icons" / "decoding-lab.png")))
    return app


def run_app(argv: list[str] | None = None) -> int:
    app = make_app(argv)
    window = MainWindow()
    window.show()
    return app.exec()
