import os
import threading

import pytest
from PySide6.QtCore import QSettings, QThread
from transformers import ByT5Tokenizer

from gui.window import MainWindow
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
def window(qtbot, store):
    before = threading.active_count()
    w = MainWindow(store=store, autoload=False)
    qtbot.addWidget(w)
    w.show()
    yield w
    w.close()
    # No test may leave a worker thread running.
    assert not w.runner.thread_running()
    qtbot.waitUntil(lambda: threading.active_count() <= before + 1, timeout=5000)


def load(qtbot, window, path, timeout=60000):
    with qtbot.waitSignal(window.runner.model_loaded, timeout=timeout):
        window.load_model(str(path))
    qtbot.waitUntil(lambda: not window.runner.busy, timeout=5000)


def run(qtbot, window, action, timeout=60000):
    with qtbot.waitSignal(window.runner.run_finished, timeout=timeout):
        action()
    qtbot.waitUntil(lambda: not window.runner.busy, timeout=5000)
    window.drain()


__all__ = ["QThread", "load", "run"]
