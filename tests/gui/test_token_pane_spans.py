"""The output pane finds the token under the mouse by a binary search over its spans (a long
run has tens of thousands); it must answer as a walk through every span does."""

from __future__ import annotations

import random

from gui.common.token_pane import span_at


def walk(spans: list[tuple[int, int]], position: int) -> int | None:
    for i, (a, b) in enumerate(spans):
        if a <= position < b or (position == b and i == len(spans) - 1):
            return i
    return None


def random_spans(rng: random.Random) -> list[tuple[int, int]]:
    spans, at = [], 0
    for _ in range(rng.randint(0, 40)):
        width = rng.choice([0, 0, 1, 2, 5])  # 0: a hidden special token, no text
        spans.append((at, at + width))
        at += width
    return spans


def test_binary_search_equals_a_walk_through_every_span():
    rng = random.Random(7)
    checked = 0
    for _ in range(2000):
        spans = random_spans(rng)
        end = spans[-1][1] if spans else 0
        for position in range(end + 2):
            assert span_at(spans, position) == walk(spans, position), (spans, position)
            checked += 1
    assert checked > 20_000


def test_edges():
    assert span_at([], 0) is None
    assert span_at([(0, 3), (3, 3)], 3) == 1  # the end of the run is its last span
    assert span_at([(0, 3), (3, 3), (3, 5)], 3) == 2  # after a hidden token: the next one
    assert span_at([(0, 3), (3, 5)], 6) is None
