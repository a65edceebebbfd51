"""How a step reads in words: probabilities as people read them, entropies without "-0.00",
and the one-line summary above the distribution plot."""

from __future__ import annotations

import html

from engine.records import Candidate, Step


def short(text: str, limit: int = 14) -> str:
    shown = repr(text)[1:-1]  # escapes newlines and tabs, keeps spaces
    shown = shown.replace(" ", "␣")
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"


def pct(p: float) -> str:
    """A probability as a person reads it: 31%, 4.2%, 0.3%, <0.1%."""
    if p <= 0:
        return "0%"
    if p < 0.001:
        return "<0.1%"
    return f"{p:.1%}" if p < 0.095 else f"{p:.0%}"


def bits(entropy: float) -> str:
    """An entropy to two decimals; rounding noise below zero reads "0.00", never "-0.00"."""
    return f"{max(0.0, entropy):.2f}"


def value_text(c: Candidate) -> str:
    """A bar's label: its probability, before → after the sampler when they differ."""
    if c.prob <= 0:
        return f"{pct(c.raw_prob)} ✂"
    if abs(c.prob - c.raw_prob) < 0.005:
        return pct(c.prob)
    return f"{pct(c.raw_prob)} → {pct(c.prob)}"


def step_summary(step: Step | None, compact: bool = False) -> str:
    """One line a class can read about the step the distribution plot shows."""
    if step is None:
        return "Next-token probabilities appear here after the first token."
    survivors = f"{step.survivors} token{'s' if step.survivors != 1 else ''} could be picked"
    said = [f"{n.stage}: {n.text}" for n in getattr(step, "stage_notes", ())]
    mu = getattr(step, "mu", None)
    if mu is not None and not any("mu" in n for n in said):
        said.append(f"mirostat μ {mu:.2f}")
    other = getattr(step, "other_p", None)
    if other is not None:
        said.append(f"served: {len(step.candidates)} candidates, {pct(other)} outside them; "
                    "entropy is a lower bound")  # fmt: skip
    notes = f"<br><i>{html.escape(' · '.join(said))}</i>" if said else ""
    if compact:  # the presentation view: two lines at most at 20 pt
        return (
            f"<b>Step {step.index + 1}</b>: "
            f"<code>'{html.escape(short(step.token_str, 16))}'</code> "
            f"{pct(step.raw_prob)} → {pct(step.prob)} · {survivors}{notes}"
        )
    return (
        f"<b>Step {step.index + 1}</b>: chose "
        f"<code>'{html.escape(short(step.token_str, 24))}'</code> "
        f"({step.raw_prob:.0%} → {step.prob:.0%} after the sampler) · entropy "
        f"{bits(step.entropy_raw)} → {bits(step.entropy)} bits · {survivors}{notes}"
    )
