"""Screenshots of the run tree in a real window (QT_QPA_PLATFORM=xcb, DISPLAY set, a window
manager running, as tests/gui/fit_probe.py): a 3x3 expansion in the Tree tab, and fork
navigation. Usage: tree_probe.py MODEL VIEW SCENE SHOT (VIEW: normal or presentation; SCENE:
expand or fork). Prints "SHOT <path>" when the picture was taken."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QApplication

from engine.tree.options import ExpandOptions
from gui.window import MainWindow


def wait(app: QApplication, until, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        app.processEvents()
        if until():
            return True
        time.sleep(0.01)
    return until()


def job(app: QApplication, w: MainWindow, start) -> None:
    start()
    wait(app, lambda: not w.runner.busy, 300)
    w.drain()
    wait(app, lambda: False, 0.3)


def main() -> int:
    model, view, scene, shot = sys.argv[1:5]
    app = QApplication.instance() or QApplication([])
    folder = Path(tempfile.mkdtemp())
    w = MainWindow(QSettings(str(folder / "s.ini"), QSettings.Format.IniFormat),
                   autoload=False, autosave_path=folder / "a.json")  # fmt: skip
    w.showMaximized()
    w.load_model(model)
    wait(app, lambda: w.bundle is not None and not w.runner.busy, 300)
    w.prompt_box.chat_template.setChecked(False)
    w.set_presentation(view == "presentation")
    if scene == "expand":
        w.prompt.setPlainText("The best thing about living by the sea is")
        job(app, w, lambda: w.tree.expand(ExpandOptions(depth=3, max_children=3)))
        tree = w.store.tree
        leaf = max(tree.leaves(), key=lambda n: tree.nodes[n].path_logprob)
        w.tree.goto(leaf)  # the likeliest leaf: its path in the output
        w.tabs.setCurrentWidget(w.plots.tree_view)
    else:
        w.prompt.setPlainText("Once upon a time, in a small village by the sea,")
        w.sampler.set_settings(w.sampler.settings().with_(temperature=0.9, seed=7,
                                                          max_new_tokens=40))  # fmt: skip
        job(app, w, w.generate)
        w.tree.set_thresholds(0.3, 4.0)
        w.tree.fork(True)
        w.tree.fork(True)
        w.tabs.setCurrentIndex(0)  # the Distribution of the fork's step
    wait(app, lambda: False, 1.0)
    subprocess.run(["import", "-window", "root", shot], check=False, timeout=30)
    print("SHOT", shot, "|", w.status_text.text(), flush=True)
    w.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
