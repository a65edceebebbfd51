"""`models` and `lessons`: what is bundled, and checking lesson files."""

from __future__ import annotations

import argparse
import sys


def register(sub: argparse._SubParsersAction) -> None:
    sub.add_parser("models", help="list the bundled models").set_defaults(func=run_models)
    les = sub.add_parser("lessons", help="list the bundled lessons, or check lesson files")
    les.add_argument("files", nargs="*", metavar="FILE", help="lesson files (.yaml) to check")
    les.set_defaults(func=run_lessons)


def run_models(_args: argparse.Namespace) -> int:
    from engine.models.catalog import list_bundled

    for m in list_bundled():
        state = "installed" if m.available() else "missing"
        print(f"{m.name:14} {m.kind:16} {state:9} {m.title}\n{'':14} {m.description}")
    return 0


def run_lessons(args: argparse.Namespace) -> int:
    from engine.classroom.lessons import LessonError, bundled_lessons, load_lesson

    if not args.files:
        for lesson in bundled_lessons():
            name = lesson.path.name if lesson.path else ""
            print(f"{name:36} {len(lesson.stages)} stages  {lesson.model:14} {lesson.title}")
        return 0
    failed = 0
    for path in args.files:
        try:
            lesson = load_lesson(path)
        except LessonError as exc:
            print(f"error: {exc}", file=sys.stderr)
            failed += 1
        else:
            print(f"{path}: OK, {lesson.title!r}, {len(lesson.stages)} stages")
    return 1 if failed else 0
