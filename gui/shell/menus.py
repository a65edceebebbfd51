"""The window's actions, toolbar and menus, declared in one place."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QLabel, QToolBar

from gui.models.picker import ModelPicker

if TYPE_CHECKING:
    from gui.shell.window import MainWindow

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
    served: QAction
    presentation: QAction
    shortcuts: QAction
    about: QAction
    picker: ModelPicker


Keys = str | QKeySequence.StandardKey | list[QKeySequence] | None

_CTRL, _KEYPAD = Qt.KeyboardModifier.ControlModifier, Qt.KeyboardModifier.KeypadModifier


def zoom_keys() -> tuple[list[QKeySequence], list[QKeySequence], list[QKeySequence]]:
    """Zoom in, out and reset on every keyboard: the platform's ZoomIn (Ctrl++ on most),
    Ctrl+= (the unshifted key on US layouts), Ctrl+Shift+= as some layouts report it, and the
    keypad's +, - and 0. (Built when asked: key sequences need the application to exist.)"""
    zoom_in = [
        QKeySequence(QKeySequence.StandardKey.ZoomIn), QKeySequence("Ctrl+="),
        QKeySequence("Ctrl++"), QKeySequence("Ctrl+Shift+="),
        QKeySequence(_CTRL | _KEYPAD | Qt.Key.Key_Plus),
    ]  # fmt: skip
    zoom_out = [
        QKeySequence(QKeySequence.StandardKey.ZoomOut), QKeySequence("Ctrl+-"),
        QKeySequence(_CTRL | _KEYPAD | Qt.Key.Key_Minus),
    ]  # fmt: skip
    reset = [QKeySequence("Ctrl+0"), QKeySequence(_CTRL | _KEYPAD | Qt.Key.Key_0)]
    return zoom_in, zoom_out, reset


def _unique(keys: list[QKeySequence]) -> list[QKeySequence]:
    seen: list[QKeySequence] = []
    for k in keys:
        if not k.isEmpty() and k not in seen:
            seen.append(k)
    return seen


def build_actions(w: MainWindow) -> Actions:
    def action(text: str, keys: Keys, tip: str, slot: Callable[[], object]) -> QAction:
        a = QAction(text, w)
        if keys is not None:
            if isinstance(keys, list):
                a.setShortcuts(_unique(keys))
            else:
                a.setShortcut(QKeySequence(keys))
            shown = a.shortcut().toString(QKeySequence.SequenceFormat.NativeText)
            a.setToolTip(f"{tip} ({shown})")
        else:
            a.setToolTip(tip)
        a.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
        a.triggered.connect(slot)
        w.addAction(a)
        return a

    zoom_in_keys, zoom_out_keys, zoom_reset_keys = zoom_keys()
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
            "A+", zoom_in_keys, "Bigger text, plots included", lambda: w.set_zoom(w.font_pt + 1)
        ),
        zoom_out=action(
            "A−",
            zoom_out_keys,
            "Smaller text, plots included",
            lambda: w.set_zoom(w.font_pt - 1),
        ),  # fmt: skip
        zoom_reset=action(
            "A", zoom_reset_keys, "Normal text size", lambda: w.set_zoom(BASE_FONT_PT)
        ),
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
        served=action(
            "Open served model…",
            None,
            "A model on vLLM, llama.cpp's llama-server, Ollama or SGLang",
            lambda: w.open_served_dialog(),
        ),  # fmt: skip
        presentation=action(
            "Presentation view",
            "F5",
            "For a projector: the output and the distribution fill the screen, big text",
            lambda: w.set_presentation(not w.presenting),
        ),  # fmt: skip
        shortcuts=action(
            "Keyboard shortcuts", "F1", "Every key the window knows", w.show_shortcuts
        ),
        about=action("About Decoding Lab", None, "Versions and licences", w.show_about),
        picker=ModelPicker(),
    )
    acts.theme.setCheckable(True)
    acts.presentation.setCheckable(True)
    # short words on the toolbar buttons (the menus keep the full names)
    acts.presentation.setIconText("Present")
    acts.undo.setIconText("Undo")
    acts.theme.setIconText("Dark")
    acts.picker.setMaximumWidth(280)

    tb = QToolBar("Main")
    tb.setObjectName("main_toolbar")
    tb.setMovable(False)
    tb.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextOnly)
    w.addToolBar(tb)
    # shown in the normal view only (the presentation view keeps the run's buttons)
    w.normal_only_actions = [tb.addWidget(QLabel(" Model ")), tb.addWidget(acts.picker),
                             tb.addWidget(acts.picker.weights)]  # fmt: skip
    w.normal_only_actions.append(tb.addSeparator())
    for a in (acts.generate, acts.stop, acts.step, acts.continue_, acts.undo, acts.clear):
        tb.addAction(a)
    tb.addSeparator()
    tb.addAction(acts.presentation)
    view = QToolBar("View")
    view.setObjectName("view_toolbar")
    view.setMovable(False)
    view.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextOnly)
    w.addToolBar(view)
    w.view_toolbar = view
    view.addAction(acts.theme)
    for a in (acts.zoom_out, acts.zoom_reset, acts.zoom_in):
        view.addAction(a)
    view.addSeparator()
    export = view.addAction("Export…")
    export.setToolTip("Save the run: JSON, CSV, PNG or Markdown")
    export.triggered.connect(lambda: w.export("json"))

    file_menu = w.menuBar().addMenu("&File")
    file_menu.addAction(acts.served)
    file_menu.addSeparator()
    for a in (acts.export_json, acts.export_csv, acts.export_png, acts.export_md):
        file_menu.addAction(a)
    file_menu.addSeparator()
    file_menu.addAction(acts.quit)
    edit_menu = w.menuBar().addMenu("&Edit")
    for a in (acts.undo, acts.redo, acts.clear):
        edit_menu.addAction(a)
    view_menu = w.menuBar().addMenu("&View")
    for a in (acts.presentation, acts.theme, acts.zoom_in, acts.zoom_out, acts.zoom_reset):
        view_menu.addAction(a)
    help_menu = w.menuBar().addMenu("&Help")
    help_menu.addAction(acts.shortcuts)
    help_menu.addAction(acts.about)
    return acts


def shortcuts_html(acts: Actions) -> str:
    """Every action with a key, and the keys that are not actions (a table for Help)."""
    rows = []
    for name in Actions.__dataclass_fields__:
        a = getattr(acts, name)
        if not isinstance(a, QAction) or not a.shortcuts():
            continue
        keys = ", ".join(k.toString(QKeySequence.SequenceFormat.NativeText) for k in a.shortcuts())
        rows.append((a.text().replace("&", ""), keys))
    rows += [
        ("Choose another token", "click its bar in the distribution"),
        ("Inspect a step", "click its token in the output"),
        ("Go to a node of the tree", "click its row in the Tree tab"),
        (
            "Move in the Tree tab",
            "Up/Down the row above or below, Left the row it grows "
            "from, Right back down, Home the prompt; - / + fold",
        ),
    ]
    body = "".join(f"<tr><td>{t}</td><td><b>{k}</b></td></tr>" for t, k in rows)
    return f"<table cellspacing=6>{body}</table>"
