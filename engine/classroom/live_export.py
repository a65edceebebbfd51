"""A live round's export, written only when the teacher asks: nicknames and answers
(``LiveRound.export``'s rows) as CSV or JSON, by the file's suffix. No Qt."""

from __future__ import annotations

import csv
import json
from typing import Any


def write_round(rows: list[dict[str, Any]], path: str) -> None:
    """``rows`` to ``path``: JSON when it ends in .json, CSV otherwise (OSError as raised)."""
    with open(path, "w", encoding="utf-8", newline="") as f:
        if path.lower().endswith(".json"):
            json.dump(rows, f, ensure_ascii=False, indent=1)
        else:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["nickname"])
            writer.writeheader()
            writer.writerows({k: cell(v) for k, v in row.items()} for row in rows)


def cell(value: Any) -> Any:
    """A CSV cell a spreadsheet will not read as a formula (a nickname "=HYPERLINK(...)")."""
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    return value
