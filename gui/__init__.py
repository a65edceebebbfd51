"""Decoding Lab's window: Qt widgets over the engine's records (gui/ never does model work)."""

from gui.core.runtime import tame_pyside_import_hook

tame_pyside_import_hook()
