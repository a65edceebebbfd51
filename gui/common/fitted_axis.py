"""An axis whose numbers never run into each other (issue 54's screen audit). pyqtgraph puts at
least three numbered ticks on any axis, whatever its length and text size: the presentation
view's short plots drew "2 1 0" on 60 px at 20 pt, the digits touching. Here the major spacing
steps up through 1, 2, 5 x 10^k until each label has its room (a line of the tick font along a
vertical axis, the widest number plus a character along a horizontal one); an axis with room
keeps pyqtgraph's ticks as they were. Custom ticks (``setTicks``) are drawn as given."""

from __future__ import annotations

from math import floor, log10

import pyqtgraph as pg
from PySide6.QtGui import QFont, QFontMetrics

NICE = (1.0, 2.0, 5.0, 10.0)


def next_nice(step: float) -> float:
    """The next of 1, 2, 5 x 10^k above ``step``."""
    power = 10.0 ** floor(log10(step))
    mantissa = step / power
    return next(n for n in NICE if n > mantissa + 1e-9) * power


class FittedAxis(pg.AxisItem):
    """A pyqtgraph axis whose major ticks are at least one label apart (no minor labels)."""

    def label_room(self, low: float, high: float, spacing: float) -> float:
        """Pixels one tick label needs along this axis."""
        metrics = QFontMetrics(self.style.get("tickFont") or QFont())
        if self.orientation in ("left", "right"):
            return 1.1 * metrics.height()
        texts = self.tickStrings([low, high], 1.0, spacing)
        return max(metrics.horizontalAdvance(t) for t in texts) + metrics.averageCharWidth()

    def tickSpacing(self, minVal: float, maxVal: float, size: float):  # noqa: ANN201, N803
        levels = super().tickSpacing(minVal, maxVal, size)
        span = abs(maxVal - minVal)
        if not levels or size <= 0 or span <= 0:
            return levels
        major = levels[0][0]
        if span / major * self.label_room(minVal, maxVal, major) <= size:
            return levels  # room enough: pyqtgraph's own
        while span / major * self.label_room(minVal, maxVal, major) > size and major < span:
            major = next_nice(major)
        return [(major, 0.0)]


def fit_axes(item: pg.PlotItem) -> None:
    """Give a plot's left and bottom axes the fitted spacing (before anything styles them)."""
    item.setAxisItems({"left": FittedAxis("left"), "bottom": FittedAxis("bottom")})
