"""Colours and fonts for the light and dark themes; the plots read them too."""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import QApplication

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


SERVER_BAR = "#009e73"  # a served model's own sampler (llama-server), beside ours
PRESENT_TOP_N = 8  # bars shown as the presentation view opens (more 20 pt labels miss 720 px)

# Okabe-Ito hues (Okabe & Ito 2008, "Color Universal Design"): told apart with every common
# colour-vision deficiency; no red-versus-green pair carries meaning anywhere in the window.
# Rank buckets run blue -> yellow -> orange -> purple; probability runs orange (low) -> blue.
LIGHT = Theme(
    name="light", window="#f4f4f6", base="#ffffff", text="#1b1b1f", muted="#5f5f6a",
    accent="#0072b2", raw_bar="#56b4e9", kept_bar="#e69f00", cut_bar="#8c8c96",
    chosen="#1b1b1f", plot_bg="#ffffff", grid_alpha=0.25,
    buckets=("#bfe0f5", "#f7ecA0", "#f5c98c", "#e2b3d3"),
    prob_low="#f5c98c", prob_high="#bfe0f5", forced="#c9e8dc",
    draft="#bfe0f5", target="#f5c98c",
)  # fmt: skip

DARK = Theme(
    name="dark", window="#1e1f24", base="#16171b", text="#ececf1", muted="#a4a4b0",
    accent="#56b4e9", raw_bar="#56b4e9", kept_bar="#e69f00", cut_bar="#b4b4be",
    chosen="#ffffff", plot_bg="#16171b", grid_alpha=0.3,
    buckets=("#1d5275", "#6b6114", "#7f4a12", "#633057"),
    prob_low="#7f4a12", prob_high="#1d5275", forced="#0d6650", draft="#1d5275", target="#7f4a12",
)  # fmt: skip

CUT_MARK = "#cc79a7"  # Okabe-Ito reddish purple: the line where the filters cut

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
    pal.setColor(QPalette.ColorRole.HighlightedText, QColor("#ffffff"))
    pal.setColor(QPalette.ColorRole.PlaceholderText, QColor(theme.muted))
    pal.setColor(QPalette.ColorRole.Link, QColor(theme.accent))
    app.setPalette(pal)
