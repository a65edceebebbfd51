"""A served stream's pieces, shared by every backend's client: its bytes as lines, its events'
tokens each held until the next event says why the answer stopped (``with_finish``), and the
token budget asked for kept on our side (``at_most``). No Qt, no torch."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from engine.serve.remote_errors import RemoteError

if TYPE_CHECKING:
    from engine.serve.http import ServedToken


def with_finish(
    events: Iterable[Any],
    served: Callable[[Any], list[ServedToken]],
    finish: Callable[[Any], str | None],
) -> Iterator[ServedToken]:
    """A stream's tokens, each held until the next event: the event that ends the stream (its
    own, often without a token) says why, and the last token carries that reason, as in a
    non-streamed answer (the sessions learn EOS ids from a "stop")."""
    pending: ServedToken | None = None
    try:
        for event in events:
            now = time.perf_counter()  # a held token's time is its event's, not its yield's
            got = [replace(t, arrived=now) for t in served(event)]
            if got:
                if pending is not None:
                    yield pending
                yield from got[:-1]
                pending = got[-1]
            reason = finish(event)
            if reason is not None:
                if pending is not None and pending.finish_reason is None:
                    pending = replace(pending, finish_reason=reason)
                break
    except RemoteError:
        # the stream failed after a token arrived: that token is kept too, as the message
        # says, and then the failure is raised
        if pending is not None:
            held, pending = pending, None
            yield held
        raise
    if pending is not None:
        yield pending


def at_most(tokens: Iterable[ServedToken], budget: int) -> Iterator[ServedToken]:
    """A stream's tokens up to the ``budget`` asked for: a server that streams more is cut
    there (the connection closed, the rest never read), and the last token kept stops on
    "length" as the budget's own end would."""
    it = iter(tokens)
    try:
        for k in range(1, budget + 1):
            token = next(it, None)
            if token is None:
                return
            if k == budget and not token.finish_reason:
                token = replace(token, finish_reason="length")
            yield token
    finally:
        close = getattr(it, "close", None)
        if close is not None:
            close()


def lines(chunks: Iterator[bytes]) -> Iterator[str]:
    """Lines from a byte stream (decoded leniently: a broken byte becomes U+FFFD and the JSON
    check refuses what matters)."""
    buffer = b""
    for chunk in chunks:
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            yield line.rstrip(b"\r").decode("utf-8", "replace")
    if buffer:
        yield buffer.decode("utf-8", "replace")
