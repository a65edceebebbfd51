"""How the window looks: the theme, the zoom (every text's size, the presentation view's bonus
on top), the controls column's width, and the Help menu's About and shortcut boxes.
``Appearance`` owns the theme and the zoom and applies them to the widgets its host names; it
is given ``AppearanceNeeds``, never the window."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QFont, QFontMetrics
from PySide6.QtWidgets import QApplication, QMessageBox, QSplitter, QWidget

from engine.models.catalog import BUNDLED
from gui.common.theme import THEMES, Theme, apply_palette
from gui.shell.menus import BASE_FONT_PT, shortcuts_html

if TYPE_CHECKING:
    from gui.common.actions import ActionTable
    from gui.common.clock import DisplayClock
    from gui.common.token_pane import TokenPane
    from gui.run.view import RunView
    from gui.shell.areas import ControlsColumn, PlotArea, PromptBox

PRESENT_BONUS_PT = 8  # the presentation view's text: the zoom's size plus this...
PRESENT_MIN_PT = 20  # ...and never less than this (read from the back row at 1280x720)


@dataclass
class AppearanceNeeds:
    """What the looks are given: the widgets that follow the theme and the zoom in their own
    way, the display clock (every registered view follows through it), the actions (the Dark
    theme check box, the keys for Help) and the window as a widget (its font, width, and the
    dialogs' parent)."""

    left: ControlsColumn
    prompt_box: PromptBox
    pane: TokenPane
    plots: PlotArea
    splitter: QSplitter
    views: RunView
    clock: DisplayClock
    size_controls: Callable[[int], None]  # the controls dock's width
    actions: Callable[[], ActionTable]  # built after the parts
    parent: QWidget


class Appearance:
    """The window's theme and text size. ``presenting`` (set by the presentation view) adds
    its bonus to every text; what else follows the looks registers in the two lists."""

    def __init__(self, host: AppearanceNeeds) -> None:
        self.host = host
        self.theme: Theme = THEMES["light"]
        self.font_pt = BASE_FONT_PT  # the zoom
        self.presenting = False  # the text is sized for the presentation view
        self._shortcuts_box: QMessageBox | None = None

    def text_points(self) -> int:
        """The point size every text of the window uses now."""
        if self.presenting:
            return max(PRESENT_MIN_PT, self.font_pt + PRESENT_BONUS_PT)
        return self.font_pt

    def apply_theme(self, name: str) -> None:
        h = self.host
        self.theme = THEMES.get(name, THEMES["light"])
        app = QApplication.instance()
        if isinstance(app, QApplication):
            apply_palette(app, self.theme)
        h.actions().theme.setChecked(self.theme.name == "dark")
        h.pane.set_theme(self.theme)
        h.clock.set_theme(self.theme)  # every view registered with the display clock
        h.plots.dist_box.key.set_versions(h.plots.dist_box.plot.legend_versions())
        h.views.update_legend(self.theme)

    def apply_zoom(self, points: int) -> None:
        """Every text follows the zoom: widgets, the token pane, and the plots' ticks, axis
        titles, labels and keys (the presentation view adds its bonus on top)."""
        h = self.host
        self.font_pt = max(8, min(32, points))
        pt = self.text_points()  # the presentation view's size when it is on
        font = QFont(h.parent.font())
        font.setPointSize(pt)
        app = QApplication.instance()
        if isinstance(app, QApplication):
            app.setFont(font)
        h.parent.setFont(font)
        mono = QFont("DejaVu Sans Mono")
        mono.setStyleHint(QFont.StyleHint.Monospace)
        mono.setPointSize(pt + 3)
        h.pane.setFont(mono)
        h.pane.document().setDefaultFont(mono)
        prompt_font = QFont(mono)
        prompt_font.setPointSize(pt + 1)
        h.prompt_box.editor.setFont(prompt_font)
        h.clock.set_text_size(pt, self.presenting)  # every view registered with the clock
        # Room for two lines of the step summary whatever it says: a summary that grew from
        # one line to two would shift the plot below it, and repaint it, at every token.
        line = QFontMetrics(font).lineSpacing()
        h.plots.dist_box.info.setMinimumHeight(2 * line + 4)
        # Likewise the speculative statistics: clearing or filling them must not re-lay out the
        # controls column (measured: 15-28 ms of painting at the start of each run).
        h.left.method.stats.setMinimumHeight(3 * line + 4)
        QTimer.singleShot(0, self.fit_left_column)  # after the new font reaches the widgets

    def fit_left_column(self) -> None:
        """The controls column is as wide as its contents need (they change with the zoom)."""
        left = self.host.left
        inner = left.widget()
        inner.adjustSize()
        scrollbar = left.verticalScrollBar().sizeHint().width()
        frame = 2 * left.frameWidth()
        left.setMinimumWidth(inner.minimumSizeHint().width() + scrollbar + frame + 4)

    def share_width(self) -> None:
        """Split the window: the controls as narrow as they go, then 2 : 3 between the text and
        the plots (the plots need the width for token labels and their values)."""
        if self.presenting:
            return
        h = self.host
        total = sum(h.splitter.sizes()) + h.left.width() or h.parent.width()
        left = max(h.left.minimumWidth(), min(360, total // 4))
        h.size_controls(left)
        rest = max(0, total - left)
        h.splitter.setSizes([rest * 2 // 5, rest - rest * 2 // 5])

    def show_shortcuts(self) -> None:
        box = QMessageBox(
            QMessageBox.Icon.NoIcon, "Keyboard shortcuts", shortcuts_html(self.host.actions()),
            QMessageBox.StandardButton.Close, self.host.parent,
        )  # fmt: skip
        box.setTextFormat(Qt.TextFormat.RichText)
        box.open()
        self._shortcuts_box = box

    def show_about(self) -> None:
        QMessageBox.about(self.host.parent, "About Decoding Lab", about_text())


def about_text() -> str:
    import platform
    from importlib.metadata import PackageNotFoundError, version

    def v(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return "?"

    models = "".join(f"<li><b>{m.title}</b>: {m.licence}</li>" for m in BUNDLED.values())
    return (
        f"<h3>Decoding Lab {v('decoding-lab')}</h3>"
        "<p>Explore by hand how a language model turns probabilities into text.</p>"
        f"<p>Python {platform.python_version()} · torch {v('torch')} · transformers "
        f"{v('transformers')} · PySide6 {v('PySide6-Essentials')} · "
        f"pyqtgraph {v('pyqtgraph')}</p>"
        f"<p>Bundled models:</p><ul>{models}</ul>"
        "<p>Decoding Lab is licensed under Apache-2.0.</p>"
    )
