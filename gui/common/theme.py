"""Colours and fonts for the light and dark themes; the plots read them too. The colours come
from engine.palette (the exported web page reads the same ones)."""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import QApplication

from engine import palette
from engine.palette import CUT_MARK as CUT_MARK  # the plots import them from here
from engine.palette import SERVER_BAR as SERVER_BAR
from gui.common.style import MarkedStyle


@dataclass(frozen=True)
class Theme:
    name: str
    window: str
    base: str
    text: str
    muted: str
    accent: str
    raw_bar: str  # raw probability bars
    kept_bar: str  # processed probability bars
    cut_bar: str  # tokens removed by the filters
    chosen: str  # the sampled token
    plot_bg: str
    grid_alpha: float
    # GLTR-style rank buckets: top-1, top-10, top-100, rest
    buckets: tuple[str, str, str, str]
    # probability colour map end points (low -> high)
    prob_low: str
    prob_high: str
    forced: str
    draft: str = "#b6e3ff"  # speculative: accepted draft tokens
    target: str = "#ffd8b5"  # speculative: tokens the target model chose


PRESENT_TOP_N = 8  # bars shown as the presentation view opens (more 20 pt labels miss 720 px)

# The colours themselves live in engine.palette, which the exported web page reads too: one
# palette for the window and its page (issue 54).
LIGHT = Theme(**palette.LIGHT)
DARK = Theme(**palette.DARK)

THEMES = {"light": LIGHT, "dark": DARK}
BUCKET_LABELS = ("top-1", "top-10", "top-100", "rest")


def bucket_of(rank: int) -> int:
    if rank <= 1:
        return 0
    if rank <= 10:
        return 1
    if rank <= 100:
        return 2
    return 3


def mix(low: str, high: str, t: float) -> QColor:
    """Linear blend of two colours, t in [0, 1]."""
    t = min(1.0, max(0.0, t))
    a, b = QColor(low), QColor(high)
    return QColor(
        round(a.red() + (b.red() - a.red()) * t),
        round(a.green() + (b.green() - a.green()) * t),
        round(a.blue() + (b.blue() - a.blue()) * t),
    )


def _luminance(colour: str) -> float:
    """WCAG 2.1 relative luminance of a ``#rrggbb`` colour."""
    channels = [int(colour[i : i + 2], 16) / 255 for i in (1, 3, 5)]
    r, g, b = (c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def text_on(colour: str) -> str:
    """White or near-black, whichever reads better on ``colour`` (the selected row's text on
    the dark theme's sky blue was white at 2.3:1; near-black reads at 8:1)."""
    light = _luminance(colour)
    on_white, on_black = 1.05 / (light + 0.05), (light + 0.05) / (_luminance("#16171b") + 0.05)
    return "#ffffff" if on_white >= on_black else "#16171b"


def apply_palette(app: QApplication, theme: Theme) -> None:
    style = app.style()
    if not isinstance(style, MarkedStyle):
        style = MarkedStyle()
        app.setStyle(style)
    style.theme = theme
    pal = QPalette()
    pal.setColor(QPalette.ColorRole.Window, QColor(theme.window))
    pal.setColor(QPalette.ColorRole.WindowText, QColor(theme.text))
    pal.setColor(QPalette.ColorRole.Base, QColor(theme.base))
    pal.setColor(QPalette.ColorRole.AlternateBase, QColor(theme.window))
    pal.setColor(QPalette.ColorRole.Text, QColor(theme.text))
    pal.setColor(QPalette.ColorRole.Button, QColor(theme.window))
    pal.setColor(QPalette.ColorRole.ButtonText, QColor(theme.text))
    pal.setColor(QPalette.ColorRole.ToolTipBase, QColor(theme.base))
    pal.setColor(QPalette.ColorRole.ToolTipText, QColor(theme.text))
    pal.setColor(QPalette.ColorRole.Highlight, QColor(theme.accent))
    pal.setColor(QPalette.ColorRole.HighlightedText, QColor(text_on(theme.accent)))
    pal.setColor(QPalette.ColorRole.PlaceholderText, QColor(theme.muted))
    pal.setColor(QPalette.ColorRole.Link, QColor(theme.accent))
    app.setPalette(pal)
