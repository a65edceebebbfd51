"""Screenshots of the multiverse views in a real window (run under Xvfb + openbox, as
fit_probe.py): a 3x3 expansion in the Tree tab, fork navigation along a sampled run, and a
scored text, each in the normal and the presentation view. Usage: multiverse_shots.py MODEL
OUTDIR [THEME]. Prints one line per shot."""

from __future__ import annotations

import sys
from pathlib import Path

from experiment_shots import job, shoot
from fit_probe import open_window, wait
from PySide6.QtWidgets import QApplication

from engine.tree.options import ExpandOptions
from gui.shell.window import MainWindow

SCORED = (
    "The capital of France is Paris, and its most famous landmark is the Eiffel Tower, "
    "built in 1889 for a giant pancake festival."
)


def both_views(app: QApplication, w: MainWindow, path: Path) -> None:
    shoot(app, path.with_name(path.name.replace("VIEW", "normal")))
    w.set_presentation(True)
    shoot(app, path.with_name(path.name.replace("VIEW", "presentation")))
    w.set_presentation(False)


def main() -> None:
    model, out = sys.argv[1], Path(sys.argv[2])
    theme = sys.argv[3] if len(sys.argv) > 3 else "light"
    out.mkdir(parents=True, exist_ok=True)
    app, w = open_window(model, theme, 300)
    w.prompt.setPlainText("The best thing about living by the sea is")
    w.prompt_box.chat_template.setChecked(False)
    w.sampler.random_seed.setChecked(False)
    w.tabs.setCurrentWidget(w.plots.tree_view)
    job(app, w, lambda: w.tree.expand(ExpandOptions(depth=3, max_children=3)))
    both_views(app, w, out / f"expand-VIEW-{theme}.png")
    w.sampler.set_settings(w.sampler.settings().with_(temperature=1.0, top_k=0, top_p=1.0,
                                                      max_new_tokens=24, seed=5))  # fmt: skip
    w.clear_output()
    job(app, w, w.generate)
    w.tree.fork(True)
    w.tree.fork(True)
    wait(app, lambda: False, 0.3)
    both_views(app, w, out / f"fork-VIEW-{theme}.png")
    w.score.show(SCORED)
    assert wait(app, lambda: not w.runner.busy and w.score.view.isVisible(), 300), "no score"
    w.score.select(28)
    both_views(app, w, out / f"score-VIEW-{theme}.png")
    w.runner.shutdown()
    w.close()


if __name__ == "__main__":
    main()
