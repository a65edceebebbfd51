"""The presentation view (F5): for a projector. The output and the distribution fill the
screen, the sampler becomes one strip of big sliders, everything else hides; every text is at
least ``PRESENT_MIN_PT`` points and grows with the zoom (``gui.appearance``).

``Presentation`` owns the switch: whether it is on, what it hides, and the normal view's split
and top-N it gives back. It never imports the window: ``PresentationHost`` is what it uses."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QDockWidget, QMenuBar, QSplitter, QToolBar, QWidget

if TYPE_CHECKING:
    from gui.appearance import Appearance
    from gui.menus import Actions
    from gui.panels import OutputBox, PlotArea, StatusArea
    from gui.views import RunView

PRESENT_TOP_N = 8  # bars shown when the view opens (more labels at 20 pt do not fit 720 px)


class LessonDocks(Protocol):
    lesson_dock: QDockWidget
    guess_dock: QDockWidget


class PresentationHost(Protocol):
    """The window as the presentation view rearranges it."""

    left: QWidget
    prompt_box: QWidget
    output: OutputBox
    plots: PlotArea
    status: StatusArea
    strip: QWidget  # the presenter's sliders
    splitter: QSplitter
    views: RunView
    acts: Actions
    view_toolbar: QToolBar
    normal_only_actions: list[QAction]  # tool bar entries of the normal view only
    classroom: LessonDocks

    def menuBar(self) -> QMenuBar: ...  # noqa: N802 - Qt's name
    def width(self) -> int: ...


class Presentation:
    def __init__(self, host: PresentationHost, appearance: Appearance) -> None:
        self.host, self.appearance = host, appearance
        self._normal_sizes: list[int] = []  # the normal view's split, given back on leaving
        self._normal_top_n: int | None = None  # and its number of bars

    @property
    def presenting(self) -> bool:
        """Whether the view is on: the text size says it (``Appearance.presenting``)."""
        return self.appearance.presenting

    def hidden(self) -> list[QWidget]:
        """What the presentation view hides."""
        h = self.host
        box = h.plots.dist_box
        return [
            h.left, h.prompt_box, h.plots.curves, h.menuBar(), h.view_toolbar, box.hint,
            box.top_n_label, box.top_n, h.output.color_mode, h.status.model,
        ]  # fmt: skip

    def set_presentation(self, on: bool) -> None:
        if on == self.presenting:
            return
        h = self.host
        self.appearance.presenting = on
        h.views.compact = on
        h.acts.presentation.setChecked(on)
        top_n = h.plots.dist_box.top_n
        if on:
            self._normal_sizes = h.splitter.sizes()
            self._normal_top_n = top_n.value()
            top_n.setValue(min(top_n.value(), PRESENT_TOP_N))
        for widget in self.hidden():
            widget.setVisible(not on)
        for action in h.normal_only_actions:
            action.setVisible(not on)
        for dock in (h.classroom.lesson_dock, h.classroom.guess_dock):
            # the panels carry their own big titles; a dock's small title bar would not
            dock.setTitleBarWidget(QWidget() if on else None)
            dock.setMaximumWidth(int(h.width() * 0.3) if on else 16777215)
        h.strip.setVisible(on)
        # every tab's name shown, shortened if it must be ("Experim…"), rather than a tab bar
        # that scrolls and cuts the first name ("istribution") at 20 pt
        h.plots.tree_view.set_compact(on)
        h.plots.tabs.setUsesScrollButtons(not on)
        h.plots.tabs.setElideMode(Qt.TextElideMode.ElideRight)
        h.output.setTitle("Output" if on else h.output.normal_title)
        self.appearance.apply_zoom(self.appearance.font_pt)
        h.views.redraw(busy=False)
        if on:
            total = sum(h.splitter.sizes()) or h.width()
            h.splitter.setSizes([0, total * 2 // 5, total * 3 // 5])
            if h.plots.tabs.currentWidget() is h.plots.compare_view:
                h.plots.tabs.setCurrentIndex(0)
        else:
            if self._normal_top_n is not None:
                top_n.setValue(self._normal_top_n)
            if self._normal_sizes:
                h.splitter.setSizes(self._normal_sizes)
