"""How a step reads in words: probabilities as people read them, entropies without "-0.00",
and the one-line summary above the distribution plot."""

from __future__ import annotations

import html
from typing import Any

from engine.records import CLASS, Candidate, Step
from gui.common.theme import CUT_MARK


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
    """A bar's label: its probability, before → after the sampler when they differ, and a
    served model's own sampler after a bar ("| 31%") when it reported one."""
    theirs = "" if c.server_prob is None else f" | {pct(c.server_prob)}"
    if c.prob <= 0:
        return f"{pct(c.raw_prob)} ✂{theirs}"
    if abs(c.prob - c.raw_prob) < 0.005:
        return pct(c.prob) + theirs
    return f"{pct(c.raw_prob)} → {pct(c.prob)}{theirs}"


def how_chosen(step: Step) -> str:
    """How a step's token was chosen, in words (the token pane's hover names it)."""
    if step.source == CLASS:  # a live round's class, as the sampler
        return "the class's choice"
    if step.forced:
        return "chosen by you"
    return "greedy" if step.source == "greedy" else "sampled"


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
    said += _server_said(step)
    notes = f"<br><i>{html.escape(' · '.join(said))}</i>" if said else ""
    if compact:  # the presentation view: two lines at most at 20 pt
        by = " the class's" if step.source == CLASS else ""
        return (
            f"<b>Step {step.index + 1}</b>:{by} "
            f"<code>'{html.escape(short(step.token_str, 16))}'</code> "
            f"{pct(step.raw_prob)} → {pct(step.prob)} · {survivors}{notes}"
        )
    if not getattr(step, "after_sampler", True):  # the server sampled and did not say how
        return (
            f"<b>Step {step.index + 1}</b>: the server chose "
            f"<code>'{html.escape(short(step.token_str, 24))}'</code> "
            f"({step.raw_prob:.0%} raw; its sampler's probabilities are not reported) · "
            f"entropy ≥ {bits(step.entropy_raw)} bits{notes}"
        )
    chose = "the class chose" if step.source == CLASS else "chose"
    return (
        f"<b>Step {step.index + 1}</b>: {chose} "
        f"<code>'{html.escape(short(step.token_str, 24))}'</code> "
        f"({step.raw_prob:.0%} → {step.prob:.0%} after the sampler) · entropy "
        f"{bits(step.entropy_raw)} → {bits(step.entropy)} bits · {survivors}{notes}"
    )


def _server_said(step: Step) -> list[str]:
    """What a served model's own sampler gave the chosen token, beside ours (llama-server)."""
    label = getattr(step, "server_sampler", "")
    if not label:
        return []
    mine = next((c for c in step.candidates if c.token_id == step.token_id), None)
    theirs = "not listed" if mine is None or mine.server_prob is None else pct(mine.server_prob)
    return [f"{label}'s sampler gives it {theirs}, ours {pct(step.prob)}"]


def legend_html(theme: Any, sampled: bool, server: str, short: int, server_bar: str,
                class_bar: str = "") -> str:  # fmt: skip
    """The distribution plot's key: the model's bars, ours after the sampler, a served model's
    own sampler (``server``, its value after a "|") where it sent one, the cut, the chosen token,
    the cut-off line and the penalty mark. ``sampled`` False (a scored text, a raw-only
    stream): the model's bars and the chosen token only. ``short`` 1 and 2 drop words and then
    the rarer marks, so that it fits on one line in a narrow plot (3: a class's key, without
    the chosen token's mark). ``class_bar``: the colour of a live round's class's bars while
    they are drawn, named after the sampler's."""
    t = theme

    def chip(color: str, text: str, swatch: str = "■") -> str:
        return f"<span style='color:{color}'>{swatch}</span>&nbsp;{text}"

    ours = "after our sampler" if server else "after sampler"
    chips = [
        chip(t.raw_bar, "model"), chip(t.kept_bar, ours if short < 2 else "sampler"),
        chip(t.cut_bar, "cut", "▨"), chip(t.chosen, "chosen", "□"),
        chip(CUT_MARK, "cut-off", "┅"),
        chip(t.chosen, "before a penalty" if short == 0 else "penalised", "◇"),
    ]  # fmt: skip
    if server:
        chips.insert(
            2, chip(server_bar, f"after {server}'s sampler ( | )" if short == 0 else server)
        )
    if not sampled:
        chips = [chips[0], chips[3 + bool(server)]]
    elif short >= 2:
        chips = chips[: 5 if server else 4]
    if class_bar:  # beside the model's and the sampler's bars, before the rarer marks
        if sampled and short >= 2:  # the shorter keys: the class's mark before the cut's
            del chips[2 + bool(server) : 3 + bool(server) + (short >= 3)]  # (and the chosen's)
        chips.insert(min(2, len(chips)), chip(class_bar, "class"))
    return " &nbsp; ".join(chips)


def bar_text(step: Step, c: Candidate, rank: int, other: bool = False) -> str:
    """What the hover shows for one bar of ``step``: token, id, rank, the probabilities (the
    model's, ours after the sampler where known, a served model's own sampler where it said)
    and what cut it. ``other``: the served model's "all other tokens" bar."""
    if other and not getattr(step, "after_sampler", True):  # the server sampled (a stream)
        return (
            f"All the tokens the server did not list: {pct(c.raw_prob)} of the model's "
            "probability.<br>The server samples from its whole distribution, so it may pick "
            "one of these; entropy is a lower bound."
        )
    if other:
        return (
            f"All the tokens the server did not send: {pct(c.raw_prob)} of the model's "
            "probability.<br>The sampler chain (top-p, min-p, ...) runs on the candidates "
            "it sent, renormalised, so it cannot pick these; entropy is a lower bound."
        )
    if not getattr(step, "after_sampler", True):
        fate = "the server sampled: its probabilities after its sampler are not reported"
    elif c.prob > 0:
        fate = "kept by every filter"
    else:
        fate = f"removed by <b>{html.escape(c.cut_by)}</b>" if c.cut_by else "removed"
    chosen = " · <b>chosen</b>" if c.token_id == step.token_id else ""
    if c.penalised_by and c.before_p is not None:
        after = c.after_p if c.after_p is not None else c.prob
        fate += (f"<br>{html.escape(c.penalised_by)}: {pct(c.before_p)} before the penalty, "
                 f"{pct(after)} after")  # fmt: skip
    ours = f" · after the sampler {pct(c.prob)}" if getattr(step, "after_sampler", True) else ""
    label = getattr(step, "server_sampler", "")
    if label:
        theirs = "not listed" if c.server_prob is None else pct(c.server_prob)
        ours += f" · after {html.escape(label)}'s sampler {theirs}"
    return (
        f"<code>{html.escape(repr(c.text))}</code> (id {c.token_id}), rank {rank}{chosen}<br>"
        f"model's probability {pct(c.raw_prob)}{ours}<br>{fate}"
    )
