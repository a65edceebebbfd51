"""The menu bar and the toolbars, built in one pass from every part's ``ActionSpec`` records
(``gui.common.actions``). The menus, their sections and the toolbars are declared here; what
goes in them is declared by the part that owns each action. The shell's own actions (looks,
files, Help) are declared here too (``shell_specs``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from PySide6.QtCore import QEvent, Qt
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QMainWindow, QMenu, QToolBar, QWidget

from gui.common.actions import ActionSpec, ActionTable, Keys, Place
from gui.common.events import OnEvent

BASE_FONT_PT = 12


@dataclass(frozen=True)
class Bar:
    """A menu or a toolbar: its id, title, object name, and its sections in order."""

    id: str
    title: str
    sections: tuple[str, ...]
    object_name: str = ""


MENUS = (
    Bar("file", "&File", ("lesson", "served", "export", "tree", "quit")),
    Bar("edit", "&Edit", ("choice",)),
    Bar("view", "&View", ("looks",)),
    Bar("lessons", "&Lessons", ("lessons", "guess", "live"), "lessons_menu"),
    Bar("experiments", "E&xperiments", ("step", "runs")),
    Bar("tree", "&Tree", ("moves", "go", "files")),
    Bar("help", "&Help", ("guides", "help")),
)
TOOLBARS = (
    # the model picker's widgets come first on the main toolbar (see build_bars)
    Bar("toolbar.main", "Main", ("run", "present"), "main_toolbar"),
    Bar("toolbar.view", "View", ("looks", "export"), "view_toolbar"),
)

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


@dataclass(frozen=True)
class ShellSlots:
    """What the shell's own actions call (the window's looks, files and Help)."""

    toggle_theme: Callable[[], None]
    zoom: Callable[[int], None]
    zoom_now: Callable[[], int]
    toggle_presentation: Callable[[], None]
    export: Callable[[str], object]
    quit: Callable[[], object]
    shortcuts: Callable[[], None]
    about: Callable[[], None]
    guide: Callable[[str], None]  # opens a guide of resources/docs (gui.shell.help)


def shell_specs(s: ShellSlots) -> list[ActionSpec]:
    zoom_in, zoom_out, zoom_reset = zoom_keys()
    looks, tools = "looks", "toolbar.view"
    return [
        ActionSpec("presentation", "Presentation view", s.toggle_presentation,
                   (Place("view", looks, 0), Place("toolbar.main", "present", 0)), "F5",
                   "For a projector: the output and the distribution fill the screen, big text",
                   keys_in_tip=True, checkable=True, icon_text="Present"),
        ActionSpec("theme", "Dark theme", s.toggle_theme,
                   (Place("view", looks, 1), Place(tools, looks, 0)), "Ctrl+T",
                   "Switch between light and dark", keys_in_tip=True, checkable=True,
                   icon_text="Dark"),
        ActionSpec("zoom_in", "A+", lambda: s.zoom(s.zoom_now() + 1),
                   (Place("view", looks, 2), Place(tools, looks, 3)), zoom_in,
                   "Bigger text, plots included", keys_in_tip=True),
        ActionSpec("zoom_out", "A−", lambda: s.zoom(s.zoom_now() - 1),
                   (Place("view", looks, 3), Place(tools, looks, 1)), zoom_out,
                   "Smaller text, plots included", keys_in_tip=True),
        ActionSpec("zoom_reset", "A", lambda: s.zoom(BASE_FONT_PT),
                   (Place("view", looks, 4), Place(tools, looks, 2)), zoom_reset,
                   "Normal text size", keys_in_tip=True),
        ActionSpec("export_json", "Export run as JSON…", lambda: s.export("json"),
                   (Place("file", "export", 0),), tip="Prompt, model, settings and every step"),
        ActionSpec("export_csv", "Export steps as CSV…", lambda: s.export("csv"),
                   (Place("file", "export", 1),), tip="One row per generated token"),
        ActionSpec("export_png", "Export plots as PNG…", lambda: s.export("png"),
                   (Place("file", "export", 2),), tip="A picture of the plots"),
        ActionSpec("export_md", "Export text as Markdown…", lambda: s.export("md"),
                   (Place("file", "export", 3),), tip="The prompt and the output"),
        ActionSpec("export", "Export…", lambda: s.export("json"), (Place(tools, "export", 0),),
                   tip="Save the run: JSON, CSV, PNG or Markdown"),
        ActionSpec("quit", "Quit", s.quit, (Place("file", "quit", 0),),
                   QKeySequence.StandardKey.Quit, "Close Decoding Lab", keys_in_tip=True),
        ActionSpec("user_guide", "User guide", lambda: s.guide("user"),
                   (Place("help", "guides", 0),),
                   tip="The window part by part, the set-up and the models (offline)"),
        ActionSpec("teachers_guide", "Teacher's guide", lambda: s.guide("teacher"),
                   (Place("help", "guides", 1),),
                   tip="Lessons, the presentation view, guess rounds, sharing, your own lesson"),
        ActionSpec("shortcuts", "Keyboard shortcuts", s.shortcuts, (Place("help", "help", 0),),
                   "F1", "Every key the window knows", keys_in_tip=True),
        ActionSpec("about", "About Decoding Lab", s.about, (Place("help", "help", 1),),
                   tip="Versions and licences"),
    ]  # fmt: skip


def _unique(keys: list[QKeySequence]) -> list[QKeySequence]:
    seen: list[QKeySequence] = []
    for k in keys:
        if not k.isEmpty() and k not in seen:
            seen.append(k)
    return seen


def make_action(spec: ActionSpec, owner: QWidget) -> QAction:
    a = QAction(spec.text, owner)
    keys: Keys = spec.keys
    if keys is not None:
        if isinstance(keys, list):
            a.setShortcuts(_unique(keys))
        else:
            a.setShortcut(QKeySequence(keys))
    tip = spec.tip
    if keys is not None and spec.keys_in_tip:
        tip = f"{tip} ({a.shortcut().toString(QKeySequence.SequenceFormat.NativeText)})"
    a.setToolTip(tip)
    a.setCheckable(spec.checkable)
    if spec.icon_text:
        a.setIconText(spec.icon_text)
    a.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
    slot = spec.slot
    a.triggered.connect(lambda _checked=False: slot())
    owner.addAction(a)  # its keys work while the menu bar is hidden (presentation view)
    return a


@dataclass
class Bars:
    """What the shell keeps of the bars: the actions, the toolbars, and the toolbar entries
    the presentation view hides (the model picker's)."""

    table: ActionTable
    toolbars: dict[str, QToolBar]
    normal_only: list[QAction]


def build_bars(
    window: QMainWindow, specs: Iterable[ActionSpec], picker_widgets: list[QWidget]
) -> Bars:
    """Every action built once, then every menu and toolbar filled in its declared order."""
    table = ActionTable()
    placed: dict[str, dict[str, list[tuple[int, int, QAction]]]] = {}
    for n, spec in enumerate(specs):
        action = make_action(spec, window)
        table.add(spec, action)
        for place in spec.places:
            placed.setdefault(place.where, {}).setdefault(place.section, []).append(
                (place.order, n, action)
            )
    known = {bar.id: bar for bar in (*MENUS, *TOOLBARS)}
    for where, sections in placed.items():
        bar = known.get(where)
        unknown = set(sections) - set(bar.sections) if bar else set(sections)
        if unknown:
            raise ValueError(f"actions placed in an unknown menu or section: {where} {unknown}")
    for bar in MENUS:
        menu = QMenu(bar.title, window)
        if bar.object_name:
            menu.setObjectName(bar.object_name)
        window.menuBar().addMenu(menu)
        _fill(menu, bar, placed.get(bar.id, {}))
    toolbars, normal_only = {}, []
    for bar in TOOLBARS:
        tb = QToolBar(bar.title)
        tb.setObjectName(bar.object_name)
        tb.setMovable(False)
        tb.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextOnly)
        window.addToolBar(tb)
        toolbars[bar.id] = tb
        if bar.id == "toolbar.main":  # shown in the normal view only
            normal_only = [tb.addWidget(w) for w in picker_widgets]
            normal_only.append(tb.addSeparator())
        _fill(tb, bar, placed.get(bar.id, {}))
    ToolbarRows(list(toolbars.values()))
    return Bars(table, toolbars, normal_only)


class ToolbarRows:
    """The toolbars on one row while they fit the window, else each after the first on a row
    of its own (a 1024 px projector): no entry hides behind the toolbar's "»" menu. Follows
    the window's width, the text size and the presentation view (which hides toolbars)."""

    def __init__(self, toolbars: list[QToolBar]) -> None:
        window = toolbars[0].parentWidget()  # the main window the toolbars were added to
        assert isinstance(window, QMainWindow)
        self.window, self.toolbars = window, toolbars
        self.broken: set[int] = set()  # the toolbars that start a row of their own
        kinds = (QEvent.Type.Resize, QEvent.Type.Show, QEvent.Type.Hide, QEvent.Type.LayoutRequest)
        # arranged once the events of a change are in (never mid-teardown)
        self.follow = OnEvent((window, *toolbars), kinds, self.arrange, later=True)

    def arrange(self) -> None:
        shown = [tb for tb in self.toolbars if not tb.isHidden()]
        room = self.window.width()
        used = 0
        for i, tb in enumerate(shown):
            used += tb.sizeHint().width()
            wrap = i > 0 and used > room
            if wrap:
                used = tb.sizeHint().width()
            if wrap != (id(tb) in self.broken):
                if wrap:
                    self.window.insertToolBarBreak(tb)
                    self.broken.add(id(tb))
                else:
                    self.window.removeToolBarBreak(tb)
                    self.broken.discard(id(tb))


def _fill(target: QMenu | QToolBar, bar: Bar, sections: dict[str, list]) -> None:
    first = True
    for name in bar.sections:
        entries = sorted(sections.get(name, []), key=lambda e: (e[0], e[1]))
        if not entries:
            continue
        if not first:
            target.addSeparator()
        first = False
        for _order, _n, action in entries:
            target.addAction(action)


def shortcuts_html(table: ActionTable) -> str:
    """Every action with a key, and the keys that are not actions (a table for Help)."""
    rows = []
    for _action_id, a in table.items():
        if not a.shortcuts():
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
