"""The screen audit's walker, run under a real X display (QT_QPA_PLATFORM=xcb, DISPLAY set):
the real window maximised under the window manager, a tiny model's run, then every tab and its
pages in the normal and the presentation view, and every stage of every bundled lesson; each
screen is checked and, when a folder is given, saved as a PNG (the gallery). One JSON line per
screen ("AUDIT {...}"), and one for the theme's controls ("CONTROLS {...}").
Usage: audit_probe.py MODEL_DIR THEME tabs|all [GALLERY_FOLDER] ("all": the lessons too)."""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path

import pyqtgraph as pg
from fit_probe import clipped, open_window, outside, run_story, wait
from PySide6.QtCore import QPoint, Qt
from PySide6.QtGui import QColor, QFontMetrics, QImage, QPainter
from PySide6.QtTest import QTest
from PySide6.QtWidgets import (
    QCheckBox,
    QSlider,
    QStyle,
    QStyleOptionButton,
    QStyleOptionSlider,
    QTabWidget,
    QToolBar,
    QWidget,
)

from engine.classroom.lessons import bundled_lessons
from gui.common.theme import THEMES

# The smallest a plot may be drawn and still read (its tick labels, axis title and a few bars
# or rows): below this the plots of the Inside view in presentation were ~80 px high.
MIN_PLOT = (150, 100)
ERRORS: list[str] = []
POKED: set[int] = set()


def _hook(kind, value, tb) -> None:  # an exception in a slot or an event handler
    ERRORS.append("".join(traceback.format_exception(kind, value, tb))[-600:])


def contrast(a: QColor, b: QColor) -> float:
    def lum(c: QColor) -> float:
        def ch(v: int) -> float:
            s = v / 255
            return s / 12.92 if s <= 0.03928 else ((s + 0.055) / 1.055) ** 2.4

        return 0.2126 * ch(c.red()) + 0.7152 * ch(c.green()) + 0.0722 * ch(c.blue())

    hi, lo = sorted((lum(a), lum(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def best(widget: QWidget, rect, background: QColor, row: int | None = None) -> float:
    image = widget.grab().toImage()
    ys = [row] if row is not None else range(max(0, rect.top()), rect.bottom() + 1)
    xs = range(max(0, rect.left()), min(image.width(), rect.right() + 1))
    return max((contrast(QColor(image.pixel(x, y)), background) for y in ys for x in xs),
               default=0.0)  # fmt: skip


def controls(w, theme: str) -> dict[str, float]:
    """Each visible check box's indicator and slider's groove against the window colour."""
    background = QColor(THEMES[theme].window)
    out = {}
    for box in w.findChildren(QCheckBox):
        if box.isVisibleTo(w):
            opt = QStyleOptionButton()
            opt.initFrom(box)
            rect = box.style().subElementRect(QStyle.SubElement.SE_CheckBoxIndicator, opt, box)
            out[f"check box {box.text()!r}"] = round(best(box, rect, background), 2)
    for slider in w.findChildren(QSlider):
        if slider.isVisibleTo(w):
            opt = QStyleOptionSlider()
            slider.initStyleOption(opt)
            groove = slider.style().subControlRect(
                QStyle.ComplexControl.CC_Slider, opt, QStyle.SubControl.SC_SliderGroove, slider
            )
            value = slider.value()
            slider.setValue(slider.minimum())
            right = groove.adjusted(groove.width() * 3 // 5, 0, 0, 0)
            out[f"slider {slider.objectName()}"] = round(
                best(slider, right, background, groove.center().y()), 2
            )
            slider.setValue(value)
    return out


def least_size(plot: QWidget) -> tuple[int, int]:
    """The smallest size at which a plot reads at its text size: five lines of its tick labels
    high (an axis with a few ticks, a title, a row or two) and twelve characters wide, never
    below MIN_PLOT."""
    font = plot.font()
    item = getattr(plot, "getPlotItem", lambda: None)()
    if item is not None:
        font = item.getAxis("left").style.get("tickFont") or font
    metrics = QFontMetrics(font)
    return (max(MIN_PLOT[0], 12 * metrics.averageCharWidth()),
            max(MIN_PLOT[1], 5 * metrics.lineSpacing()))  # fmt: skip


def plots_on_screen(w) -> list[pg.PlotWidget]:
    return [p for p in w.findChildren(pg.GraphicsView) if p.isVisibleTo(w) and p.width() > 1]


def poke(app, plot: QWidget) -> None:
    """Hover a plot at five points, wheel over it and click it, as a class's pointer would."""
    r = plot.rect()
    for x, y in ((0.5, 0.5), (0.2, 0.2), (0.8, 0.8), (0.1, 0.9), (0.9, 0.1)):
        QTest.mouseMove(plot, QPoint(int(r.width() * x), int(r.height() * y)))
        app.processEvents()
    QTest.mouseClick(plot.viewport(), Qt.MouseButton.LeftButton, pos=r.center())
    app.processEvents()


def check(app, w, name: str, gallery: Path | None, size) -> dict:
    wait(app, lambda: False, 0.25)
    w.drain()
    screen = w.screen().availableGeometry()
    frame = w.frameGeometry()
    small = [f"{type(p).__name__} {p.objectName()!r} {p.width()}x{p.height()} < {need[0]}x{need[1]}"
             for p in plots_on_screen(w) if (need := least_size(p))
             and (p.width() < need[0] or p.height() < need[1])]  # fmt: skip
    cut = cut_now(w)
    if cut:  # a label whose text a job's result just changed is laid out on the next pass:
        wait(app, lambda: False, 0.5)  # a finding counts when it is still there half a second on
        w.drain()
        cut = cut_now(w)
    before = len(ERRORS)
    for plot in plots_on_screen(w):
        if id(plot) not in POKED:  # each plot once in a view: its handlers, not its data
            POKED.add(id(plot))
            poke(app, plot)
    result = {
        "screen": name,
        "fits": frame.width() <= screen.width() + 2 and w.width() <= size[0],
        "window": [w.width(), w.height(), w.minimumSizeHint().width()],
        "small_plots": small,
        "clipped": cut,
        "outside": outside(w),
        "errors": ERRORS[before:],
    }
    if gallery is not None:
        w.grab().save(str(gallery / f"{name}.png"))
    print("AUDIT " + json.dumps(result), flush=True)
    return result


def cut_now(w) -> list[str]:
    """Every cut text of the window as it is drawn now (labels, plot and axis titles, toolbar
    entries behind "»")."""
    cut = [c for c in clipped(w) if not _whole_on_hover(w, c)] + cut_titles(w) + cut_axes(w)
    return cut + overflow(w) + crowded_ticks(w)


def plot_axes(w):  # noqa: ANN201 - (plot, "left" / "bottom", its AxisItem) of every plot shown
    for p in plots_on_screen(w):
        item = getattr(p, "getPlotItem", lambda: None)()
        if item is not None:
            for name in ("left", "bottom"):
                yield p, name, item.getAxis(name)


def drawn_labels(axis) -> list:  # noqa: ANN001
    """The tick labels an axis draws now: (rect, text), as pyqtgraph lays them out."""
    image = QImage(8, 8, QImage.Format.Format_ARGB32)  # kept while the painter draws on it
    painter = QPainter(image)
    try:
        specs = axis.generateDrawSpecs(painter)
    finally:
        painter.end()
    return [(rect, text) for rect, _flags, text in (specs[2] if specs else ()) if text]


def crowded_ticks(w) -> list[str]:
    """Tick labels drawn over each other ('<extra s…<0xC…' under the attention bars): each
    axis's labels as pyqtgraph lays them out for drawing, any two of one level overlapping."""
    out = []
    for p, name, axis in plot_axes(w):
        if not axis.isVisible() or not axis.style.get("showValues", True):
            continue
        rects = drawn_labels(axis)
        for i, (a, ta) in enumerate(rects):
            hit = next((tb for b, tb in rects[i + 1 :] if a.intersects(b)), None)
            if hit is not None:
                out.append(f"tick labels {ta!r} and {hit!r} of {type(p).__name__} "
                           f"{p.objectName()!r} ({name}) overlap")  # fmt: skip
                break
    return out


def overflow(w) -> list[str]:
    """Toolbar entries that are on but not drawn: behind the toolbar's "»" menu, where a
    class never sees them."""
    out = []
    for tb in w.findChildren(QToolBar):
        if not tb.isVisibleTo(w):
            continue
        for a in tb.actions():
            shown = tb.widgetForAction(a)
            if a.isVisible() and not a.isSeparator() and shown and not shown.isVisible():
                name = a.text() or type(shown).__name__
                out.append(f"toolbar {tb.objectName()!r} hides {name!r}")
    return out


def cut_axes(w) -> list[str]:
    """Axis titles longer than their axis ("logit differ" on a short plot): pyqtgraph draws
    them centred on the axis and cuts what runs past it."""
    out = []
    for p, name, axis in plot_axes(w):
        if not axis.isVisible() or not axis.label.isVisible() or not axis.labelText:
            continue
        long = axis.label.boundingRect().width()  # along the axis (the left one is turned)
        room = axis.height() if name == "left" else axis.width()
        if long > room + 1:
            where = f"{type(p).__name__} {p.objectName()!r}"
            out.append(f"axis title {axis.labelText!r} of {where}: {long:.0f} px on {room:.0f}")
    return out


def cut_titles(w) -> list[str]:
    """Plots whose title (pyqtgraph draws it: no widget, no elision of its own) is wider than
    the plot, unless the plot's tooltip holds the whole title."""
    out = []
    for p in plots_on_screen(w):
        item = getattr(p, "getPlotItem", lambda: None)()
        label = getattr(item, "titleLabel", None)
        if label is None or not label.isVisible() or not label.text:
            continue
        text = " ".join(label.item.toPlainText().split())
        box = label.item.mapRectToScene(label.item.boundingRect())  # the scene is the widget's
        if (box.left() < -1 or box.right() > p.width() + 1) and text[:20] not in " ".join(
            p.toolTip().split()
        ):
            out.append(f"title of {type(p).__name__} {p.objectName()!r} {text[:40]!r}: "
                       f"{box.left():.0f}..{box.right():.0f} px of {p.width()}")  # fmt: skip
    return out


def _whole_on_hover(w, line: str) -> bool:
    """A cut text whose widget says the whole of it on hover (tooltip) passes."""
    for x in w.findChildren(QWidget):
        text = getattr(x, "text", None)
        if callable(text) and x.isVisibleTo(w) and x.toolTip():
            shown = str(text()).replace("&", "")[:40]
            if shown and repr(shown) in line and shown in x.toolTip():
                return True
    return False


def tab_screens(app, w, view: str, gallery, size) -> None:
    tabs = w.plots.tabs
    for i in range(tabs.count()):
        tabs.setCurrentIndex(i)
        page = tabs.widget(i)
        name = tabs.tabToolTip(i) or tabs.tabText(i)
        inner = page.findChild(QTabWidget) if not isinstance(page, QTabWidget) else page
        if inner is not None and inner.isVisibleTo(w):
            for j in range(inner.count()):
                inner.setCurrentIndex(j)
                if page is w.inside.view:
                    w.inside.sync()
                    wait(app, lambda: not w.runner.busy, 60)
                check(app, w, f"{view}-{_slug(name)}-{_slug(inner.tabText(j))}", gallery, size)
            inner.setCurrentIndex(0)
        else:
            check(app, w, f"{view}-{_slug(name)}", gallery, size)
    tabs.setCurrentIndex(0)


def lesson_screens(app, w, gallery, size) -> None:
    w.models.load_model = lambda *_a: None  # the audit looks at the stage, not a new model
    w.models.load_draft = lambda *_a: None
    for k, lesson in enumerate(bundled_lessons()):
        w.classroom.open_lesson(lesson)
        for i in range(len(lesson.stages)):
            w.classroom.panel.go_to(i)
            wait(app, lambda: not w.runner.busy, 60)
            check(app, w, f"lesson{k + 1:02d}-stage{i + 1}", gallery, size)
        w.set_presentation(True)
        check(app, w, f"lesson{k + 1:02d}-presentation", gallery, size)
        w.set_presentation(False)
        w.classroom.close_lesson()


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in text.lower()).strip("_")


def main() -> None:
    model_dir, theme, walk = sys.argv[1:4]
    gallery = Path(sys.argv[4]) if len(sys.argv) > 4 else None
    if gallery is not None:
        gallery.mkdir(parents=True, exist_ok=True)
    sys.excepthook = _hook
    app, w = open_window(model_dir, theme, 120)
    size = (w.screen().size().width(), w.screen().size().height())
    run_story(app, w, 24)
    print("CONTROLS " + json.dumps(controls(w, theme)), flush=True)
    for view in ("normal", "presentation"):
        POKED.clear()
        w.set_presentation(view == "presentation")
        wait(app, lambda: False, 0.5)
        tab_screens(app, w, view, gallery, size)
    w.set_presentation(False)
    if walk == "all":
        lesson_screens(app, w, gallery, size)
    w.runner.shutdown()
    w.close()


if __name__ == "__main__":
    main()
