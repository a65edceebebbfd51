"""The error every validator raises, and turning pydantic's reports into one sentence."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError


class InputError(ValueError):
    """A file or a server reply the app cannot use; ``str()`` says which, where and why."""

    def __init__(self, message: str, source: str = "") -> None:
        self.message, self.source = message, source
        super().__init__(f"{source}: {message}" if source else message)


def _where(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "the top level"


def describe(exc: Any, limit: int = 3, prefix: str = "") -> str:
    """A pydantic ``ValidationError`` as a short sentence: the first few fields and what was
    wrong with each (the values themselves stay out: they may be huge or hostile)."""
    parts = [
        f"{_where((prefix, *e['loc']) if prefix else e['loc'])}: {e['msg'].lower()}"
        for e in exc.errors()[:limit]
    ]
    more = exc.error_count() - len(parts)
    return "; ".join(parts) + (f" (and {more} more)" if more > 0 else "")


M = TypeVar("M", bound=BaseModel)


def parse_as(model: type[M], data: Any, what: str, fmt: str) -> M:
    """``data`` read by ``model``, or an InputError: "<what> is not <fmt> (<the fields>)"."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise InputError(f"{what} is not {fmt} ({describe(exc)})") from None


@contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off while a long file becomes records, back on after
    (as it was), whatever happens. Reading an 80,000-step autosave makes millions of new
    objects, none of them garbage, and the collector walked them again and again: 40% of the
    time it took to open."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()
