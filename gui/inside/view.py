"""The Inside tab (issue 33): for the step in view, where in the model its token was decided
(the logit lens), what it looked at (attention, rollout), what pushed it over the runner-up
(direct logit attribution) and, on demand, which input tokens pushed it (integrated
gradients). It shows ``engine.internals`` records; gui.inside.actions asks for them."""

from __future__ import annotations

import html

import numpy as np
from PySide6.QtGui import QFontMetrics
from PySide6.QtWidgets import (
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from engine.internals.records import LensView, LogitAttribution, StepInside
from gui.common.theme import Theme
from gui.inside.pages import AttentionPage, InputsPage
from gui.inside.plots import SUBLAYER_COLORS, DlaPlot, KlPlot, LensGrid
from gui.inside.text import label, q


def top1_by_layer(lens: LensView) -> str:
    """The lens's top-1 token as the layers go, one run of layers per token."""
    runs: list[tuple[int, int, str]] = []
    for layer, top in enumerate(lens.layer_top):
        text = top[0][1]
        if runs and runs[-1][2] == text:
            runs[-1] = (runs[-1][0], layer, text)
        else:
            runs.append((layer, layer, text))
    shown = [f"{a}{'' if a == b else f'–{b}'} {q(t)}" for a, b, t in runs[-8:]]
    more = "… " if len(runs) > 8 else ""
    return "Top-1 by layer: " + more + " · ".join(shown)


def chip(sublayer: str) -> str:
    """A sub-block's name after a square in its bars' colour: the chart's key, in the sentence
    above it (a legend in the chart covered the bars of a short plot)."""
    color = SUBLAYER_COLORS.get(sublayer, "#777777")
    return f"<span style='color:{color}'>■</span>&nbsp;{html.escape(sublayer)}"


def dla_text(dla: LogitAttribution) -> str:
    """The split in one sentence, with the blocks that pushed most."""
    flat = [(v, layer + 1, dla.sublayers[j]) for (layer, j), v in np.ndenumerate(dla.blocks)]
    pushes = sorted(flat, reverse=True)[:3]
    top = ", ".join(f"layer {layer}'s {name} {v:+.2f}" for v, layer, name in pushes if v > 0)
    sums = " + ".join(f"{chip(name)} {dla.blocks[:, j].sum():+.2f}" for j, name in
                      enumerate(dla.sublayers))  # fmt: skip
    return (
        f"{q(dla.token[1])} over {q(dla.rival[1])}: logit difference <b>{dla.total:+.2f}</b> = "
        f"embedding {dla.embedding:+.2f} + {sums} + biases {dla.bias:+.2f}"
        f"<br>Pushed most by {top or 'no block'}."
    )


class InsideView(QWidget):
    """The tab: a header, then Lens / Attention / Logit attribution / Inputs."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("inside_view")
        self.header = label("Click a token to look inside the step that made it.")
        self.header.setObjectName("inside_header")
        self.grid, self.kl = LensGrid(), KlPlot()
        self.top1 = label()
        lens = QWidget()
        column = QVBoxLayout(lens)
        column.setContentsMargins(0, 0, 0, 0)
        column.addWidget(self.grid, 4)
        column.addWidget(self.top1)
        column.addWidget(self.kl, 1)
        self.attention = AttentionPage()
        self.dla, self.dla_note = DlaPlot(), label()
        dla = QWidget()
        column = QVBoxLayout(dla)
        column.setContentsMargins(0, 0, 0, 0)
        column.addWidget(self.dla_note)
        column.addWidget(self.dla, 1)
        self.inputs = InputsPage()
        self.pages = QTabWidget()
        self.pages.setObjectName("inside_pages")
        self.pages.setDocumentMode(True)
        self.pages.addTab(lens, "Lens")
        self.pages.addTab(self.attention, "Attention")
        self.pages.addTab(dla, "Logit attribution")
        self.pages.addTab(self.inputs, "Inputs")
        layout = QVBoxLayout(self)
        layout.addWidget(self.header)
        layout.addWidget(self.pages, 1)
        self.inside: StepInside | None = None

    def plots(self) -> tuple:
        return (self.grid, self.kl, self.dla, self.attention.plot, self.inputs.plot)

    def show_message(self, text: str) -> None:
        """A line instead of a step (no model, a served one, waiting for the run to end)."""
        self.header.setText(html.escape(text))

    def show_inside(self, inside: StepInside, where: str) -> None:
        self.inside = inside
        lens = inside.lens
        if lens.decision_layer is None:
            first = lens.candidates[0][1]  # the output's top-1
            decided = f"<b>never the top-1</b> (the model's first choice: {q(first)})"
        else:
            decided = f"decided at <b>layer {lens.decision_layer}</b> of {lens.layers}"
        notes = "".join(f"<br><i>{html.escape(n)}</i>" for n in inside.notes)
        self.header.setText(f"<b>{html.escape(where)}</b> {q(inside.token[1])} · {decided} · "
                            f"{inside.seconds * 1000:.0f} ms{notes}")  # fmt: skip
        self.grid.show_lens(lens)
        self.kl.show_kl(lens.kl_bits)
        self.top1.setText(top1_by_layer(lens))
        self.attention.show_inside(inside)
        dla = inside.attribution
        self.dla.show_dla(dla)
        self.dla_note.setText(dla_text(dla) if dla is not None else "")
        self.inputs.clear_result("Press the button: it costs a backward pass per step of the "
                                 "integral (a few seconds).")  # fmt: skip

    def set_theme(self, theme: Theme) -> None:
        for plot in self.plots():
            plot.set_theme(theme)
        self.attention.text.theme = theme
        self.inputs.text.theme = theme
        self.attention.redraw()

    def set_font_size(self, points: int) -> None:
        for plot in self.plots():
            plot.set_font_size(points)
        line = QFontMetrics(self.font()).lineSpacing()
        # each plot at least five lines of its text high: an axis, its title and a few ticks
        # read (the KL curve was 95 px at 1280x720, the logit attribution ~80 px at 20 pt)
        self.kl.setMinimumHeight(5 * line + 6)
        self.dla.setMinimumHeight(5 * line)

    def set_compact(self, compact: bool) -> None:
        """The presentation view: the tokens shaded, without the bars (their labels would
        overlap at 20 pt); hover a token for its value."""
        for page in (self.attention, self.inputs):
            page.plot.setVisible(not compact)
        self.kl.setVisible(not compact)  # the grid needs the rows more than KL its curve
