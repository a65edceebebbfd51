"""The presentation view (F5): for a projector. The output and the distribution fill the
screen, the sampler becomes one strip of big sliders, everything else hides; every text is at
least ``PRESENT_MIN_PT`` points and grows with the zoom (``gui.shell.appearance``).

``Presentation`` owns the switch: whether it is on, what it hides, and the normal view's split
and top-N it gives back. It is given ``PresentationNeeds``, never the window."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from PySide6.QtCore import QEvent, QObject, Qt, QTimer
from PySide6.QtWidgets import (
    QDockWidget,
    QMenuBar,
    QSplitter,
    QWidget,
)

from gui.common.theme import PRESENT_TOP_N

if TYPE_CHECKING:
    from gui.controls.presenter_strip import PresenterStrip
    from gui.run.view import RunView
    from gui.shell.appearance import Appearance
    from gui.shell.areas import OutputBox, PlotArea, PromptBox, StatusArea
    from gui.shell.menus import Bars

# The tabs' names when the full ones do not fit (at 20 pt, or a narrow plots column): short
# enough that every one reads whole at 1280x720 (they were cut to "Distributi…", "Experim…");
# the full name is the tab's tooltip.
SHORT_TABS = {"Distribution": "Bars", "Beam tree": "Beams", "Experiments": "Lab"}


@dataclass
class PresentationNeeds:
    """What the presentation view rearranges: the window's areas, the menu bar, the bars
    and the lesson's docks (built after the parts: read when the view switches), and the
    window as a widget (its width)."""

    left: QWidget
    prompt_box: PromptBox
    output: OutputBox
    plots: PlotArea
    status: StatusArea
    strip: PresenterStrip  # the presenter's sliders and the prompt's line
    splitter: QSplitter
    views: RunView
    menu_bar: QMenuBar
    bars: Callable[[], Bars]
    docks: Callable[[], tuple[QDockWidget, ...]]
    parent: QWidget


class Presentation(QObject):
    def __init__(self, host: PresentationNeeds, appearance: Appearance) -> None:
        super().__init__()
        self.host, self.appearance = host, appearance
        self._normal_sizes: list[int] = []  # the normal view's split, given back on leaving
        self._normal_top_n: int | None = None  # and its number of bars
        self._tab_names: dict[QWidget, str] = {}  # each tab's full name
        self._watching = False  # the tab widget's size and font are watched (fit_tab_names)
        QTimer.singleShot(0, host.parent, self.fit_tab_names)  # once the window is built
        self._following = False  # the prompt line follows the editor

    @property
    def presenting(self) -> bool:
        """Whether the view is on: the text size says it (``Appearance.presenting``)."""
        return self.appearance.presenting

    def hidden(self) -> list[QWidget]:
        """What the presentation view hides."""
        h = self.host
        box = h.plots.dist_box
        return [
            h.left, h.prompt_box, h.plots.curves, h.menu_bar, h.bars().toolbars["toolbar.view"],
            box.hint, box.top_n_label, box.top_n, h.output.color_mode, h.status.model,
        ]  # fmt: skip

    def set_presentation(self, on: bool) -> None:
        if on == self.presenting:
            return
        h = self.host
        self.appearance.presenting = on
        h.views.compact = on
        h.bars().table.presentation.setChecked(on)
        top_n = h.plots.dist_box.top_n
        if on:
            self._normal_sizes = h.splitter.sizes()
            self._normal_top_n = top_n.value()
            top_n.setValue(min(top_n.value(), PRESENT_TOP_N))
        for widget in self.hidden():
            widget.setVisible(not on)
        for action in h.bars().normal_only:
            action.setVisible(not on)
        for dock in h.docks():  # the lesson's and the guess round's, beside the hidden controls
            # the panels carry their own big titles; a dock's small title bar would not
            dock.setTitleBarWidget(QWidget() if on else None)
            dock.setMaximumWidth(int(h.parent.width() * 0.3) if on else 16777215)
        h.strip.setVisible(on)
        h.plots.fit_curves(not on)
        h.plots.tree_view.set_compact(on)
        self._show_prompt(on)
        # every tab's name shown whole (short names), rather than a tab bar that scrolls and
        # cuts the first name ("istribution") at 20 pt, or names cut to "Distributi…"
        h.plots.tabs.setUsesScrollButtons(not on)
        h.plots.tabs.setElideMode(Qt.TextElideMode.ElideRight)
        self.fit_tab_names()
        h.output.setTitle("Output" if on else h.output.normal_title)
        self.appearance.apply_zoom(self.appearance.font_pt)
        h.views.redraw(busy=False)
        if on:
            total = sum(h.splitter.sizes()) or h.parent.width()
            h.splitter.setSizes([total * 2 // 5, total * 3 // 5])
            if h.plots.tabs.currentWidget() is h.plots.compare_view:
                h.plots.tabs.setCurrentIndex(0)
        else:
            if self._normal_top_n is not None:
                top_n.setValue(self._normal_top_n)
            if self._normal_sizes:
                h.splitter.setSizes(self._normal_sizes)

    def _show_prompt(self, on: bool) -> None:
        """One line under the sliders: the prompt the class reads the story from (the editor
        is hidden), cut at its start when long."""
        h = self.host
        if not self._following:
            h.prompt_box.editor.textChanged.connect(lambda: self._show_prompt(self.presenting))
            self._following = True
        if on:
            h.strip.prompt_line.setText(" ".join(h.prompt_box.editor.toPlainText().split()))

    def fit_tab_names(self) -> None:
        """Each tab's full name where they all fit the bar, else the short names (the full one
        in the tooltip): at 20 pt, or beside a narrow plots column in the normal view."""
        tabs = self.host.plots.tabs
        if not self._watching:
            tabs.installEventFilter(self)
            self._watching = True
        bar, metrics = tabs.tabBar(), tabs.tabBar().fontMetrics()
        full = []
        for i in range(tabs.count()):
            full.append(self._tab_names.setdefault(tabs.widget(i), tabs.tabText(i)))
        frame = [bar.tabSizeHint(i).width() - metrics.horizontalAdvance(bar.tabText(i))
                 for i in range(tabs.count())]  # fmt: skip
        need = sum(f + metrics.horizontalAdvance(name) for f, name in zip(frame, full, strict=True))
        short = need > tabs.width() - 4
        for i, name in enumerate(full):
            shown = SHORT_TABS.get(name, name) if short else name
            if tabs.tabText(i) != shown:
                tabs.setTabText(i, shown)
            tabs.setTabToolTip(i, name)  # the full name, whether or not it is shortened

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt's name
        if event.type() in (QEvent.Type.Resize, QEvent.Type.FontChange):
            self.fit_tab_names()
        return False
