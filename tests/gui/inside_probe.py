"""Run under a real X display (QT_QPA_PLATFORM=xcb, DISPLAY set): the real window, maximised
under the window manager, with the Inside tab (issue 33) driven as a user would: a run, the tab
opened by a click on its tab, a token clicked in the output, each page looked at in the normal
and the presentation view, a scored text, then the window closed and opened again on its
autosave. Prints one JSON line of what test_inside_window checks.
Usage: inside_probe.py MODEL [SHOTS_FOLDER]."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from fit_probe import clipped, outside, wait
from PySide6.QtCore import QPoint, QSettings, Qt
from PySide6.QtGui import QTextCursor
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication, QWidget

from gui.shell.window import MainWindow

PAGES = ("Lens", "Attention", "Logit attribution", "Inputs")


def window(app: QApplication, folder: Path, model: str) -> MainWindow:
    store = QSettings(str(folder / "s.ini"), QSettings.Format.IniFormat)
    w = MainWindow(settings_store=store, autoload=False, autosave_path=folder / "a.json")
    w.showMaximized()
    w.load_model(model)
    assert wait(app, lambda: w.bundle is not None and not w.runner.busy, 180), "no model"
    return w


def idle(app: QApplication, w: MainWindow, seconds: float = 60) -> None:
    """Until the tab has shown what is in view and no job runs."""
    wait(app, lambda: False, 0.5)  # the tab's poll asks for the step
    assert wait(app, lambda: not w.runner.busy and w.inside.shown is not None, seconds), "busy"
    wait(app, lambda: False, 0.3)


def click_tab(w: MainWindow, widget: QWidget) -> None:
    bar = w.tabs.tabBar()
    rect = bar.tabRect(w.tabs.indexOf(widget))
    QTest.mouseClick(bar, Qt.MouseButton.LeftButton, pos=rect.center())


def click_token(w: MainWindow, index: int) -> None:
    """A real click on token ``index`` of the output pane."""
    pane = w.pane
    cursor = QTextCursor(pane.document())
    start, end = pane._spans[index]
    cursor.setPosition((start + end) // 2)
    rect = pane.cursorRect(cursor)
    QTest.mouseClick(pane.viewport(), Qt.MouseButton.LeftButton,
                     pos=QPoint(rect.center().x(), rect.center().y()))  # fmt: skip


def look(app: QApplication, w: MainWindow, shots: Path | None, name: str) -> dict[str, list]:
    """Each page shown in turn: what is clipped or outside the window, inside the tab."""
    view = w.inside.view
    found: dict[str, list] = {"clipped": [], "outside": []}
    for i, page in enumerate(PAGES):
        view.pages.setCurrentIndex(i)
        wait(app, lambda: False, 0.4)
        found["clipped"] += [f"{page}: {c}" for c in clipped(view)]  # the tab's own widgets
        found["outside"] += [f"{page}: {o}" for o in outside(w)]
        if shots is not None:
            w.grab().save(str(shots / f"{name}-{page.split()[0].lower()}.png"))
    view.pages.setCurrentIndex(0)
    return found


def main() -> None:
    model = sys.argv[1]
    shots = Path(sys.argv[2]) if len(sys.argv) > 2 else None
    app = QApplication.instance() or QApplication(sys.argv[:1])
    folder = Path(tempfile.mkdtemp())
    w = window(app, folder, model)
    w.prompt_box.chat_template.setChecked(False)
    w.sampler.set_settings(w.sampler.settings().with_(temperature=0.0, max_new_tokens=24))
    w.prompt.setPlainText("Once upon a time, a dragon")
    done: list[object] = []
    w.run_finished.connect(done.append)
    w.generate()
    assert wait(app, lambda: bool(done) and not w.runner.busy, 300), "run did not finish"
    w.drain()
    click_tab(w, w.inside.view)
    idle(app, w)
    out: dict[str, object] = {"window": [w.width(), w.height()],
                              "first": w.inside.view.header.text()}  # fmt: skip
    click_token(w, 3)
    idle(app, w)
    out["clicked"] = w.inside.view.header.text()
    out["lens_rows"] = len(w.inside.view.grid.lens.candidates) if w.inside.view.grid.lens else 0
    out["normal"] = look(app, w, shots, "normal")
    w.set_presentation(True)
    wait(app, lambda: False, 1.5)
    out["presentation"] = look(app, w, shots, "presentation")
    w.set_presentation(False)
    wait(app, lambda: False, 1.0)
    w.show_score(" the dragon slept in the cave.", "Once upon a time,")
    assert wait(app, lambda: w.score.view.isVisible() and not w.runner.busy, 60), "no score"
    w.score.select(2)
    idle(app, w)
    out["scored"] = w.inside.view.header.text()
    out["tab_after_score"] = w.tabs.currentWidget() is w.inside.view
    if shots is not None:
        w.grab().save(str(shots / "scored.png"))
    w.score.close()
    w.close()
    app.processEvents()
    again = window(app, folder, model)  # the autosave brings the run back
    assert wait(app, lambda: bool(again.store.steps), 30), "the run was not restored"
    click_tab(again, again.inside.view)
    idle(app, again)
    out["restored"] = again.inside.view.header.text()
    out["restored_tokens"] = len(again.store.steps)
    print("INSIDE " + json.dumps(out), flush=True)
    again.runner.shutdown()
    again.close()


if __name__ == "__main__":
    main()
