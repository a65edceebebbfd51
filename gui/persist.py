"""What the window remembers: its settings (QSettings, one group per area, values not
indices, a version key) and the autosave of the last run (nothing lost, even if the process is
killed)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QSettings, QStandardPaths
from PySide6.QtWidgets import QFileDialog

from engine.classroom.export import write_atomic
from engine.models.catalog import DEFAULT_MODEL
from engine.validate import InputError
from engine.validate import autosave as autosave_io
from engine.validate import settings as check
from gui.menus import BASE_FONT_PT
from gui.widgets.model_picker import MAX_RECENTS
from gui.widgets.token_pane import COLOR_BY_RANK

if TYPE_CHECKING:
    from gui.window import MainWindow

SETTINGS_VERSION = 1


def default_autosave_path() -> Path:
    base = QStandardPaths.writableLocation(QStandardPaths.StandardLocation.AppDataLocation)
    return Path(base or Path.home() / ".decoding-lab") / "autosave.json"


def save_state(w: MainWindow, s: QSettings) -> None:
    s.setValue("version", SETTINGS_VERSION)
    s.beginGroup("window")
    s.setValue("geometry", w.saveGeometry())
    s.setValue("splitter", w.splitter.saveState())
    s.setValue("theme", w.theme.name)
    s.setValue("zoom", w.font_pt)
    s.setValue("color_mode", w.output.color_mode.currentData())
    s.setValue("top_n", w.plots.dist_box.top_n.value())
    s.endGroup()
    s.beginGroup("models")
    s.setValue("last", w.bundle.source_key if w.bundle else "")
    s.setValue("recents", json.dumps(w.picker.recents))
    s.endGroup()
    s.beginGroup("prompt")
    s.setValue("text", w.prompt.toPlainText())
    s.endGroup()
    w.sampler.save_state(s)
    w.method.save_state(s)
    s.sync()


def restore_state(w: MainWindow, s: QSettings) -> str:
    """Apply the saved settings; returns the model to load first."""
    s.beginGroup("window")
    geometry = s.value("geometry")
    if geometry is not None:
        w.restoreGeometry(geometry)
    splitter = s.value("splitter")
    if splitter is not None:
        w.splitter.restoreState(splitter)
    # Raw values, checked by engine.validate.settings: Qt's own type= conversion raises on a
    # number too big for an int, and a hand-edited file may hold anything.
    theme = check.text(s.value("theme"), "light")
    zoom = check.whole(s.value("zoom"), BASE_FONT_PT, 4, 96)
    mode = check.text(s.value("color_mode"), COLOR_BY_RANK)
    top_n = w.plots.dist_box.top_n
    w.plots.dist_box.top_n.setValue(
        check.whole(s.value("top_n"), 20, top_n.minimum(), top_n.maximum())
    )
    s.endGroup()
    s.beginGroup("models")
    initial = check.text(s.value("last"), DEFAULT_MODEL) or DEFAULT_MODEL
    w.picker.recents = check.text_list(s.value("recents"), MAX_RECENTS)
    s.endGroup()
    s.beginGroup("prompt")
    w.prompt.setPlainText(check.text(s.value("text"), ""))
    s.endGroup()
    w.sampler.restore_state(s)
    w.method.restore_state(s)
    color = w.output.color_mode
    color.setCurrentIndex(max(0, color.findData(mode)))
    w.set_theme(theme)
    w.set_zoom(zoom)
    w.picker.fill()
    return initial


def write_autosave(w: MainWindow) -> bool:
    """Write prompt, settings and the run (every step) atomically; never over an autosave
    that could not be read and could not be moved aside."""
    if getattr(w, "autosave_blocked", False):
        return False
    head = {
        "editor_prompt": w.prompt.toPlainText(),
        "model": w.bundle.source_key if w.bundle else "",
        "settings": w.sampler.settings().to_dict(),
        "saved_at": time.time(),
    }
    try:
        w.autosave_path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(w.autosave_path, w.store.autosave_text(head), private=True)
    except OSError as exc:
        w.status_text.setText(f"Could not autosave: {exc}")
        return False
    return True


def read_autosave(w: MainWindow) -> bool:
    """Restore the last run, if the autosave holds one. A damaged file is moved aside (never
    overwritten) and the status bar says where it went; the window starts either way."""
    try:
        saved = autosave_io.read_autosave(w.autosave_path)
    except InputError as exc:
        _set_aside(w, exc)
        return False
    if saved is None:
        return False
    change = w.store.restore_saved(saved)
    w.prompt.setPlainText(saved.editor_prompt)
    w.sampler.set_settings(saved.settings)
    w.views.apply(change, busy=False)
    if w.store.steps:
        w.status_text.setText(
            f"Restored the last run ({len(w.store.steps)} tokens) from the autosave."
        )
    return True


def _set_aside(w: MainWindow, exc: InputError) -> None:
    try:
        copy = autosave_io.move_aside(w.autosave_path)
    except OSError as err:
        w.autosave_blocked = True  # the file stays as it is: write_autosave leaves it alone
        w.status_text.setText(
            f"The autosave could not be read ({exc.message}) nor moved aside ({err.strerror}): "
            f"{w.autosave_path} is left untouched and nothing is autosaved this session."
        )
        return
    w.status_text.setText(
        f"The autosave could not be read ({exc.message}); it was kept as {copy} and a new one "
        "starts."
    )


EXPORT_FILTERS = {
    "json": "JSON (*.json)", "csv": "CSV (*.csv)", "png": "PNG image (*.png)",
    "md": "Markdown (*.md)", "html": "Web page (*.html)",
}  # fmt: skip


def export_run(w: MainWindow, kind: str, path: str | None = None) -> bool:
    if kind != "png" and not w.store.steps:
        w.show_error("Nothing to export yet: generate first.")
        return False
    if path is None:
        path, _ = QFileDialog.getSaveFileName(
            w, "Export", f"decoding-lab-run.{kind}", EXPORT_FILTERS[kind]
        )
        if not path:
            return False
    try:
        if kind == "png":
            tmp = Path(path).with_name(f".{Path(path).name}.tmp.png")
            if not w.plots.grab().save(str(tmp), "PNG"):
                raise OSError(f"could not write {path}")
            tmp.replace(path)
        else:
            model = w.bundle.name if w.bundle else ""
            write_atomic(path, w.store.export(kind, model, w.sampler.settings().to_dict()))
    except (OSError, ValueError) as exc:  # a full disk, a value a format cannot hold
        w.show_error(f"Could not export to {path}:\n{exc}")
        return False
    w.status_text.setText(f"Exported {path}")
    return True
