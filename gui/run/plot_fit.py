"""How much of the distribution plot fits: the probability axis's end and ticks, and how many
rows get labels, from the plot's size and its font's measures (no Qt objects here)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from engine.records import Candidate, Step

X_LIMITS = (0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0)  # the probability axis ends at one of these


def x_limit(width: float, advance: Callable[[str], int], ends: Iterable[float],
            texts: Iterable[str]) -> float:  # fmt: skip
    """The smallest of X_LIMITS that leaves room right of every bar for its label (``advance``
    measures a text in pixels); past 1.0 the range grows for the label."""
    need = 0.0
    for end, text in zip(ends, texts, strict=True):
        room = width - advance(text) - 12
        need = max(need, float(end) * width / room if room > 0 else 1.0)
    return next((u for u in X_LIMITS if u >= need), min(1.6, need))


def x_ticks(width: float, label: float, upper: float) -> tuple[float, list[tuple[float, str]]]:
    """Probability ticks far enough apart for labels ``label`` pixels wide (the automatic ones
    ran together as "0.20.40.60.8" in a narrow plot with big text): the step and the ticks."""
    width = max(1.0, width)
    top = min(upper, 1.0)
    for step in (0.05, 0.1, 0.2, 0.25, 0.5, 1.0):
        if step * width / upper >= label and top / step <= 10:
            break
    return step, [(i * step, f"{i * step:g}") for i in range(int(round(top / step)) + 1)]


def label_every(height: float, line: float, rows: int) -> int:
    """Label every row when the labels fit, else every 2nd, 5th, ... (a pile is unreadable)."""
    height = max(1.0, height)
    for every in (1, 2, 5, 10):
        if rows / every * line <= height:
            return every
    return 10


OTHER_ID = -1  # the "other" bar of a served model's step (not a token)


def rows_for(step: Step, top_n: int, room: int) -> tuple[list[tuple[float, Candidate, int]], int]:
    """The bars of ``step`` as (y, candidate, rank) rows when ``room`` rows' labels fit: the
    top candidates, the chosen token below a gap when it is not among them, and a served
    model's "all other tokens" as one bar; with how many top candidates are shown."""
    n = min(top_n, room)
    if step.token_id not in {c.token_id for c in step.candidates[:n]} and n >= room:
        n = max(1, room - 1)  # room for the chosen token's own row below the gap
    if getattr(step, "other_p", None) is not None and n >= room:
        n = max(1, n - 1)  # and for the served model's "all other tokens"
    cands = step.candidates[:n]
    rows = [(float(i), c, i + 1) for i, c in enumerate(cands)]
    if step.token_id not in {c.token_id for c in cands}:
        # the chosen token ranks below the shown ones: its own row, below a gap
        me = Candidate(step.token_id, step.token_str, step.raw_prob, step.prob)
        rows.append((len(cands) + 0.5, me, step.rank))
    other = getattr(step, "other_p", None)
    if other is not None:  # a served model: the mass outside the N it sent, as one bar
        lump = Candidate(OTHER_ID, "(all other tokens)", other, 0.0, "not sent by the server")
        rows.append((rows[-1][0] + 1.0 if rows else 0.0, lump, 0))
    return rows, min(n, len(step.candidates))
