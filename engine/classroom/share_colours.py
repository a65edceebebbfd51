"""The shared page's colours, from the window's own palette (engine.palette): the same
probability colours as the window's "Colour by probability" (ten bands, orange: unlikely ->
blue: likely), the Tree tab's four bands, the decision layers' ramp, the bars' colours; the
light theme, and the dark one where the reader's system asks for dark (``prefers-color-scheme``).
Written as CSS custom properties the page's style reads (``var(--b3)``). No Qt."""

from __future__ import annotations

from typing import Any

from engine.palette import DARK, LIGHT, TREE_BANDS, blend, decision_colour, prob_colour

BANDS = 10  # probability bands of the text: 0-10%, ..., 90-100%


def band_colours(theme: str) -> list[str]:
    """The ten probability bands' colours: the window's colour at each band's middle."""
    return [prob_colour(theme, (k + 0.5) / BANDS) for k in range(BANDS)]


def decision_bands(theme: str) -> list[str]:
    """Ten bands of decision layer / layers, the window's ramp at each band's start."""
    return [decision_colour(theme, k, BANDS - 1) for k in range(BANDS)]


def _variables(theme: dict[str, Any]) -> str:
    name = theme["name"]
    pairs = {
        "fg": theme["text"], "muted": theme["muted"], "bg": theme["base"],
        "panel": theme["window"], "line": blend(theme["base"], theme["muted"], 0.3),
        "accent": theme["accent"],
        "chosen": theme["chosen"], "raw": theme["raw_bar"], "after": theme["kept_bar"],
        "cut": theme["cut_bar"], "forced": theme["forced"],
        "dn": decision_colour(name, None, 1),
    }  # fmt: skip
    pairs.update({f"b{k}": c for k, c in enumerate(band_colours(name))})
    pairs.update({f"d{k}": c for k, c in enumerate(decision_bands(name))})
    pairs.update({f"t{k}": c for k, (_low, c, _label) in enumerate(TREE_BANDS)})
    return " ".join(f"--{k}: {v};" for k, v in pairs.items())


def colour_style() -> str:
    """The page's colour variables: light, and dark under ``prefers-color-scheme: dark``."""
    return (
        f":root {{ color-scheme: light dark; {_variables(LIGHT)} }}\n"
        f"@media (prefers-color-scheme: dark) {{ :root {{ {_variables(DARK)} }} }}\n"
    )
