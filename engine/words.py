"""Counts in words, as the window's status bar and step texts and the exported pages say them:
"1 token", "2 tokens". No Qt."""

from __future__ import annotations


def count(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` and ``noun``, the noun plural unless ``n`` is 1 ("1 token", "0 tokens", "1,200
    tokens"); ``plural`` for a noun that does not just take an "s" ("1 leaf", "3 leaves")."""
    word = noun if n == 1 else (plural or noun + "s")
    return f"{n:,} {word}"
