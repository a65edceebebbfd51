"""One palette for the window and the web page it exports (issue 54): the light and dark
themes' colours as plain data, read by gui.common.theme (the window's Theme) and by
engine.classroom.share (the page's style). No Qt here: the page is written without the window.

Okabe-Ito hues (Okabe & Ito 2008, "Color Universal Design"): told apart with every common
colour-vision deficiency; no red-versus-green pair carries meaning anywhere. Rank buckets run
blue -> yellow -> orange -> purple; probability runs orange (low) -> blue (high)."""

from __future__ import annotations

from typing import Any

LIGHT: dict[str, Any] = {
    "name": "light", "window": "#f4f4f6", "base": "#ffffff", "text": "#1b1b1f",
    "muted": "#5f5f6a", "accent": "#0072b2", "raw_bar": "#56b4e9", "kept_bar": "#e69f00",
    "cut_bar": "#8c8c96", "chosen": "#1b1b1f", "plot_bg": "#ffffff", "grid_alpha": 0.25,
    "buckets": ("#bfe0f5", "#f7eca0", "#f5c98c", "#e2b3d3"),
    "prob_low": "#f5c98c", "prob_high": "#bfe0f5", "forced": "#c9e8dc",
    "draft": "#bfe0f5", "target": "#f5c98c",
}  # fmt: skip

DARK: dict[str, Any] = {
    "name": "dark", "window": "#1e1f24", "base": "#16171b", "text": "#ececf1",
    "muted": "#a4a4b0", "accent": "#56b4e9", "raw_bar": "#56b4e9", "kept_bar": "#e69f00",
    "cut_bar": "#b4b4be", "chosen": "#ffffff", "plot_bg": "#16171b", "grid_alpha": 0.3,
    "buckets": ("#1d5275", "#6b6114", "#7f4a12", "#633057"),
    "prob_low": "#7f4a12", "prob_high": "#1d5275", "forced": "#0d6650",
    "draft": "#1d5275", "target": "#7f4a12",
}  # fmt: skip

PALETTES = {"light": LIGHT, "dark": DARK}

CUT_MARK = "#cc79a7"  # Okabe-Ito reddish purple: the line where the filters cut
SERVER_BAR = "#009e73"  # a served model's own sampler (llama-server), beside ours

# The Tree tab's (and the page's tree's) key of a token's probability: reddish purple (rare)
# -> orange -> yellow -> sky blue (likely); black text reads on each in both themes.
TREE_BANDS = (
    (0.5, "#56b4e9", "≥ 50%"),
    (0.2, "#f0e442", "20–50%"),
    (0.05, "#e69f00", "5–20%"),
    (0.0, "#cc79a7", "< 5%"),
)

# Decided early -> late: pale yellow, bluish green, blue (light enough for the text on them);
# never the top-1: grey, a colour the ramp does not pass through.
DECISION_RAMP = {
    "light": ("#fff0a8", "#a9dfc6", "#86bde8"),
    "dark": ("#6b6114", "#1f6650", "#1d5a8f"),
}
NEVER_TOP1 = {"light": "#d6d6dc", "dark": "#4a4a52"}


def blend(low: str, high: str, t: float) -> str:
    """The linear blend of two ``#rrggbb`` colours at ``t`` in [0, 1], as ``#rrggbb``."""
    t = min(1.0, max(0.0, t)) if t == t else 0.0  # NaN: the low end
    a = [int(low[i : i + 2], 16) for i in (1, 3, 5)]
    b = [int(high[i : i + 2], 16) for i in (1, 3, 5)]
    return "#" + "".join(f"{round(x + (y - x) * t):02x}" for x, y in zip(a, b, strict=True))


def prob_colour(theme: str, p: float) -> str:
    """A token's colour by its probability (the window's "Colour by probability")."""
    colours = PALETTES.get(theme, LIGHT)
    return blend(colours["prob_low"], colours["prob_high"], p)


def tree_band(p: float) -> int:
    """The index in ``TREE_BANDS`` of probability ``p`` (0: the likeliest band)."""
    return next((k for k, (low, _c, _l) in enumerate(TREE_BANDS) if p >= low), len(TREE_BANDS) - 1)


def decision_colour(theme: str, layer: int | None, layers: int) -> str:
    """The colour of a token decided at ``layer`` of ``layers`` (None: never the top-1)."""
    if layer is None:
        return NEVER_TOP1.get(theme, NEVER_TOP1["light"])
    early, middle, late = DECISION_RAMP.get(theme, DECISION_RAMP["light"])
    t = layer / max(1, layers)
    return blend(early, middle, 2 * t) if t <= 0.5 else blend(middle, late, 2 * t - 1)
