"""Text helpers of the Inside tab: a wrapping rich-text label, a token quoted as the class
reads it."""

from __future__ import annotations

import html

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QSizePolicy

from gui.common.step_text import short


def label(text: str = "") -> QLabel:
    """A rich-text label that wraps and never widens its page."""
    widget = QLabel(text)
    widget.setWordWrap(True)
    widget.setTextFormat(Qt.TextFormat.RichText)
    widget.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
    return widget


def q(text: str) -> str:
    """A token as the class reads it, quoted and escaped for rich text."""
    return f"<code>'{html.escape(short(text, 18))}'</code>"
