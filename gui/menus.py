"""The window's actions, toolbar and menus, declared in one place."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QLabel, QToolBar

from gui.widgets.model_picker import ModelPicker

if TYPE_CHECKING:
    from gui.window import MainWindow

BASE_FONT_PT = 12


@dataclass
class Actions:
    generate: QAction
    stop: QAction
    step: QAction
    continue_: QAction
    undo: QAction
    redo: QAction
    clear: QAction
    theme: QAction
    zoom_in: QAction
    zoom_out: QAction
    zoom_reset: QAction
    export_json: QAction
    export_csv: QAction
    export_png: QAction
    export_md: QAction
    quit: QAction
    about: QAction
    picker: ModelPicker


Keys = str | QKeySequence.StandardKey | None


def build_actions(w: MainWindow) -> Actions:
    def action(text: str, keys: Keys, tip: str, slot: Callable[[], object]) -> QAction:
        a = QAction(text, w)
        if keys is not None:
            a.setShortcut(QKeySequence(keys))
            shown = a.shortcut().toString(QKeySequence.SequenceFormat.NativeText)
            a.setToolTip(f"{tip} ({shown})")
        else:
            a.setToolTip(tip)
        a.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
        a.triggered.connect(slot)
        w.addAction(a)
        return a

    acts = Actions(
        generate=action("Generate", "Ctrl+Return", "Start a new run from the prompt", w.generate),
        stop=action("Stop", "Esc", "Stop after the current token", w.stop),
        step=action("Step", "Ctrl+Right", "Generate exactly one more token", w.step_once),
        continue_=action(
            "Continue", "Ctrl+Shift+Return", "Carry on from where the run stopped", w.continue_run
        ),
        undo=action(
            "Undo choice",
            "Alt+Backspace",
            "Go back to the text before your last token choice",
            w.undo,
        ),  # fmt: skip
        redo=action("Redo choice", "Alt+Shift+Backspace", "Take the undone choice again", w.redo),
        clear=action("Clear", "Ctrl+L", "Clear the output and the plots", w.clear_output),
        theme=action("Dark theme", "Ctrl+T", "Switch between light and dark", w.toggle_theme),
        zoom_in=action(
            "A+", QKeySequence.StandardKey.ZoomIn, "Bigger text", lambda: w.set_zoom(w.font_pt + 1)
        ),
        zoom_out=action(
            "A−",
            QKeySequence.StandardKey.ZoomOut,
            "Smaller text",
            lambda: w.set_zoom(w.font_pt - 1),
        ),  # fmt: skip
        zoom_reset=action("A", "Ctrl+0", "Normal text size", lambda: w.set_zoom(BASE_FONT_PT)),
        export_json=action(
            "Export run as JSON…",
            None,
            "Prompt, model, settings and every step",
            lambda: w.export("json"),
        ),  # fmt: skip
        export_csv=action(
            "Export steps as CSV…", None, "One row per generated token", lambda: w.export("csv")
        ),
        export_png=action(
            "Export plots as PNG…", None, "A picture of the plots", lambda: w.export("png")
        ),
        export_md=action(
            "Export text as Markdown…", None, "The prompt and the output", lambda: w.export("md")
        ),
        quit=action("Quit", QKeySequence.StandardKey.Quit, "Close Decoding Lab", w.close),
        about=action("About Decoding Lab", None, "Versions and licences", w.show_about),
        picker=ModelPicker(),
    )
    acts.theme.setCheckable(True)

    tb = QToolBar("Main")
    tb.setObjectName("main_toolbar")
    tb.setMovable(False)
    tb.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextOnly)
    w.addToolBar(tb)
    tb.addWidget(QLabel(" Model "))
    tb.addWidget(acts.picker)
    tb.addSeparator()
    for a in (acts.generate, acts.stop, acts.step, acts.continue_, acts.undo, acts.clear):
        tb.addAction(a)
    tb.addSeparator()
    tb.addAction(acts.theme)
    for a in (acts.zoom_out, acts.zoom_reset, acts.zoom_in):
        tb.addAction(a)
    tb.addSeparator()
    export = tb.addAction("Export…")
    export.setToolTip("Save the run: JSON, CSV, PNG or Markdown")
    export.triggered.connect(lambda: w.export("json"))

    file_menu = w.menuBar().addMenu("&File")
    for a in (acts.export_json, acts.export_csv, acts.export_png, acts.export_md):
        file_menu.addAction(a)
    file_menu.addSeparator()
    file_menu.addAction(acts.quit)
    edit_menu = w.menuBar().addMenu("&Edit")
    for a in (acts.undo, acts.redo, acts.clear):
        edit_menu.addAction(a)
    w.menuBar().addMenu("&Help").addAction(acts.about)
    return acts
