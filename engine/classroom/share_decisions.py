"""The shared page's decision layers (issue 33): the output again, each token shaded by the
band of its decision layer (engine.internals) with the layer in its title. Tokens are untrusted
text: escaped by ``html.escape`` like the rest of the page (engine.classroom.share)."""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

from engine.records import Step

# Decision layers (issue 33): early pale yellow -> bluish green -> blue at the last layer, never
# the top choice grey: the window's ramp (engine.palette), ten bands of layer / layers, as the
# page's colour variables (engine.classroom.share_colours).
DECISION_STYLE = "".join(f".d{k} {{ background: var(--d{k}); }} " for k in range(10))
DECISION_STYLE = f"""
#decided {{ white-space: pre-wrap; font: 1.05rem/1.9 ui-monospace, monospace;
  border: 1px solid var(--line); border-radius: 4px; padding: .6rem .8rem; }}
{DECISION_STYLE}.dn {{ background: var(--dn); }}
"""


def decision_band(layer: int | None, layers: int) -> str:
    if layer is None:
        return "dn"
    return f"d{min(9, int(10 * layer / max(1, layers)))}"


def decision_section(steps: Sequence[Step], decided: Mapping[int, int | None],
                      layers: int) -> str:  # fmt: skip
    """The output again, each token shaded by its decision layer, the layer in its title."""
    spans = []
    for i, s in enumerate(steps):
        if i in decided:
            d = decided[i]
            tip = "never the top choice" if d is None else f"decided at layer {d} of {layers}"
            cls = decision_band(d, layers)
        else:
            tip, cls = "not read", ""
        spans.append(f'<span class="tok {cls}" title="{html.escape(tip)}">'
                     f"{html.escape(s.text or s.token_str)}</span>")  # fmt: skip
    chips = "".join(f'<span class="chip d{k}">{round(k * layers / 9)}</span>'
                    for k in range(0, 10, 3))  # fmt: skip
    return (
        '<h2>Where each token was decided</h2>\n<p class="meta">Each token shaded by its '
        f"decision layer: the first of the model's {layers} layers from which it is the logit "
        "lens's top choice and stays so (pale: early; blue: the last layer; grey: never the top "
        'choice). Hover a token for its layer.</p>\n<div class="legend"><span class="label">'
        f'decided at layer:</span>{chips}<span class="chip dn">never</span></div>\n'
        f'<div id="decided">{"".join(spans)}</div>\n'
    )


def with_decisions(data: dict[str, Any], steps: Sequence[Step],
                    decisions: Mapping[int, int | None], layers: int) -> str:  # fmt: skip
    """Each step's decision layer into the page's data (the tooltip reads it); the section."""
    data["layers"] = layers
    for i, row in enumerate(data["steps"]):
        if i in decisions:
            row["decision_layer"] = decisions[i]
    return decision_section(steps, decisions, layers)
