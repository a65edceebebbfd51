"""Issue 24, item 5: a password written in a server address never reaches the status line,
an error message, the settings or the autosave."""

from engine.models.catalog import served_source
from gui.shell.window import MainWindow

SECRET = "hunter2-secret-pw"


def test_credentials_in_a_served_address_are_refused_and_kept_nowhere(
    qtbot, store, autosave, tmp_path
):
    w = MainWindow(settings_store=store, autoload=False, autosave_path=autosave)
    qtbot.addWidget(w)
    w.load_model(served_source(f"http://student:{SECRET}@127.0.0.1:9", "m", "none"))
    assert "user name or password" in (w.last_error or "")
    assert SECRET not in (w.last_error or "") and SECRET not in w.status_text.text()
    assert SECRET not in " ".join(w.picker.recents)
    w.prompt.setPlainText("something to autosave")
    w.close()
    store.sync()
    assert SECRET not in autosave.read_text()
    assert SECRET not in (tmp_path / "settings.ini").read_text()
