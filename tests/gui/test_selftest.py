import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_self_test_from_the_source_tree(tmp_path):
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "HF_HUB_OFFLINE": "1"}
    out = subprocess.run(
        [sys.executable, str(ROOT / "main.py"), "--self-test", str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("self-test OK")
    assert "smollm2-135m 16 tokens" in out.stdout and "tiny-t5 16 tokens" in out.stdout
    assert (tmp_path / "self-test.png").stat().st_size > 20000
    for name in ("presentation.png", "normal-1280.png"):
        assert (tmp_path / name).stat().st_size > 20000 and name in out.stdout
    log = (tmp_path / "self-test.log").read_text()
    assert "all good" in log
    # what a teacher does first: the Inside tab reads a token, a web page, a lesson opens
    for name in ("inside.png", "lesson.png"):
        assert (tmp_path / name).stat().st_size > 20000 and name in out.stdout
    assert (tmp_path / "run.html").stat().st_size > 1000
    assert "Inside tab: read token" in log and "web page: run.html" in log and "lesson: " in log


def test_about_lists_versions_and_model_licences(qtbot, window):
    menus = [a.text() for a in window.menuBar().actions()]
    assert menus == ["&File", "&Edit", "&View", "&Lessons", "E&xperiments", "&Tree", "&Help"]
    help_menu = window.menuBar().actions()[-1].menu().actions()
    assert window.acts.about in help_menu and window.acts.shortcuts in help_menu
    text = window.about_text()
    assert "torch" in text and "transformers" in text and "Apache-2.0" in text
    assert "SmolLM2" in text and "Tiny T5" in text
