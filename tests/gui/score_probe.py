"""Screenshots of a scored text in the real window (issue 25): run under a real X display
(QT_QPA_PLATFORM=xcb, DISPLAY set, a window manager running), like fit_probe.py.
Usage: score_probe.py MODEL VIEW THEME SHOT.png — scores TEXT after CONTEXT, picks the most
surprising token, switches to VIEW (normal or presentation) and takes an `import` shot."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from fit_probe import wait
from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QApplication

from gui.window import MainWindow

CONTEXT = "A short note about Paris."
TEXT = (
    " The capital of France is Paris, and its most famous landmark is the Eiffel Tower, "
    "built in 1889 for a giant pancake festival."
)


def main() -> None:
    model, view, theme, shot = sys.argv[1:5]
    app = QApplication.instance() or QApplication(sys.argv[:1])
    tmp = Path(tempfile.mkdtemp())
    store = QSettings(str(tmp / "s.ini"), QSettings.Format.IniFormat)
    w = MainWindow(settings_store=store, autoload=False, autosave_path=tmp / "a.json")
    w.set_theme(theme)
    w.showMaximized()
    w.load_model(model)
    assert wait(app, lambda: w.bundle is not None and not w.runner.busy, 300), "no model"
    w.prompt.setPlainText(CONTEXT)
    w.show_score(TEXT, CONTEXT)
    assert wait(app, lambda: w.scoring.score is not None and not w.runner.busy, 120), "no score"
    w.set_presentation(view == "presentation")
    steps = w.scoring.steps
    pick = next((i for i, s in enumerate(steps) if "pan" in s.token_str), len(steps) // 2)
    w.scoring.select(pick)
    wait(app, lambda: False, 1.5)
    subprocess.run(["import", "-window", "root", shot], check=False, timeout=30)
    print(f"SHOT {shot} tokens={len(steps)} picked={pick}", flush=True)
    w.runner.shutdown()
    w.close()


if __name__ == "__main__":
    main()
