"""Colours and fonts for the light and dark themes; the plots read them too."""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import QApplication


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


LIGHT = Theme(
    name="light", window="#f4f4f6", base="#ffffff", text="#1b1b1f", muted="#6b6b76",
    accent="#1f6feb", raw_bar="#9db8e0", kept_bar="#e8772e", cut_bar="#c9c9cf",
    chosen="#c0143c", plot_bg="#ffffff", grid_alpha=0.25,
    buckets=("#b9f2c4", "#fff2a8", "#ffd0a1", "#ffb3b8"),
    prob_low="#ffb3b8", prob_high="#b9f2c4", forced="#c9b8ff",
)  # fmt: skip

DARK = Theme(
    name="dark", window="#1e1f24", base="#16171b", text="#ececf1", muted="#9a9aa6",
    accent="#58a6ff", raw_bar="#3d5f8f", kept_bar="#f0883e", cut_bar="#4a4a52",
    chosen="#ff5c7a", plot_bg="#16171b", grid_alpha=0.3,
    buckets=("#1f5f35", "#6b5d12", "#7a4316", "#7d2630"),
    prob_low="#7d2630", prob_high="#1f5f35", forced="#4b3a8f", draft="#1d4f7a", target="#7a4a1d",
)  # fmt: skip

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
    app.setStyle("Fusion")
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
