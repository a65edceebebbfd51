"""Run under a real X display (QT_QPA_PLATFORM=xcb, DISPLAY set): shows the real MainWindow
maximised under the window manager, runs a tiny model for some tokens, and prints what the
window-fit tests check as one JSON line. Usage: fit_probe.py MODEL_DIR VIEW THEME [SHOT]."""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

from PySide6.QtCore import QRect, QSettings, Qt
from PySide6.QtGui import QFontMetrics, QTextDocument
from PySide6.QtWidgets import (
    QAbstractButton,
    QApplication,
    QComboBox,
    QLabel,
    QStyle,
    QStyleOptionComboBox,
    QWidget,
)

from gui.shell.window import MainWindow

SLIDERS = ("temperature", "top_k", "top_p", "min_p")


def wait(app: QApplication, until, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        app.processEvents()
        if until():
            return True
        time.sleep(0.01)
    return until()


def text_of(w: QWidget) -> str:
    if hasattr(w, "shown_text"):  # what is drawn: an eliding widget draws less than it holds
        return w.shown_text()
    if isinstance(w, QComboBox):
        return w.currentText()
    if isinstance(w, QLabel) and w.textFormat() != Qt.TextFormat.RichText and "<" not in w.text():
        return w.text() if not w.wordWrap() else ""
    if isinstance(w, QAbstractButton):
        return w.text().replace("&", "")
    return ""


def clipped(window: MainWindow) -> list[str]:
    """Visible labels, buttons and combos whose one-line text is wider than their box."""
    out = []
    for w in window.findChildren(QWidget):
        if not w.isVisibleTo(window) or not isinstance(w, (QLabel, QAbstractButton, QComboBox)):
            continue
        if isinstance(w, QLabel) and w.wordWrap() and w.text():
            need = w.heightForWidth(w.contentsRect().width())  # wrapped: clipped at the bottom?
            if need > w.contentsRect().height() + 1:
                out.append(f"QLabel {w.text()[:40]!r}: {need} px high > {w.height()}")
            continue
        text = text_of(w)
        if not text or "\n" in text:
            continue
        if isinstance(w, QAbstractButton) and w.width() >= w.sizeHint().width():
            continue  # as wide as the style asks for its text: drawn whole
        need = QFontMetrics(w.font()).horizontalAdvance(text)
        room = w.contentsRect().width()
        if isinstance(w, QAbstractButton):
            room -= 16  # the button's frame
        elif isinstance(w, QComboBox):  # the text field the style leaves beside the arrow
            opt = QStyleOptionComboBox()
            w.initStyleOption(opt)
            room = (
                w.style()
                .subControlRect(
                    QStyle.ComplexControl.CC_ComboBox,
                    opt,
                    QStyle.SubControl.SC_ComboBoxEditField,
                    w,
                )
                .width()
            )
        if need > room + 1:
            out.append(f"{type(w).__name__} {text[:40]!r}: {need} > {room}")
    return out


def outside(window: MainWindow) -> list[str]:
    """Visible widgets whose box, mapped into the window, runs past its right or bottom edge."""
    rect = window.rect()
    out = []
    for w in window.findChildren(QWidget):
        if not w.isVisibleTo(window) or w.isWindow() or w.width() <= 1:
            continue
        if _inside_scroll(w):
            continue
        top_left = w.mapTo(window, w.rect().topLeft())
        box = QRect(top_left, w.size())
        if box.right() > rect.right() + 1 or box.bottom() > rect.bottom() + 1:
            out.append(f"{type(w).__name__} {w.objectName()!r} right {box.right()}")
    return out


def _inside_scroll(w: QWidget) -> bool:
    p = w.parentWidget()
    while p is not None:
        if p.objectName() == "qt_scrollarea_viewport":
            return True
        p = p.parentWidget()
    return False


def open_window(model: str, theme: str, seconds: float) -> tuple[QApplication, MainWindow]:
    """The real window, maximised under the window manager, with fresh settings and autosave
    in a temporary folder, ``model`` loaded (within ``seconds``) and ``theme`` applied."""
    app = QApplication.instance() or QApplication(sys.argv[:1])
    tmp = Path(tempfile.mkdtemp())
    store = QSettings(str(tmp / "s.ini"), QSettings.Format.IniFormat)
    w = MainWindow(settings_store=store, autoload=False, autosave_path=tmp / "a.json")
    w.set_theme(theme)
    w.showMaximized()
    w.load_model(model)
    assert wait(app, lambda: w.bundle is not None and not w.runner.busy, seconds), "no model"
    return app, w


def run_story(app: QApplication, w: MainWindow, tokens: int) -> None:
    """A seeded, unfiltered run of ``tokens`` tokens after "Once upon a time", waited for."""
    w.sampler.set_settings(w.sampler.settings().with_(temperature=1.0, top_k=0, top_p=1.0,
                                                      max_new_tokens=tokens, seed=3))  # fmt: skip
    w.prompt.setPlainText("Once upon a time")
    done: list[object] = []
    w.run_finished.connect(done.append)
    w.generate()
    assert wait(app, lambda: bool(done) and not w.runner.busy, 300), "run did not finish"


def main() -> None:
    model_dir, view, theme = sys.argv[1:4]
    shot = sys.argv[4] if len(sys.argv) > 4 else ""
    app, w = open_window(model_dir, theme, 120)
    run_story(app, w, 64)
    w.set_presentation(view == "presentation")
    wait(app, lambda: False, 1.5)
    w.drain()
    w.refresh()
    wait(app, lambda: False, 0.5)
    dist = w.dist
    ticks = dist.getPlotItem().getAxis("left")._tickLevels[0] if dist.rows else []
    top = (
        [t for _y, t in ticks][: min(5, len(ticks))]
        if view != "presentation"
        else [t for _y, t in ticks]
    )
    legend = w.plots.dist_box.key
    # the sliders on screen: the side panel's, or the presentation view's strip
    knobs = w.strip.rows if view == "presentation" else w.sampler.rows
    assert all(knobs[k].slider.isVisibleTo(w) for k in SLIDERS), "the sliders are not shown"
    result = {
        "window": [w.width(), w.height()],
        "screen": [w.screen().size().width(), w.screen().size().height()],
        "tracks": {k: knobs[k].slider.width() for k in SLIDERS},
        "rows": len(ticks),
        "labelled": sum(1 for t in top if t),
        "checked": len(top),
        "clipped": clipped(w),
        "outside": outside(w),
        "legend_lines": _legend_lines(legend),
        "texts": [x.text() for x in w.findChildren(QLabel) if x.isVisibleTo(w)],
    }
    if shot:
        import subprocess

        subprocess.run(["import", "-window", "root", shot], check=False, timeout=30)
    print("FIT " + json.dumps(result), flush=True)
    w.runner.shutdown()
    w.close()


def _legend_lines(legend: QLabel) -> int:
    """Lines the legend takes: its height over a line's, or its text's width over its box."""
    if not legend.isVisible():
        return 1
    metrics = QFontMetrics(legend.font())
    if legend.wordWrap():
        return max(1, round(legend.contentsRect().height() / metrics.lineSpacing()))
    doc = QTextDocument()
    doc.setDefaultFont(legend.font())
    doc.setHtml(legend.text())
    return 1 if doc.idealWidth() <= legend.contentsRect().width() + 1 else 2


if __name__ == "__main__":
    main()
