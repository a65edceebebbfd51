"""The teacher's guide's lesson table lists every shipped lesson (it once stopped at 8 of 12),
by its number, title and model, in the order the Lessons menu shows them."""

from __future__ import annotations

import re
from pathlib import Path

from engine.classroom.lessons import bundled_lessons
from engine.models.catalog import list_bundled

GUIDE = Path(__file__).resolve().parents[1] / "resources" / "docs" / "teachers-guide.md"


def table_rows() -> list[tuple[int, str, str]]:
    rows = []
    for line in GUIDE.read_text(encoding="utf-8").splitlines():
        m = re.match(r"\| (\d+) \| ([^|]+) \| ([^|]+) \|", line)
        if m:
            rows.append((int(m[1]), m[2].strip(), m[3].strip()))
    return rows


def test_the_lesson_table_lists_every_shipped_lesson():
    titles = {m.name: m.title for m in list_bundled()}
    lessons = bundled_lessons()
    rows = table_rows()
    assert [n for n, _t, _m in rows] == list(range(1, len(lessons) + 1))
    for (_n, title, model), lesson in zip(rows, lessons, strict=True):
        assert title == lesson.title
        # the model column names the lesson's bundled model by its short name
        assert (
            model.lower().split()[0] in (lesson.model + " " + titles.get(lesson.model, "")).lower()
        )
