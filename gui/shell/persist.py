"""What the window remembers: its settings (QSettings, one group per area, values not
indices, a version key) and the autosave of the last run (nothing lost, even if the process is
killed); and the run's exports. ``Persistence`` owns the settings store and the autosave's
path; it is given ``PersistNeeds``, never the window."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QByteArray, QSettings, QStandardPaths, QTimer
from PySide6.QtGui import QPixmap
from PySide6.QtWidgets import QFileDialog, QSplitter, QWidget

from engine.classroom.export import write_atomic
from engine.models.catalog import DEFAULT_MODEL
from engine.validate import InputError
from engine.validate import autosave as autosave_io
from engine.validate import settings as check
from engine.validate.core import collector_paused
from engine.words import count
from gui.common.token_pane import COLOR_BY_RANK
from gui.core.session import Session
from gui.models.picker import MAX_RECENTS
from gui.shell.menus import BASE_FONT_PT

if TYPE_CHECKING:
    from gui.controls.method_panel import MethodPanel
    from gui.controls.sampler_panel import SamplerPanel
    from gui.models.picker import ModelPicker
    from gui.run.view import RunView
    from gui.shell.appearance import Appearance
    from gui.shell.areas import OutputBox, PlotArea, PromptBox

SETTINGS_VERSION = 1
AUTOSAVE_MS = 2000  # while something changed, write the autosave at most this often
EXPORT_FILTERS = {
    "json": "JSON (*.json)", "csv": "CSV (*.csv)", "png": "PNG image (*.png)",
    "md": "Markdown (*.md)", "html": "Web page (*.html)",
}  # fmt: skip


SLIDE_WIDTH = 1920  # an exported picture of the plots is at least this wide (a slide, not a screen)


def documents_folder() -> Path:
    """Where a save dialog starts: the user's documents (not the program's own folder)."""
    place = QStandardPaths.writableLocation(QStandardPaths.StandardLocation.DocumentsLocation)
    folder = Path(place) if place else Path.home()
    return folder if folder.is_dir() else Path.home()


def slide_picture(widget: QWidget) -> QPixmap:
    """``widget`` drawn at a slide's resolution: its plots are painted again at a larger scale
    (lines and text stay sharp), not a screen grab blown up."""
    scale = max(1.0, SLIDE_WIDTH / max(1, widget.width()))
    picture = QPixmap(widget.size() * scale)
    picture.setDevicePixelRatio(scale)
    picture.fill(widget.palette().window().color())
    widget.render(picture)
    return picture


def default_autosave_path() -> Path:
    base = QStandardPaths.writableLocation(QStandardPaths.StandardLocation.AppDataLocation)
    return Path(base or Path.home() / ".decoding-lab") / "autosave.json"


@dataclass
class PersistNeeds(Session):
    """What the settings, the autosave and the exports read and set: the panels and areas
    that have a state, and the window's geometry."""

    views: RunView
    prompt_box: PromptBox
    sampler: SamplerPanel
    method: MethodPanel
    picker: ModelPicker
    output: OutputBox
    plots: PlotArea
    splitter: QSplitter
    geometry: Callable[[], QByteArray]
    restore_geometry: Callable[[QByteArray], bool]


class Persistence:
    def __init__(
        self, host: PersistNeeds, appearance: Appearance, settings_store: QSettings,
        autosave_path: Path,
    ) -> None:  # fmt: skip
        self.host, self.appearance = host, appearance
        self.settings_store = settings_store
        self.autosave_path = autosave_path
        self.blocked = False  # an autosave that could not be read nor moved aside: kept as is
        self.closing = False  # the window is closing: its last autosave is written by hand
        self.told_tree: object = None  # the tree whose being too large was told
        self.timer = QTimer(host.parent, interval=AUTOSAVE_MS, singleShot=True)
        self.timer.timeout.connect(self.write_autosave)

    # -- settings -----------------------------------------------------------------------------

    def save_state(self) -> None:
        h, s = self.host, self.settings_store
        s.setValue("version", SETTINGS_VERSION)
        s.beginGroup("window")
        s.setValue("geometry", h.geometry())
        s.setValue("panes", h.splitter.saveState())  # the output and the plots (was "splitter")
        s.setValue("theme", self.appearance.theme.name)
        s.setValue("zoom", self.appearance.font_pt)
        s.setValue("color_mode", h.output.color_mode.currentData())
        s.setValue("top_n", h.plots.dist_box.top_n.value())
        s.endGroup()
        s.beginGroup("models")
        s.setValue("last", h.bundle.source_key if h.bundle else "")
        s.setValue("recents", json.dumps(h.picker.recents))
        s.setValue("dtype", h.picker.weights.dtype())
        s.endGroup()
        s.beginGroup("prompt")
        s.setValue("text", h.prompt_box.editor.toPlainText())
        if h.prompt_box.chat_choice is not None:
            s.setValue("chat_template", h.prompt_box.chat_choice)
        s.endGroup()
        h.sampler.save_state(s)
        h.method.save_state(s)
        s.sync()

    def restore_state(self) -> str:
        """Apply the saved settings; returns the model to load first."""
        h, s = self.host, self.settings_store
        s.beginGroup("window")
        geometry = s.value("geometry")
        if geometry is not None:
            h.restore_geometry(geometry)
        splitter = s.value("panes")
        if splitter is not None:
            h.splitter.restoreState(splitter)
        # Raw values, checked by engine.validate.settings: Qt's own type= conversion raises on
        # a number too big for an int, and a hand-edited file may hold anything.
        theme = check.text(s.value("theme"), "light")
        zoom = check.whole(s.value("zoom"), BASE_FONT_PT, 4, 96)
        mode = check.text(s.value("color_mode"), COLOR_BY_RANK)
        top_n = h.plots.dist_box.top_n
        top_n.setValue(check.whole(s.value("top_n"), 20, top_n.minimum(), top_n.maximum()))
        s.endGroup()
        s.beginGroup("models")
        initial = check.text(s.value("last"), DEFAULT_MODEL) or DEFAULT_MODEL
        h.picker.recents = check.text_list(s.value("recents"), MAX_RECENTS)
        h.picker.weights.select(check.text(s.value("dtype"), "auto"))
        s.endGroup()
        s.beginGroup("prompt")
        h.prompt_box.editor.setPlainText(check.text(s.value("text"), ""))
        chat = s.value("chat_template")  # the tick as it was left (a model does not change it)
        if chat is not None:
            h.prompt_box.choose_chat(_flag(chat, True))
        s.endGroup()
        h.sampler.restore_state(s)
        h.method.restore_state(s)
        color = h.output.color_mode
        color.setCurrentIndex(max(0, color.findData(mode)))
        self.appearance.apply_theme(theme)
        self.appearance.apply_zoom(zoom)
        h.picker.fill()
        return initial

    # -- autosave -----------------------------------------------------------------------------

    def changed(self, *_args: object) -> None:
        """Something to save changed: the autosave is written soon (at most every 2 s)."""
        if not self.timer.isActive() and not self.closing:
            self.timer.start()

    def stop(self) -> None:
        """The window closes: no more timed autosaves."""
        self.closing = True
        self.timer.stop()

    def write_autosave(self) -> bool:
        """Write prompt, settings and the run (every step) atomically; never over an autosave
        that could not be read and could not be moved aside."""
        if self.blocked:
            return False
        h = self.host
        head = {
            "editor_prompt": h.prompt_box.editor.toPlainText(),
            "model": h.bundle.source_key if h.bundle else "",
            "settings": h.sampler.settings().to_dict(),
            "saved_at": time.time(),
        }
        try:
            self.autosave_path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(self.autosave_path, h.store.autosave_text(head), private=True)
        except OSError as exc:
            h.say(f"Could not autosave: {exc}")
            return False
        self._tell_tree_left_out()
        return True

    def _tell_tree_left_out(self) -> None:
        """A tree past the tree file's bound cannot be kept: say so once (never in silence)."""
        from engine.tree.node import MAX_NODES

        tree = self.host.store.tree
        if tree is None or len(tree.nodes) <= MAX_NODES or self.told_tree is tree:
            return
        self.told_tree = tree
        self.host.say(
            f"The tree has {len(tree.nodes) - 1:,} nodes, more than a tree file holds "
            f"({MAX_NODES:,}): the autosave keeps the run's path, not the other branches. "
            "Clear to start a new tree."
        )

    def read_autosave(self) -> bool:
        """Restore the last run, if the autosave holds one. A damaged file is moved aside
        (never overwritten) and the status bar says where it went; the window starts either
        way."""
        h = self.host
        try:
            with collector_paused():
                saved = autosave_io.read_autosave(self.autosave_path)
        except InputError as exc:
            self._set_aside(exc)
            return False
        if saved is None:
            return False
        with collector_paused():
            change = h.store.restore_saved(saved)
        h.prompt_box.editor.setPlainText(saved.editor_prompt)
        h.sampler.set_settings(saved.settings)
        if h.prompt_box.chat_choice is None and (saved.steps or saved.tree is not None):
            h.prompt_box.choose_chat(saved.chat_template)  # the restored run's, as it was
        # setting the prompt and settings above started the timer, but the file holds just
        # what the window now shows: rewriting it (seconds for a long run) would only freeze
        # the window right after it opens
        self.timer.stop()
        h.views.apply(change, busy=False)
        if h.store.steps:
            h.say(
                f"Restored the last run ({count(len(h.store.steps), 'token')}) from the autosave."
                + (f" Its tree ({saved.tree_left_out:,} nodes) was too large to keep: only "
                   "the run's path came back." if saved.tree_left_out else "")
            )  # fmt: skip
        return True

    def _set_aside(self, exc: InputError) -> None:
        say = self.host.say
        try:
            copy = autosave_io.move_aside(self.autosave_path)
        except OSError as err:
            self.blocked = True  # the file stays as it is: write_autosave leaves it alone
            say(
                f"The autosave could not be read ({exc.message}) nor moved aside "
                f"({err.strerror}): {self.autosave_path} is left untouched and nothing is "
                "autosaved this session."
            )
            return
        say(
            f"The autosave could not be read ({exc.message}); it was kept as {copy} and a new "
            "one starts."
        )

    # -- exports ------------------------------------------------------------------------------

    def export_run(self, kind: str, path: str | None = None) -> bool:
        h = self.host
        tree = h.store.tree
        grown = tree is not None and len(tree.nodes) > 1  # a tree expanded from the prompt
        if kind != "png" and not h.store.steps and not (grown and kind in ("json", "html")):
            h.show_error("Nothing to export yet: generate first.")
            return False
        if path is None:
            suggested = str(documents_folder() / f"decoding-lab-run.{kind}")
            path, _ = QFileDialog.getSaveFileName(h.parent, "Export", suggested,
                                                  EXPORT_FILTERS[kind])  # fmt: skip
            if not path:
                return False
        try:
            if kind == "png":
                tmp = Path(path).with_name(f".{Path(path).name}.tmp.png")
                if not slide_picture(h.plots).save(str(tmp), "PNG"):
                    raise OSError(f"could not write {path}")
                tmp.replace(path)
            else:
                model = h.bundle.name if h.bundle else ""
                pane = h.output.pane  # the decision layers, where they were read
                decided = (pane.layers, pane.decisions) if pane.decisions else None
                text = h.store.export(kind, model, h.sampler.settings().to_dict(), decided)
                write_atomic(path, text)
        except (OSError, ValueError) as exc:  # a full disk, a value a format cannot hold
            h.show_error(f"Could not export to {path}:\n{exc}")
            return False
        h.say(f"Exported {path}")
        return True


def _flag(value: object, default: bool) -> bool:
    """A yes/no from the settings file (an INI file gives "true", the registry a bool)."""
    if isinstance(value, bool):
        return value
    word = str(value).strip().lower()
    return True if word in ("true", "1") else False if word in ("false", "0") else default
