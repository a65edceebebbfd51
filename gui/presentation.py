"""The presentation view (F5): for a projector. The output and the distribution fill the
screen, the sampler becomes one strip of big sliders, everything else hides; every text is at
least ``PRESENT_MIN_PT`` points and grows with the zoom."""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtWidgets import QWidget

from gui import appearance

if TYPE_CHECKING:
    from gui.window import MainWindow

PRESENT_BONUS_PT = 8  # the presentation view's text: the zoom's size plus this...
PRESENT_MIN_PT = 20  # ...and never less than this (read from the back row at 1280x720)
PRESENT_TOP_N = 8  # bars shown when the view opens (more labels at 20 pt do not fit 720 px)


def text_points(w: MainWindow) -> int:
    """The point size every text of the window uses now."""
    if w.presenting:
        return max(PRESENT_MIN_PT, w.font_pt + PRESENT_BONUS_PT)
    return w.font_pt


def set_presentation(w: MainWindow, on: bool) -> None:
    if on == w.presenting:
        return
    w.presenting = on
    w.views.compact = on
    w.acts.presentation.setChecked(on)
    top_n = w.plots.dist_box.top_n
    if on:
        w._normal_sizes = w.splitter.sizes()
        w._normal_top_n = top_n.value()
        top_n.setValue(min(top_n.value(), PRESENT_TOP_N))
    box = w.plots.dist_box
    for widget in (
        w.left,
        w.prompt_box,
        w.plots.curves,
        w.menuBar(),
        w.view_toolbar,
        box.hint,
        box.top_n_label,
        box.top_n,
        w.output.color_mode,
        w.status.model,
    ):
        widget.setVisible(not on)  # fmt: skip
    for action in w.normal_only_actions:
        action.setVisible(not on)
    for dock in (w.classroom.lesson_dock, w.classroom.guess_dock):
        # the panels carry their own big titles; a dock's small title bar would not
        dock.setTitleBarWidget(QWidget() if on else None)
        dock.setMaximumWidth(int(w.width() * 0.3) if on else 16777215)
    w.strip.setVisible(on)
    w.output.setTitle("Output" if on else w.output.normal_title)
    appearance.apply_zoom(w, w.font_pt)
    w.views.redraw(busy=False)
    if on:
        total = sum(w.splitter.sizes()) or w.width()
        w.splitter.setSizes([0, total * 2 // 5, total * 3 // 5])
        if w.tabs.currentWidget() is w.compare_view:
            w.tabs.setCurrentIndex(0)
    else:
        top_n.setValue(getattr(w, "_normal_top_n", top_n.value()))
        sizes = getattr(w, "_normal_sizes", None)
        if sizes:
            w.splitter.setSizes(sizes)
