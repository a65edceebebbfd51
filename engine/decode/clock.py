"""The clock of one ``stream()``: tokens, seconds, time to first token, decode rate."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any


class RunClock:
    """Time and tokens of one ``stream()``: the tokens/s it reports counts decode steps only;
    the step that read the prompt is timed on its own (time to first token)."""

    def __init__(self) -> None:
        self.tokens = 0
        self.seconds = 0.0
        self.decode_tokens = 0
        self.decode_seconds = 0.0
        self.first_token_s: float | None = None
        self.prompt_tokens = 0
        self.reading = 0.0  # seconds spent reading the prompt in chunks before the first token
        self.reading_tokens = 0

    def read(self, chunks: Iterator[Any], total: int) -> Iterator[Any]:
        """Pass ``catch_up``'s records through, timing the chunks (not the consumer);
        ``total``: the positions to read before the first token."""
        self.reading_tokens = total
        it = iter(chunks)
        while True:
            start = time.perf_counter()
            record = next(it, None)
            self.reading += time.perf_counter() - start
            if record is None:
                return
            yield record

    def add(self, elapsed: float, fed: int = 1) -> float:
        """Count one token; returns the running decode rate (0 before the first decode step)."""
        self.tokens += 1
        self.seconds += elapsed
        if fed > 1:
            if self.first_token_s is None:
                self.first_token_s = elapsed + self.reading
                self.prompt_tokens = max(fed, self.reading_tokens)
        else:
            self.decode_tokens += 1
            self.decode_seconds += elapsed
        return self.rate()

    def rate(self) -> float:
        if self.decode_seconds > 0:
            return self.decode_tokens / self.decode_seconds
        return self.tokens / self.seconds if self.seconds > 0 else 0.0
