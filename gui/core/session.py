"""What every part of the window is given (never the window itself): the run store, the
worker, the loaded model's slot, the looks, and one voice to the user. A part that needs more
declares it as a dataclass that extends ``Session`` with its own widgets and callbacks; the
composition root (``gui.shell.window``) fills it in with ``Session.given``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:
    from PySide6.QtWidgets import QWidget

    from engine.models.loading import ModelBundle
    from gui.common.theme import Theme
    from gui.core.store import RunStore
    from gui.core.worker import EngineRunner

S = TypeVar("S", bound="Session")


class ModelSlot:
    """The loaded model: written by the models part when a load ends, read by every part."""

    def __init__(self) -> None:
        self.bundle: ModelBundle | None = None


class Looks(Protocol):
    """The window's looks as a part reads them (``gui.shell.appearance.Appearance``)."""

    theme: Theme
    presenting: bool

    def text_points(self) -> int: ...


@dataclass
class Session:
    store: RunStore
    runner: EngineRunner
    model: ModelSlot
    looks: Looks
    parent: QWidget  # dialogs' and docks' parent
    say: Callable[[str], None]  # one line in the status bar
    show_error: Callable[[str], None]  # one dialog (later ones while it is open: the status)
    after_idle: Callable[[Callable[[], None]], None]  # run once the current job has ended

    @property
    def bundle(self) -> ModelBundle | None:
        return self.model.bundle

    def given(self, kind: type[S], **more: Any) -> S:
        """This session as ``kind`` (a part's own dataclass), with the part's extra needs."""
        mine = {f.name: getattr(self, f.name) for f in fields(Session)}
        return kind(**mine, **more)
