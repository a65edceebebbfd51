"""Issue 24, item 8 (and the settings file as a file the app reads): a hand-edited or damaged
settings file never stops the window, and a broken "last model" gets a message."""

import pytest

from engine.validate import settings as check
from gui.shell.window import MainWindow

HOSTILE = [
    ("window/zoom", "abc"),
    ("window/top_n", "99999999999999999999"),
    ("window/theme", ["a", "list"]),
    ("window/color_mode", 12),
    ("models/recents", "[" * 100_000),
    ("models/recents", '{"not": "a list"}'),
    ("prompt/text", 42),
    ("sampler/settings", "[" * 100_000),
    ("sampler/user_presets", "[1, 2]"),
    ("sampler/user_presets", '{"mine": [1, 2]}'),
]


@pytest.mark.parametrize(("key", "value"), HOSTILE)
def test_hostile_settings_values_fall_back_to_defaults(qtbot, store, autosave, key, value):
    store.setValue("version", 1)
    store.setValue(key, value)
    store.sync()
    w = MainWindow(settings_store=store, autoload=False, autosave_path=autosave)
    qtbot.addWidget(w)
    assert w.plots.dist_box.top_n.value() == 20 or key != "window/top_n"
    assert isinstance(w.picker.recents, list)
    w.close()


def test_a_broken_last_model_gets_a_message(qtbot, store, autosave):
    store.setValue("models/last", "/no/such/model/anywhere")
    store.sync()
    w = MainWindow(settings_store=store, autoload=True, autosave_path=autosave)
    qtbot.addWidget(w)
    qtbot.waitUntil(lambda: w.last_error is not None, timeout=30_000)
    assert w.bundle is None and "/no/such/model/anywhere" in w.last_error + w.status_text.text()
    qtbot.waitUntil(lambda: not w.runner.busy, timeout=10_000)
    w.close()


def test_setting_readers_keep_inside_their_bounds():
    assert check.whole("12", 5, 1, 20) == 12 and check.whole("99", 5, 1, 20) == 5
    assert check.whole(None, 5, 1, 20) == 5 and check.whole(10**30, 5, 1, 20) == 5
    assert check.text(3, "d") == "d" and check.text("dark", "d", ("dark",)) == "dark"
    assert check.text_list('["a", 3, "b"]', 5) == ["a", "b"] and check.text_list("[[[", 5) == []
