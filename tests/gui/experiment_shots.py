"""Screenshots of the Experiments tab in a real window (run under Xvfb + openbox, as
fit_probe.py): the histogram, a sweep, the variation and lockstep, in the normal and the
presentation view. Usage: experiment_shots.py MODEL OUTDIR [THEME]. Prints one line per shot."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from fit_probe import open_window, wait
from PySide6.QtWidgets import QApplication

from gui.shell.window import MainWindow


def shoot(app: QApplication, path: Path) -> None:
    wait(app, lambda: False, 0.8)
    subprocess.run(["import", "-window", "root", str(path)], check=False, timeout=30)
    print("SHOT", path, flush=True)


def job(app: QApplication, w: MainWindow, start) -> None:
    done: list[str] = []
    w.runner.job_done.connect(done.append)
    start()
    assert wait(app, lambda: bool(done) and not w.runner.busy, 600), "the job did not finish"
    w.runner.job_done.disconnect(done.append)
    wait(app, lambda: False, 0.3)


def main() -> None:
    model, out = sys.argv[1], Path(sys.argv[2])
    theme = sys.argv[3] if len(sys.argv) > 3 else "light"
    out.mkdir(parents=True, exist_ok=True)
    suffix = "" if theme == "light" else f"-{theme}"
    app, w = open_window(model, theme, 300)
    w.prompt.setPlainText("Once upon a time, there was a")
    w.prompt_box.chat_template.setChecked(False)
    w.sampler.random_seed.setChecked(False)
    w.sampler.set_settings(w.sampler.settings().with_(temperature=1.0, top_k=0, top_p=1.0,
                                                      max_new_tokens=20, seed=3))  # fmt: skip
    job(app, w, w.generate)
    t = w.plots.experiments
    job(app, w, lambda: w.experiments.sample(100))
    shoot(app, out / f"histogram-100-normal{suffix}.png")
    job(app, w, lambda: w.experiments.draw_more(10_000))
    job(app, w, lambda: w.experiments.draw_more(100_000))
    shoot(app, out / f"histogram-110100-normal{suffix}.png")
    job(app, w, lambda: w.experiments.sweep("temperature", [0.0, 0.5, 1.0, 1.5, 2.0]))
    shoot(app, out / f"sweep-normal{suffix}.png")
    w.tabs.setCurrentWidget(w.compare_view)
    shoot(app, out / f"sweep-compare-normal{suffix}.png")
    w.prompt.setPlainText("The capital of France is")  # a start with few likely paths
    w.sampler.set_settings(w.sampler.settings().with_(temperature=0.8, max_new_tokens=8))
    job(app, w, lambda: w.experiments.variation(20))
    shoot(app, out / f"variation-normal{suffix}.png")
    job(app, w, lambda: w.experiments.lockstep("same-bf16", 10))
    shoot(app, out / f"lockstep-normal{suffix}.png")
    w.set_presentation(True)
    w.tabs.setCurrentWidget(t)
    for page, name in ((t.histogram, "histogram"), (t.sweep, "sweep"),
                       (t.variation, "variation"), (t.lockstep, "lockstep")):  # fmt: skip
        t.setCurrentWidget(page)
        shoot(app, out / f"{name}-presentation{suffix}.png")
    w.runner.shutdown()
    w.close()


if __name__ == "__main__":
    main()
