"""The window on a real llama-server (offscreen; before test_llama_server.py's last test kills
the server): opened through File > Open served model's source string with the kind and
llama.cpp's own sampler, the capability line above the plot, three bars per candidate, and a
stream that draws the raw bars only. The screenshots at 1280x720 under Xvfb + openbox are
tests/remote/served_shots.py's."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytestmark = [pytest.mark.remote, pytest.mark.llama_server, pytest.mark.timeout(600)]
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

SHOT = Path(__file__).resolve().parents[1] / "artifacts" / "llama_server_window.png"


def test_window_shows_what_llama_server_returns(qtbot, tmp_path, llama_server, hf_folder):
    from PySide6.QtCore import QSettings

    from engine.models.catalog import served_source
    from engine.records import SERVED_STREAM
    from gui.shell.window import MainWindow

    store = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    window = MainWindow(settings_store=store, autoload=False, autosave_path=tmp_path / "a.json")
    qtbot.addWidget(window)
    window.resize(1280, 720)
    window.show()
    os.environ["DECODING_LAB_API_KEY"] = llama_server.api_key
    options = {"tokenizer": str(hf_folder), "server_sampler": "1"}
    try:
        with qtbot.waitSignal(window.runner.model_loaded, timeout=120000):
            window.load_model(served_source(llama_server.url, "", "env", "llama-server", options))
        qtbot.waitUntil(lambda: not window.runner.busy, timeout=5000)
        line = window.plots.dist_box.capability
        assert line.isVisible() and "llama-server · raw top-20 → our sampler + llama.cpp's" in (
            line.text()
        )
        assert "can't score texts" in line.text() and "stream reports raw" in line.toolTip()
        window.prompt.setPlainText("Why is the sky blue? Answer in one sentence.")
        settings = window.sampler.settings().with_(temperature=0.8, top_k=10, seed=3)

        def run(action) -> None:
            with qtbot.waitSignal(window.runner.job_done, timeout=300000):
                action()
            qtbot.waitUntil(lambda: not window.runner.busy, timeout=5000)
            window.drain()

        window.sampler.set_settings(settings)
        run(lambda: window.runner.generate(window._request(limit=10)))
        steps = window.steps
        assert len(steps) == 10 and all(s.server_sampler == "llama.cpp" for s in steps)
        for c in steps[-1].candidates:
            assert c.server_prob is not None and abs(c.server_prob - c.prob) < 1e-5
        window.views.redraw(busy=False)
        assert len(window.dist.server.opts["width"]) > 0
        assert "llama.cpp" in window.plots.dist_box.key.text()
        SHOT.parent.mkdir(exist_ok=True)
        window.grab().save(str(SHOT))
        window.method.set_current(SERVED_STREAM)
        run(lambda: window.runner.generate(window._request(limit=10)))
        assert all(not s.after_sampler for s in window.steps)
        window.views.redraw(busy=False)
        assert not window.dist.sampled and "sampler" not in window.plots.dist_box.key.text()
    finally:
        os.environ.pop("DECODING_LAB_API_KEY", None)
        window.runner.shutdown()
        window.close()
