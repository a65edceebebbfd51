"""How the window looks: the theme, the zoom (fonts), and the About text."""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import QTimer
from PySide6.QtGui import QFont, QFontMetrics
from PySide6.QtWidgets import QApplication

from engine.models.catalog import BUNDLED
from gui.theme import THEMES, apply_palette

if TYPE_CHECKING:
    from gui.window import MainWindow


def apply_theme(w: MainWindow, name: str) -> None:
    w.theme = THEMES.get(name, THEMES["light"])
    app = QApplication.instance()
    if isinstance(app, QApplication):
        apply_palette(app, w.theme)
    w.acts.theme.setChecked(w.theme.name == "dark")
    w.pane.set_theme(w.theme)
    for plot in (w.dist, w.plots.speed, w.plots.entropy, w.beam_tree):
        plot.set_theme(w.theme)
    w.plots.dist_box.key.set_versions(w.dist.legend_versions())
    w.views.update_legend(w.theme)
    if hasattr(w, "scoring"):  # gui.score_actions' view
        w.scoring.apply_look()


def apply_zoom(w: MainWindow, points: int) -> None:
    """Every text follows the zoom: widgets, the token pane, and the plots' ticks, axis titles,
    labels and keys (the presentation view adds its bonus on top)."""
    w.font_pt = max(8, min(32, points))
    pt = w.text_points()  # the presentation view's size when it is on
    font = QFont(w.font())
    font.setPointSize(pt)
    app = QApplication.instance()
    if isinstance(app, QApplication):
        app.setFont(font)
    w.setFont(font)
    mono = QFont("DejaVu Sans Mono")
    mono.setStyleHint(QFont.StyleHint.Monospace)
    mono.setPointSize(pt + 3)
    w.pane.setFont(mono)
    w.pane.document().setDefaultFont(mono)
    prompt_font = QFont(mono)
    prompt_font.setPointSize(pt + 1)
    w.prompt.setFont(prompt_font)
    for plot in (w.dist, w.plots.speed, w.plots.entropy, w.beam_tree):
        plot.set_font_size(pt if w.presenting else pt - 1)
    if hasattr(w, "classroom"):
        w.classroom.panel.set_font_size(max(pt + 3, 27) if w.presenting else pt + 3)
        score = QFont(font)
        score.setBold(True)
        score.setPointSizeF(pt * 1.3)
        w.classroom.guess.score.setFont(score)
        w.classroom.guess.score.setWordWrap(True)
    # Room for two lines of the step summary whatever it says: a summary that grew from one
    # line to two would shift the plot below it, and repaint it, at every token.
    line = QFontMetrics(font).lineSpacing()
    w.plots.dist_box.info.setMinimumHeight(2 * line + 4)
    # Likewise the speculative statistics: clearing or filling them must not re-lay out the
    # controls column (measured: 15-28 ms of painting at the start of each run).
    w.method.stats.setMinimumHeight(3 * line + 4)
    if hasattr(w, "scoring"):
        w.scoring.apply_look()
    QTimer.singleShot(0, lambda: fit_left_column(w))  # after the new font reaches the widgets


def fit_left_column(w: MainWindow) -> None:
    """The controls column is as wide as its contents need (they change with the zoom)."""
    inner = w.left.widget()
    inner.adjustSize()
    scrollbar = w.left.verticalScrollBar().sizeHint().width()
    frame = 2 * w.left.frameWidth()
    w.left.setMinimumWidth(inner.minimumSizeHint().width() + scrollbar + frame + 4)


def share_width(w: MainWindow) -> None:
    """Split the window: the controls as narrow as they go, then 2 : 3 between the text and
    the plots (the plots need the width for token labels and their values)."""
    if w.presenting:
        return
    total = sum(w.splitter.sizes()) or w.width()
    left = max(w.left.minimumWidth(), min(360, total // 4))
    rest = max(0, total - left)
    w.splitter.setSizes([left, rest * 2 // 5, rest - rest * 2 // 5])


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
