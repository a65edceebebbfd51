"""Sample this step N times: one forward pass, then N draws from the after-sampler
probabilities, their histogram beside those probabilities, the total-variation distance and a
chi-square goodness-of-fit test. Sampling is one ``torch.multinomial`` call with replacement
and a seeded generator; the counts come from one ``bincount`` per checkpoint (NumPy).

The chi-square test pools the tokens whose expected count is below 5 into one cell (the usual
rule for the approximation to hold); the p-value is the chi-square survival function,
``Q(dof / 2, x / 2)`` (the regularised upper incomplete gamma function).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from engine.decode.session import GenerationSession, step_seed
from engine.errors import GrammarStop
from engine.experiments.records import MAX_SAMPLES, Checkpoint, HistogramRow, StepSample

MAX_TOTAL = 10 * MAX_SAMPLES  # over the rounds of "draw more"
MIN_EXPECTED = 5.0  # cells with a smaller expected count are pooled (chi-square rule of thumb)


def chi2_sf(x: float, dof: int) -> float:
    """P(X >= x) for X ~ chi-square with ``dof`` degrees of freedom."""
    if dof <= 0:
        return 1.0
    a = torch.tensor(dof / 2.0, dtype=torch.float64)
    return float(torch.special.gammaincc(a, torch.tensor(x / 2.0, dtype=torch.float64)))


def goodness_of_fit(counts: Any, probs: Any) -> tuple[float, float, int, float]:
    """counts: [vocab] draws per token; probs: [vocab] the distribution they were drawn from
    (tensors or arrays) -> (total variation, chi-square statistic, degrees of freedom,
    p-value). NumPy on the host: single-threaded, so a vocabulary-sized pass costs tens of
    microseconds even when other processes hold the cores (torch's threaded kernels then wait
    on each other, ~10 ms per operation)."""
    counts = np.asarray(_host(counts), dtype=np.float64)
    p = np.asarray(_host(probs), dtype=np.float64)
    n = counts.sum()
    tv = 0.5 * float(np.abs(counts / n - p).sum())
    expected = p * n
    live = p > 0
    big = live & (expected >= MIN_EXPECTED)
    pooled = live & ~big
    o, e = counts[big], expected[big]
    if pooled.any():
        o = np.append(o, counts[pooled].sum())
        e = np.append(e, expected[pooled].sum())
    if e.sum() <= 0:
        return tv, 0.0, 0, 1.0
    chi2 = float(((o - e) ** 2 / e).sum())
    dof = int(o.size) - 1
    return tv, chi2, dof, chi2_sf(chi2, dof)


def _host(x: Any) -> Any:
    return x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else x


def draw(probs: torch.Tensor, n: int, generator: torch.Generator) -> torch.Tensor:
    """probs: [vocab] -> n token ids [n], drawn with replacement."""
    if not 1 <= n <= MAX_SAMPLES:
        raise ValueError(f"the number of samples must be in 1..{MAX_SAMPLES}, got {n}")
    return torch.multinomial(probs, n, replacement=True, generator=generator)


def checkpoints_for(n: int) -> list[int]:
    """10, 100, 1000, ... up to n, and n itself."""
    out, k = [], 10
    while k < n:
        out.append(k)
        k *= 10
    return [*out, n]


def next_distribution(session: GenerationSession) -> tuple[torch.Tensor, torch.Tensor]:
    """The session's next step without taking it: raw logits [vocab] and after-sampler
    probabilities [vocab] (one forward pass; the chain seeded as the step would be)."""
    with torch.inference_mode():
        logits = session.stepper.logits(session.ids)  # [1, vocab]
        ids = None
        if session.sampler.uses_ids:
            ids = torch.tensor([session.ids], dtype=torch.long, device=session.device)
        generator = torch.Generator(device=session.device)
        generator.manual_seed(step_seed(session.seed, len(session.history)))
        session.sampler.prepare(generator)  # the sampler's state is the session's (mu)
        probs, _cut = session.sampler.probs(ids, logits)
    stop = session.sampler.report().stop(0)
    if stop is not None:  # nothing the grammar allows is left: there is nothing to draw
        raise GrammarStop(f"{stop}: there is nothing to draw")
    return logits[0], probs[0]


def sample_step(session: GenerationSession, n: int, seed: int = 0, top: int = 20) -> StepSample:
    """Draw the session's next token ``n`` times (the session does not move)."""
    return StepDraws(session, seed, top).more(n)


class StepDraws:
    """One step's after-sampler distribution, drawn from in rounds ("draw more"): the counts
    add up over the rounds, so a class watches the fit improve as N grows. The first round of
    ``n`` draws is exactly ``sample_step(session, n, seed)``; later rounds go on with the same
    generator. Holds NumPy and one small tensor, no reference to the session."""

    def __init__(self, session: GenerationSession, seed: int = 0, top: int = 20) -> None:
        start = time.perf_counter()
        _logits, probs = next_distribution(session)
        self.probs = probs.float()
        self.forward_s = time.perf_counter() - start
        self.p_host = self.probs.cpu().numpy()
        self.counts = np.zeros(self.p_host.shape[-1], dtype=np.int64)
        self.generator = torch.Generator(device=self.probs.device).manual_seed(seed)
        self.show, self.seed, self.top = session.text_track.show, seed, top
        self.fits: list[Checkpoint] = []

    @property
    def n(self) -> int:
        return int(self.counts.sum())

    def more(self, n: int) -> StepSample:
        """``n`` more draws (1..MAX_SAMPLES; MAX_TOTAL in all) -> the fit of all so far."""
        before = self.n
        if before + n > MAX_TOTAL:
            raise ValueError(f"at most {MAX_TOTAL:,} draws in all: start again")
        start = time.perf_counter()
        draws = draw(self.probs, n, self.generator).cpu().numpy()  # one copy of n ids
        for k in checkpoints_for(before + n):  # 10, 100, ... reached in this round
            if k > before:
                counts = self.counts + np.bincount(draws[: k - before], minlength=self.counts.size)
                self.fits.append(Checkpoint(k, *goodness_of_fit(counts, self.p_host)))
        self.counts = counts
        sample_s = time.perf_counter() - start
        return _result(
            self.show, self.probs, self.counts, before + n, self.seed, self.top, self.fits,
            self.forward_s, sample_s,
        )  # fmt: skip


def _result(
    show: Any, probs: torch.Tensor, counts: Any, n: int, seed: int,
    top: int, fits: Sequence[Checkpoint], forward_s: float, sample_s: float,
) -> StepSample:  # fmt: skip
    k = min(top, probs.shape[-1])
    top_ids = torch.topk(probs, k).indices.tolist()
    most_drawn = np.argsort(-counts, kind="stable")[:k]  # a lucky draw outside the top
    drawn = [int(i) for i in most_drawn if counts[i] > 0]
    shown = list(dict.fromkeys([i for i in top_ids if probs[i] > 0] + drawn))
    p_host, c_host = probs.tolist(), counts.tolist()
    rows = tuple(HistogramRow(i, show(i), p_host[i], int(c_host[i]), c_host[i] / n) for i in shown)
    last = fits[-1]
    return StepSample(
        n=n, seed=seed, rows=rows,
        other_prob=max(0.0, 1.0 - sum(r.prob for r in rows)),
        other_count=n - sum(r.count for r in rows),
        survivors=int((probs > 0).sum()), tv=last.tv, chi2=last.chi2, dof=last.dof,
        p_value=last.p_value, checkpoints=tuple(fits), forward_s=forward_s, sample_s=sample_s,
    )  # fmt: skip
