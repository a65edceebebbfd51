import os

import pytest
from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QApplication
from transformers import ByT5Tokenizer

from gui.shell.window import MainWindow
from tiny_models import tiny_llama, tiny_t5

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("models") / "tiny-llama"
    tiny_llama().save_pretrained(path)
    ByT5Tokenizer().save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def tiny_t5_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("models") / "tiny-t5"
    tiny_t5().save_pretrained(path)
    ByT5Tokenizer().save_pretrained(path)
    return path


@pytest.fixture
def store(tmp_path):
    return QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)


@pytest.fixture
def autosave(tmp_path):
    return tmp_path / "autosave.json"


@pytest.fixture(autouse=True)
def no_thread_left_running():
    """Fails any test that leaves an engine job's thread running."""
    yield
    from gui.core.worker import EngineRunner

    running = [r for r in list(EngineRunner.instances) if r.thread_running()]
    for r in running:
        r.shutdown()
    assert not running, "a test left a worker thread running"


@pytest.fixture
def window(qtbot, store, autosave):
    font = QApplication.font()  # the window sets the application's font (its text size)
    w = MainWindow(settings_store=store, autoload=False, autosave_path=autosave)
    qtbot.addWidget(w)
    w.show()
    yield w
    w.close()
    QApplication.setFont(font)  # a test that presented leaves no 20 pt text to the next
    # No test may leave a worker thread running (no_thread_left_running checks every runner).
    assert not w.runner.thread_running()


def load(qtbot, window, path, timeout=60000):
    with qtbot.waitSignal(window.runner.model_loaded, timeout=timeout):
        window.load_model(str(path))
    qtbot.waitUntil(lambda: not window.runner.busy, timeout=5000)


def run(qtbot, window, action, timeout=60000):
    """Start a job with ``action()`` and wait until it succeeded and its records are drawn."""
    with qtbot.waitSignal(window.runner.job_done, timeout=timeout):
        action()
    qtbot.waitUntil(lambda: not window.runner.busy, timeout=5000)
    window.drain()


__all__ = ["load", "run"]
