"""Decoding Lab's window: Qt widgets over the engine's records (gui/ never does model work)."""

from __future__ import annotations

import sys
from typing import Any

import PySide6.QtCore  # noqa: F401 - installs PySide's import hook, tamed just below

OWN_PACKAGES = ("gui", "engine", "main", "__main__")


def skip_pyside_source_scan() -> None:
    """PySide6 replaces ``__import__`` and, after every import in the process, reads the new
    module's source (``inspect.getsource``) to see whether it mentions PySide6, for its opt-in
    ``from __feature__ import ...`` syntax. Importing torch and transformers after Qt then reads
    thousands of files: 0.7-1.9 s of the model's start-up on the development machine. Nothing
    outside this app opts in, so other modules are answered without reading them. Where PySide
    no longer has this hook, nothing changes."""
    feature = sys.modules.get("shibokensupport.feature")
    scan = getattr(feature, "_mod_uses_pyside", None)
    if scan is None or getattr(scan, "decoding_lab", False):
        return

    def uses_pyside(module: Any) -> bool:
        return getattr(module, "__name__", "").partition(".")[0] in OWN_PACKAGES and scan(module)

    uses_pyside.decoding_lab = True  # type: ignore[attr-defined]
    feature._mod_uses_pyside = uses_pyside  # type: ignore[union-attr]


skip_pyside_source_scan()
