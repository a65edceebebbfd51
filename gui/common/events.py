"""One way to follow another widget's events: ``OnEvent`` calls a function when a watched
object gets an event of the given kinds (a resize, a close, ...), at once or on the next turn
of the event loop (``later``: after the widget's own handler and the layout it starts, and
once for a burst of events). It is the watched object's child, so it goes with it; nothing is
called after that."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from PySide6.QtCore import QEvent, QObject, QTimer


class OnEvent(QObject):
    """Calls ``then`` when one of ``watched`` gets an event of one of ``kinds``."""

    def __init__(
        self,
        watched: QObject | Iterable[QObject],
        kinds: Iterable[QEvent.Type],
        then: Callable[[], None],
        later: bool = False,
    ) -> None:
        objects = [watched] if isinstance(watched, QObject) else list(watched)
        super().__init__(objects[0])
        self.kinds, self.then = frozenset(kinds), then
        self.timer: QTimer | None = None  # ``later``: one call for the events of a turn
        if later:
            self.timer = QTimer(self)
            self.timer.setSingleShot(True)
            self.timer.timeout.connect(then)
        for obj in objects:
            obj.installEventFilter(self)

    def call_later(self) -> None:
        """Call ``then`` on the next turn of the event loop (or now, without a timer)."""
        if self.timer is None:
            self.then()
        else:
            self.timer.start(0)

    def eventFilter(self, _watched: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt override
        if event.type() in self.kinds:
            self.call_later()
        return False
