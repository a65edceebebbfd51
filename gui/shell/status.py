"""The status bar's parts: the model, a busy bar, the latest message and the speed. The
message comes first: the model's and the speed's texts are parts joined by " · ", and the parts
after their first ones step aside while the message needs the room (issue 54: "Done: 113 tokens;
the model ende…" at 1280x720); what is still cut shows whole on hover."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtGui import QFontMetrics
from PySide6.QtWidgets import QLabel, QProgressBar, QStatusBar, QToolTip

from gui.common.fitting import ElidedLabel

SEP = " · "  # between the parts of the model's and the speed's texts
BAR_MARGINS = 40  # the status bar's margins, the spacing between its parts and its size grip


class PartsLabel(QLabel):
    """Plain text of parts joined by " · " ("SmolLM2 · decoder-only · cpu · float32"), showing
    its first ``shown`` parts (at least ``least``); the status bar gives the room (StatusArea).
    ``text()`` is the whole text; when parts are left out, a hover shows it whole (above the
    tooltip set from outside, which ``toolTip()`` returns as set)."""

    def __init__(self, least: int, fitted: Callable[[], None], sep: str = SEP) -> None:
        super().__init__("")
        self.setTextFormat(Qt.TextFormat.PlainText)
        self.least, self.shown, self.sep = least, 99, sep
        self._full = ""
        self._fitted = fitted

    def text(self) -> str:  # the whole text, as set (what is drawn: shown_text)
        return self._full

    def shown_text(self) -> str:
        return super().text()

    def parts(self) -> list[str]:
        return self._full.split(self.sep) if self._full else []

    def setText(self, text: str) -> None:  # noqa: N802 - Qt override
        self._full = text
        self.show_parts(self.shown)
        self._fitted()

    def width_of(self, n: int) -> int:
        """The width it takes showing its first ``n`` parts."""
        shown = self.sep.join(self.parts()[: max(n, self.least)])
        margins = self.contentsMargins()
        return (
            QFontMetrics(self.font()).horizontalAdvance(shown)
            + margins.left()
            + margins.right()
            + 4
        )

    def show_parts(self, n: int) -> None:
        self.shown = n
        super().setText(self.sep.join(self.parts()[: max(n, self.least)]))
        self.setFixedWidth(self.width_of(n))

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802 - Qt override
        super().changeEvent(event)
        if event.type() == QEvent.Type.FontChange:  # the presentation view, A+ / A-
            self.show_parts(self.shown)
            self._fitted()

    def event(self, event: QEvent) -> bool:
        if event.type() == QEvent.Type.ToolTip and self.shown_text() != self._full:
            tip = "\n".join(t for t in (self._full, self.toolTip()) if t)
            QToolTip.showText(event.globalPos(), tip, self)
            return True
        return super().event(event)


class StatusArea(QObject):
    """The status bar's parts: the model, a busy bar, the latest message, the speed. The
    message comes first: the model's and the speed's parts after their first (the name; the
    count and the rate) step aside while it needs the room, so "Done: 113 tokens; the model
    ended the text." is read whole at 1280 px; what is still cut shows whole on hover."""

    def __init__(self, bar: QStatusBar) -> None:
        super().__init__(bar)
        self.bar = bar
        self._fitting = False
        self.model = PartsLabel(1, self.fit)
        self.busy = QProgressBar()
        self.busy.setRange(0, 0)
        self.busy.setMaximumWidth(140)
        self.busy.hide()
        # Long messages must never widen the window: the label shrinks and elides; messages may
        # quote <special> tokens, so they are plain text.
        self.text = _Message(self.fit)
        self.rate = PartsLabel(2, self.fit)
        self.rate.setContentsMargins(16, 0, 4, 0)  # apart from the message beside it
        # one short line while the engine runs on fewer threads because the machine is busy
        # ("Running on 1 thread of 2: the machine is busy"; its reason steps aside too)
        self.threads = PartsLabel(1, self.fit, ": ")
        self.threads.setObjectName("threads_note")
        self.threads.hide()
        bar.addWidget(self.model)
        bar.addWidget(self.busy)
        bar.addWidget(self.text, 1)
        bar.addPermanentWidget(self.threads)
        bar.addPermanentWidget(self.rate)
        bar.installEventFilter(self)
        self.model.setText("No model")

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt override
        if event.type() in (QEvent.Type.Resize, QEvent.Type.LayoutRequest):
            self.fit()
        return False

    def fit(self) -> None:
        """The message's room first; then the speed's parts, then the model's, while they fit."""
        if self._fitting:
            return
        self._fitting = True
        try:
            room = self.bar.width() - BAR_MARGINS
            room -= self.busy.width() if self.busy.isVisibleTo(self.bar) else 0
            message = self.text.full_text()
            room -= QFontMetrics(self.text.font()).horizontalAdvance(message) + 12
            labels = [x for x in (self.rate, self.model, self.threads) if x.isVisibleTo(self.bar)]
            room -= sum(x.width_of(x.least) for x in labels)
            for label in labels:
                n = label.least
                while n < len(label.parts()) and label.width_of(n + 1) - label.width_of(n) <= room:
                    room -= label.width_of(n + 1) - label.width_of(n)
                    n += 1
                label.show_parts(n)
        finally:
            self._fitting = False


class _Message(ElidedLabel):
    """The status bar's message: each new one gives the bar's parts their room again."""

    def __init__(self, fitted: Callable[[], None]) -> None:
        super().__init__("")
        self.fitted = fitted

    def setText(self, text: str) -> None:  # noqa: N802 - Qt override
        super().setText(text)
        fitted = getattr(self, "fitted", None)  # None while ElidedLabel's __init__ sets ""
        if fitted is not None:
            fitted()
