"""Screenshots of Inside the step in a real window (run under Xvfb + openbox, as fit_probe.py),
through the stages of lesson 13 on SmolLM2: the decision colours on a story, the lens for an
early and a late token, a head's attention from a pronoun, the logit attribution of ' Paris', the
input attribution, and the presentation view. Usage: inside_shots.py OUTDIR. One line per shot."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from experiment_shots import job
from fit_probe import open_window, wait
from PySide6.QtWidgets import QApplication

from engine.classroom.lessons import load_lesson
from engine.models.catalog import RESOURCES
from gui.shell.window import MainWindow

LESSON = RESOURCES / "lessons" / "13-where-does-the-model-decide.yaml"


def shoot(app: QApplication, path: Path) -> None:
    wait(app, lambda: False, 1.0)
    subprocess.run(["import", "-window", "root", str(path)], check=False, timeout=30)
    print("SHOT", path, flush=True)


def stage(app: QApplication, w: MainWindow, i: int) -> None:
    w.classroom.panel.go_to(i)
    assert wait(app, lambda: not w.runner.busy, 120)
    job(app, w, w.generate)
    want = w.classroom.stage.options.get("inside_step")
    w.tabs.setCurrentWidget(w.inside.view)
    assert wait(app, lambda: not w.runner.busy and w.inside.shown is not None
                and (want is None or len(w.inside.shown[-1]) == want), 120)  # fmt: skip
    wait(app, lambda: not w.runner.busy and bool(w.pane.decisions)
         or w.pane.mode != "decision", 60)  # fmt: skip


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    app, w = open_window("smollm2-135m", "light", 180)
    w.classroom.open_lesson(load_lesson(LESSON))
    w.classroom.lesson_dock.hide()  # the shots show the window's own parts
    stage(app, w, 0)
    shoot(app, out / "inside-strip-story.png")
    stage(app, w, 1)
    shoot(app, out / "inside-lens-early.png")
    stage(app, w, 2)
    shoot(app, out / "inside-lens-late.png")
    stage(app, w, 3)
    shoot(app, out / "inside-attention-pronoun.png")
    w.inside.view.attention.view.setCurrentIndex(0)  # rollout
    shoot(app, out / "inside-attention-rollout.png")
    stage(app, w, 4)
    shoot(app, out / "inside-dla.png")
    w.inside.view.pages.setCurrentIndex(3)
    job(app, w, w.inside.view.inputs.button.click)
    shoot(app, out / "inside-inputs.png")
    w.inside.view.pages.setCurrentIndex(0)
    w.set_presentation(True)
    shoot(app, out / "inside-presentation-lens.png")
    w.inside.view.pages.setCurrentIndex(2)
    shoot(app, out / "inside-presentation-dla.png")
    w.runner.shutdown()
    w.close()


if __name__ == "__main__":
    main()
