"""How the window looks: the theme, the zoom (every text's size, the presentation view's bonus
on top), the controls column's width, and the Help menu's About and shortcut boxes.
``Appearance`` owns the theme and the zoom and applies them to the widgets its host names; it
never imports the window."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QFont, QFontMetrics
from PySide6.QtWidgets import QApplication, QMessageBox, QPlainTextEdit, QSplitter, QWidget

from engine.models.catalog import BUNDLED
from gui.common.theme import THEMES, Theme, apply_palette
from gui.shell.menus import BASE_FONT_PT, shortcuts_html

if TYPE_CHECKING:
    from gui.run.token_pane import TokenPane
    from gui.run.view import RunView
    from gui.shell.areas import ControlsColumn, PlotArea
    from gui.shell.menus import Actions

PRESENT_BONUS_PT = 8  # the presentation view's text: the zoom's size plus this...
PRESENT_MIN_PT = 20  # ...and never less than this (read from the back row at 1280x720)


class AppearanceHost(Protocol):
    """The window as Appearance sees it: the widgets that follow the theme and the zoom."""

    acts: Actions  # the Dark theme check box, the keys for Help
    left: ControlsColumn
    prompt: QPlainTextEdit
    pane: TokenPane
    plots: PlotArea
    splitter: QSplitter
    views: RunView

    def font(self) -> QFont: ...
    def setFont(self, font: QFont) -> None: ...  # noqa: N802 - Qt's name
    def width(self) -> int: ...
    def window(self) -> QWidget: ...  # a dialog's parent


class Appearance:
    """The window's theme and text size. ``presenting`` (set by the presentation view) adds
    its bonus to every text; what else follows the looks registers in the two lists."""

    def __init__(self, host: AppearanceHost) -> None:
        self.host = host
        self.theme: Theme = THEMES["light"]
        self.font_pt = BASE_FONT_PT  # the zoom
        self.presenting = False  # the text is sized for the presentation view
        self.on_look: list[Callable[[], None]] = []  # after a new theme or zoom
        self.on_text_size: list[Callable[[QFont, bool], None]] = []  # (font, presenting)
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
        h.acts.theme.setChecked(self.theme.name == "dark")
        h.pane.set_theme(self.theme)
        for plot in self._plots():
            plot.set_theme(self.theme)
        h.plots.dist_box.key.set_versions(h.plots.dist_box.plot.legend_versions())
        h.views.update_legend(self.theme)
        for follow in self.on_look:  # gui.score.actions' view
            follow()

    def apply_zoom(self, points: int) -> None:
        """Every text follows the zoom: widgets, the token pane, and the plots' ticks, axis
        titles, labels and keys (the presentation view adds its bonus on top)."""
        h = self.host
        self.font_pt = max(8, min(32, points))
        pt = self.text_points()  # the presentation view's size when it is on
        font = QFont(h.font())
        font.setPointSize(pt)
        app = QApplication.instance()
        if isinstance(app, QApplication):
            app.setFont(font)
        h.setFont(font)
        mono = QFont("DejaVu Sans Mono")
        mono.setStyleHint(QFont.StyleHint.Monospace)
        mono.setPointSize(pt + 3)
        h.pane.setFont(mono)
        h.pane.document().setDefaultFont(mono)
        prompt_font = QFont(mono)
        prompt_font.setPointSize(pt + 1)
        h.prompt.setFont(prompt_font)
        for plot in self._plots():
            plot.set_font_size(pt if self.presenting else pt - 1)
        for follow_size in self.on_text_size:  # the lesson and guess panels
            follow_size(font, self.presenting)
        # Room for two lines of the step summary whatever it says: a summary that grew from
        # one line to two would shift the plot below it, and repaint it, at every token.
        line = QFontMetrics(font).lineSpacing()
        h.plots.dist_box.info.setMinimumHeight(2 * line + 4)
        # Likewise the speculative statistics: clearing or filling them must not re-lay out the
        # controls column (measured: 15-28 ms of painting at the start of each run).
        h.left.method.stats.setMinimumHeight(3 * line + 4)
        for follow in self.on_look:
            follow()
        QTimer.singleShot(0, self.fit_left_column)  # after the new font reaches the widgets

    def _plots(self) -> tuple:
        p = self.host.plots
        return (p.dist_box.plot, p.speed, p.entropy, p.beam_tree)

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
        total = sum(h.splitter.sizes()) or h.width()
        left = max(h.left.minimumWidth(), min(360, total // 4))
        rest = max(0, total - left)
        h.splitter.setSizes([left, rest * 2 // 5, rest - rest * 2 // 5])

    def show_shortcuts(self) -> None:
        box = QMessageBox(
            QMessageBox.Icon.NoIcon, "Keyboard shortcuts", shortcuts_html(self.host.acts),
            QMessageBox.StandardButton.Close, self.host.window(),
        )  # fmt: skip
        box.setTextFormat(Qt.TextFormat.RichText)
        box.open()
        self._shortcuts_box = box

    def show_about(self) -> None:
        QMessageBox.about(self.host.window(), "About Decoding Lab", about_text())


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
