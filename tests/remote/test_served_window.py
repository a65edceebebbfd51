"""The window exploring the served model (before test_vllm.py, whose last test kills the
server): open it through the worker, generate, branch, and save a screenshot to look at."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# The first test also waits for the server to start (up to DECODING_LAB_VLLM_START_TIMEOUT).
pytestmark = [pytest.mark.remote, pytest.mark.timeout(1500)]
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

SHOT = Path(__file__).resolve().parents[1] / "artifacts" / "served_window.png"


def test_window_explores_the_served_model(qtbot, tmp_path, vllm_server, hf_folder):
    from PySide6.QtCore import QSettings

    from engine.records import Step
    from engine.serve.remote_session import RemoteBundle
    from gui.shell.window import MainWindow

    store = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    window = MainWindow(settings_store=store, autoload=False, autosave_path=tmp_path / "a.json")
    qtbot.addWidget(window)
    window.resize(1400, 900)
    window.show()
    try:
        with qtbot.waitSignal(window.runner.model_loaded, timeout=120000):
            window.runner.open_served(vllm_server.url, str(hf_folder), api_key=vllm_server.api_key)
        qtbot.waitUntil(lambda: not window.runner.busy, timeout=5000)
        assert isinstance(window.bundle, RemoteBundle)
        window.prompt.setPlainText("Why is the sky blue? Answer in one sentence.")

        def run(action) -> None:
            with qtbot.waitSignal(window.runner.job_done, timeout=300000):
                action()
            qtbot.waitUntil(lambda: not window.runner.busy, timeout=5000)
            window.drain()

        run(lambda: window.runner.generate(window._request(limit=20)))
        steps = window.steps
        assert len(steps) == 20 and all(isinstance(s, Step) for s in steps)
        assert all(s.other_p is not None and s.entropy_lower_bound for s in steps)
        alt = steps[6].candidates[1].token_id
        settings = window.sampler.settings()
        run(lambda: window.runner.branch(6, alt, settings, 8))
        assert window.steps[6].token_id == alt and window.steps[6].forced
        assert [s.token_id for s in window.steps[:6]] == [s.token_id for s in steps[:6]]
        SHOT.parent.mkdir(exist_ok=True)
        window.grab().save(str(SHOT))
        print(f"\n[screenshot: {SHOT}]")
    finally:
        window.runner.shutdown()
        window.close()
