"""Sweeps and stochastic variation.

``sweep``: the same prompt and seed at a list of values of one setting (temperature, top-p,
min-p, ...); per value the output, its log-probability (under the model, and under the
sampler that chose it), the mean entropy and distinct-n (Li et al. 2016: distinct n-grams over
all n-grams of the output's token ids).

``variation``: N sampled runs from one prompt, one seed each; the distinct continuations
grouped with their counts, each with the position where it first leaves the most common one.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from engine.decode.session import GenerationSession
from engine.experiments.records import (
    MAX_RUNS,
    MAX_SWEEP_VALUES,
    Continuation,
    SweepRow,
    Variation,
)
from engine.records import Step
from engine.sampling.settings import SWEEPABLE, SamplerSettings

SessionFactory = Callable[[SamplerSettings], GenerationSession]


def distinct_n(ids: Sequence[int], n: int) -> float:
    """Distinct n-grams / all n-grams (0 when the text is shorter than n)."""
    grams = [tuple(ids[i : i + n]) for i in range(len(ids) - n + 1)]
    return len(set(grams)) / len(grams) if grams else 0.0


def first_difference(a: Sequence[int], b: Sequence[int]) -> int | None:
    """The first index where a and b differ (one ending early counts); None if equal."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def _run(make: SessionFactory, settings: SamplerSettings) -> tuple[list[Step], Any]:
    session = make(settings)
    steps = [r for r in session.stream() if isinstance(r, Step)]
    return steps, session


def _log(p: float) -> float:
    return math.log(p) if p > 0 else float("-inf")


def sweep_row(setting: str, value: float, steps: Sequence[Step], session: Any) -> SweepRow:
    ids = tuple(s.token_id for s in steps)
    count = max(1, len(steps))
    return SweepRow(
        setting=setting, value=value, text=session.text, token_ids=ids,
        logprob=sum(_log(s.raw_prob) for s in steps),
        sampler_logprob=sum(_log(s.prob) for s in steps),
        mean_entropy=sum(s.entropy for s in steps) / count,
        mean_entropy_raw=sum(s.entropy_raw for s in steps) / count,
        distinct=tuple(distinct_n(ids, n) for n in (1, 2, 3)),
        stop_reason=session.summary().stop_reason, ending=session.summary().ending,
    )  # fmt: skip


def parse_values(text: str) -> list[float]:
    """ "0.2,0.7;1" -> [0.2, 0.7, 1.0]: finite numbers, at most ``MAX_SWEEP_VALUES``; a
    ValueError names the first that is not (before any model work)."""
    parts = [x.strip() for x in text.replace(";", ",").split(",") if x.strip()]
    if len(parts) > MAX_SWEEP_VALUES:
        raise ValueError(f"a sweep takes at most {MAX_SWEEP_VALUES:,} values, got {len(parts):,}")
    values = []
    for part in parts:
        try:
            value = float(part)
        except ValueError:
            raise ValueError(f"{part[:40]!r} is not a number") from None
        if not math.isfinite(value):
            raise ValueError(f"{part[:40]!r} is not a finite number")
        values.append(value)
    return values


def sweep_settings(
    base: SamplerSettings, setting: str, values: Sequence[float]
) -> list[SamplerSettings]:
    """The settings of each run, every value checked before the first runs (its type, its
    limits, the count): a sweep that would fail at its 900th value fails at once."""
    if setting not in SWEEPABLE:
        raise ValueError(f"cannot sweep {setting!r}: choose one of {', '.join(SWEEPABLE)}")
    if not values:
        raise ValueError("a sweep needs at least one value")
    if len(values) > MAX_SWEEP_VALUES:
        raise ValueError(f"a sweep takes at most {MAX_SWEEP_VALUES:,} values, got {len(values):,}")
    kind = type(getattr(base, setting))
    out = []
    for value in values:
        if not math.isfinite(value):
            raise ValueError(f"{setting} takes finite numbers, got {value!r}")
        if kind is int and float(value) != int(value):
            raise ValueError(f"{setting} takes whole numbers, got {value!r}")
        out.append(base.with_(**{setting: kind(value)}))  # checks the value's limits
    return out


def sweep(
    make: SessionFactory, base: SamplerSettings, setting: str, values: Sequence[float],
    progress: Callable[[int, int], None] | None = None,
) -> list[SweepRow]:  # fmt: skip
    """One run per value of ``setting``, everything else (the seed too) as in ``base``;
    ``progress(done, total)`` after each run."""
    rows = []
    for i, settings in enumerate(sweep_settings(base, setting, values)):
        steps, session = _run(make, settings)
        rows.append(sweep_row(setting, getattr(settings, setting), steps, session))
        if progress is not None:
            progress(i + 1, len(values))
    return rows


def variation(
    make: SessionFactory, base: SamplerSettings, runs: int,
    progress: Callable[[int, int], None] | None = None,
) -> Variation:  # fmt: skip
    """``runs`` sampled runs with seeds base.seed, base.seed + 1, ...; grouped by output."""
    if not 1 <= runs <= MAX_RUNS:
        raise ValueError(f"runs must be in 1..{MAX_RUNS}, got {runs}")
    outputs: dict[tuple[int, ...], tuple[str, list[int]]] = {}
    order: Counter[tuple[int, ...]] = Counter()
    for k in range(runs):
        seed = base.seed + k
        steps, session = _run(make, base.with_(seed=seed))
        ids = tuple(s.token_id for s in steps)
        outputs.setdefault(ids, (session.text, []))[1].append(seed)
        order[ids] += 1
        if progress is not None:
            progress(k + 1, runs)
    ranked = sorted(order, key=lambda ids: (-order[ids], outputs[ids][1][0]))
    mode = ranked[0]
    groups = tuple(
        Continuation(
            text=outputs[ids][0],
            token_ids=ids,
            count=order[ids],
            seeds=tuple(outputs[ids][1]),
            diverges_at=first_difference(ids, mode),
        )  # fmt: skip
        for ids in ranked
    )
    return Variation(runs=runs, distinct=len(groups), continuations=groups)
