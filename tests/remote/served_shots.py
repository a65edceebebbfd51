"""Screenshots of the window on a served llama-server (run under a real X display, Xvfb +
openbox, as tests/gui/fit_probe.py): the capability line and the distribution bars in explore
mode (the server's raw top-N, then our sampler), with llama.cpp's own sampler beside ours, and
a stream (raw only), and the served model as B in lockstep with the bundled one here as A.
Starts its own llama-server on the bundled GGUF.
Usage: served_shots.py OUTDIR [THEME]. Prints one line per shot."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from experiment_shots import job, shoot
from fit_probe import wait
from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QApplication

from engine.models.catalog import _smollm2_path, served_source
from engine.records import SERVED_STREAM
from engine.serve.llama_server_run import start_llama_server
from engine.serve.vllm_server import bundled_hf_folder
from gui.shell.window import MainWindow

PROMPT = "Why is the sky blue? Answer in one sentence."


def open_served(app: QApplication, w: MainWindow, url: str, sampler: bool) -> None:
    options = {
        "tokenizer": str(bundled_hf_folder()),
        **({"server_sampler": "1"} if sampler else {}),
    }
    w.models.load_model(served_source(url, "", "none", "llama-server", options))

    def opened() -> bool:
        bundle = w.bundle
        return bundle is not None and getattr(bundle, "server_sampler", None) == sampler

    assert wait(app, lambda: opened() and not w.runner.busy, 120), "not opened"


def lockstep(app: QApplication, w: MainWindow, url: str) -> None:
    """The bundled SmolLM2 here as A, the served one as B (Experiments > Two models in
    lockstep…, B from the recents): B's KL is a lower bound, and the view says so."""
    source_b = w.picker.recents[0]  # the served model the window opened last
    w.models.load_model("smollm2-135m")
    assert wait(app, lambda: w.bundle is not None and not hasattr(w.bundle, "make_session")
                and not w.runner.busy, 300), "the local model did not load"  # fmt: skip
    w.prompt.setPlainText(PROMPT)
    w.sampler.set_settings(w.sampler.settings().with_(temperature=0.0, max_new_tokens=12))
    job(app, w, lambda: w.experiments.lockstep(source_b, 5))


def main() -> None:
    out = Path(sys.argv[1])
    theme = sys.argv[2] if len(sys.argv) > 2 else "light"
    out.mkdir(parents=True, exist_ok=True)
    server = start_llama_server(_smollm2_path())
    app = QApplication.instance() or QApplication(sys.argv[:1])
    tmp = Path(tempfile.mkdtemp())
    store = QSettings(str(tmp / "s.ini"), QSettings.Format.IniFormat)
    w = MainWindow(settings_store=store, autoload=False, autosave_path=tmp / "a.json")
    w.set_theme(theme)
    w.showMaximized()
    try:
        for sampler, name in ((False, "explore-raw"), (True, "explore-llama-sampler")):
            open_served(app, w, server.url, sampler)
            w.prompt.setPlainText(PROMPT)
            w.sampler.random_seed.setChecked(False)
            settings = w.sampler.settings().with_(temperature=0.8, top_k=10, top_p=0.9,
                                                  min_p=0.0, max_new_tokens=12, seed=3)  # fmt: skip
            w.sampler.set_settings(settings)
            job(app, w, w.generate)
            shoot(app, out / f"llama-server-{name}-{theme}.png")
        w.method.method.setCurrentIndex(w.method.method.findData(SERVED_STREAM))
        job(app, w, w.generate)
        shoot(app, out / f"llama-server-stream-raw-{theme}.png")
        lockstep(app, w, server.url)
        shoot(app, out / f"llama-server-lockstep-b-{theme}.png")
    finally:
        w.runner.shutdown()
        w.close()
        server.stop()


if __name__ == "__main__":
    main()
