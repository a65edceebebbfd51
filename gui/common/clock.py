"""One display clock for the whole window (friture's one timer driving every view): the run
store's drain first, then every registered view's ``tick``; the theme and the text size reach
the same views through the same registration. A view implements the ``Redrawn`` methods it
needs (duck-typed, as friture's docks): nothing else owns a redraw timer."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from PySide6.QtCore import QObject, QTimer, Slot

from gui.common.theme import Theme

REDRAW_HZ = 30


class Redrawn(Protocol):
    """What the clock calls on a view (each method optional)."""

    def tick(self, busy: bool) -> None: ...  # a frame: draw what changed since the last
    def set_theme(self, theme: Theme) -> None: ...
    def set_text_size(self, points: int, presenting: bool) -> None: ...


class DisplayClock(QObject):
    def __init__(
        self, parent: QObject, drain: Callable[[], None], busy: Callable[[], bool]
    ) -> None:
        super().__init__(parent)
        self._drain, self._busy = drain, busy
        self.views: list[Any] = []
        self.timer = QTimer(self, interval=1000 // REDRAW_HZ, timeout=self.tick)

    def register(self, *views: Any) -> None:
        for view in views:
            if not any(hasattr(view, m) for m in ("tick", "set_theme", "set_text_size")):
                raise TypeError(f"{type(view).__name__} has none of the clock's methods")
            self.views.append(view)

    def start(self) -> None:
        self.timer.start()

    def stop(self) -> None:
        self.timer.stop()

    @Slot()
    def tick(self) -> None:
        self._drain()
        busy = self._busy()
        for view in self.views:
            tick = getattr(view, "tick", None)
            if tick is not None:
                tick(busy)

    def set_theme(self, theme: Theme) -> None:
        for view in self.views:
            if hasattr(view, "set_theme"):
                view.set_theme(theme)

    def set_text_size(self, points: int, presenting: bool) -> None:
        for view in self.views:
            if hasattr(view, "set_text_size"):
                view.set_text_size(points, presenting)
