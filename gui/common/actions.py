"""Actions declared as data. A part says what it offers the menus and toolbars as
``ActionSpec`` records (id, text, keys, tip, where it goes, when it is enabled, what it calls);
the shell builds every QAction and places them in one pass (``gui.shell.menus``), so no part
finds a menu by its position or its text. Parts and tests reach a built action by its id in the
``ActionTable`` (``table["generate"]`` or ``table.generate``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from PySide6.QtGui import QAction, QKeySequence

Keys = str | QKeySequence.StandardKey | list[QKeySequence] | None


@dataclass(frozen=True)
class Place:
    """Where an action shows: a menu or toolbar id (``gui.shell.menus.MENUS`` / ``TOOLBARS``),
    a section of it (sections are separated by a line, in the order the menu lists them) and
    the action's order inside the section."""

    where: str
    section: str
    order: int = 0


@dataclass(frozen=True)
class ActionSpec:
    id: str  # unique in the window; the attribute tests and parts use
    text: str
    slot: Callable[[], object]
    places: tuple[Place, ...] = ()
    keys: Keys = None
    tip: str = ""
    keys_in_tip: bool = False  # the tip ends with the shortcut, "(Ctrl+Return)"
    checkable: bool = False
    icon_text: str = ""  # a shorter word on a toolbar button
    enabled_when: Callable[[], bool] | None = None  # asked again by ActionTable.update()


class ActionTable:
    """Every built action by id, and the one place their enablement is worked out."""

    def __init__(self) -> None:
        self._actions: dict[str, QAction] = {}
        self._specs: dict[str, ActionSpec] = {}

    def add(self, spec: ActionSpec, action: QAction) -> None:
        if spec.id in self._actions:
            raise ValueError(f"two actions have the id {spec.id!r}")
        self._actions[spec.id], self._specs[spec.id] = action, spec

    def __getitem__(self, action_id: str) -> QAction:
        return self._actions[action_id]

    def __getattr__(self, action_id: str) -> QAction:
        try:
            return self.__dict__["_actions"][action_id]
        except KeyError:
            raise AttributeError(action_id) from None

    def __contains__(self, action_id: object) -> bool:
        return action_id in self._actions

    def items(self) -> Iterable[tuple[str, QAction]]:
        return self._actions.items()

    def update(self) -> None:
        """Enable each action whose spec says when, as the window is now."""
        for action_id, spec in self._specs.items():
            if spec.enabled_when is not None:
                self._actions[action_id].setEnabled(bool(spec.enabled_when()))
