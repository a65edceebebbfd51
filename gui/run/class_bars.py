"""The class's answers as bars of their own in the distribution plot (a live round): on each
token's row, beside the model's bar and the sampler's, the share of the class that named the
token. ``DistributionPlot`` holds one ``ClassBars`` and calls ``draw`` as it draws its bars;
the classroom reaches it only through ``gui.run.api.show_class`` (and ``class_shares``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtGui import QColor

from gui.common.step_text import pct

# Okabe-Ito vermillion: told apart from the model's sky blue, the sampler's orange and the
# served model's bluish green with the common colour-vision deficiencies
CLASS_BAR = {"light": "#d55e00", "dark": "#f0804a"}
HEIGHT = 0.26  # a third of a row: the model's bar above, the sampler's in the middle


class ClassBars:
    """``shares``: token id -> the fraction of the class's answers that named it. Setting
    them redraws nothing by itself (the plot does, in ``set_step``); an appearing or vanishing
    set tells the plot's key to change (``legend_changed``)."""

    def __init__(self, plot: Any) -> None:
        self.plot = plot
        self._shares: dict[int, float] = {}
        self.ends = np.zeros(0)  # the class's share on each drawn row (0: none named it)
        self.item = pg.BarGraphItem(x0=[], y=[], height=HEIGHT, width=[])
        plot.addItem(self.item)

    @property
    def shares(self) -> dict[int, float]:
        return self._shares

    @shares.setter
    def shares(self, value: dict[int, float]) -> None:
        was = self.shown
        self._shares = {int(k): float(v) for k, v in value.items() if v > 0}
        if not self._shares:
            self.item.setOpts(x0=[], y=[], width=[])
            self.ends = np.zeros(0)
        if self.shown != was:
            self.plot.legend_changed.emit()

    @property
    def shown(self) -> bool:
        return bool(self._shares)

    def colour(self) -> str:
        return CLASS_BAR.get(self.plot.theme.name, CLASS_BAR["light"])

    def share(self, token_id: int) -> float:
        return self._shares.get(token_id, 0.0)

    def draw(self, y: np.ndarray, off: float) -> None:
        """The class's bar on each of the plot's rows (``y``, the rows' centres) that a student
        named, ``off`` below the centre (the model's bar is as far above)."""
        rows = self.plot.rows
        self.ends = np.array([self.share(r[1].token_id) for r in rows], dtype=float)
        named = self.ends > 0
        if not self.shown or not named.any():
            self.item.setOpts(x0=[], y=[], width=[])
            return
        self.item.setOpts(x0=np.zeros(int(named.sum())), y=y[named] + off, width=self.ends[named],
                          height=HEIGHT, brush=pg.mkBrush(self.colour()),
                          pen=pg.mkPen(None))  # fmt: skip

    def label(self, token_id: int, guess: str | None) -> str:
        """What a bar's value label adds: the class's share where its bars are drawn (short:
        a long label would sit over the bars), else a guess round's guess that named it."""
        if self.shown:
            share = self.share(token_id)
            return f"  ★ class {pct(share)}" if share > 0 else ""
        return f"  ★ guessed “{guess}”" if guess is not None else ""

    def key_colour(self) -> str:
        """The key's colour for the class's bars while they are drawn ("" for none)."""
        return QColor(self.colour()).name() if self.shown else ""


def class_shares(counts: dict[int, int]) -> dict[int, float]:
    """Students per token -> the class's distribution (each token's share of the answers)."""
    total = sum(counts.values())
    return {t: n / total for t, n in counts.items()} if total else {}


def show_class(plot: Any, marks: dict[int, str], counts: dict[int, int]) -> None:
    """Mark the tokens the class named (``marks``: the bar's label) and draw the class's own
    distribution (``counts``: students per token) beside the model's, until another step is
    shown."""
    plot.set_marks(marks, class_shares(counts))
