"""Draws the run store into the widgets: the token pane, the distribution, the speed and
entropy curves, the beam tree, the comparison table and the method's statistics. The window's
timer calls ``apply`` with each drained ``Change``; nothing here runs on the worker thread."""

from __future__ import annotations

from itertools import islice
from typing import Any

import numpy as np
from PySide6.QtCore import QEvent
from PySide6.QtWidgets import QLabel

from engine.records import SPEC_DRAFT, SPEC_NGRAM, RunSummary, SpeculativeReport, Step
from engine.words import count
from gui.common.events import OnEvent
from gui.common.step_text import bits, step_summary
from gui.common.theme import BUCKET_LABELS, CUT_MARK, Theme
from gui.common.token_pane import COLOR_BY_DECISION, COLOR_BY_RANK, decision_legend
from gui.controls.method_panel import MethodPanel
from gui.core.store import Change, RunStore

DIST_EVERY = 3  # while generating: the distribution plot at 10 Hz (text stays at 30 Hz)
SERIES_EVERY = 12  # and the speed/entropy curves at 2.5 Hz (offset by one frame); all when idle


def report_text(st: SpeculativeReport) -> str:
    by_pos = " ".join(f"{r:.0%}" for r in st.acceptance_by_position)
    return (
        f"Accepted {st.accepted} of {st.drafted} drafts ({st.acceptance_rate:.0%}); "
        f"{st.mean_accepted_length:.2f} per check; "
        f"{st.target_passes_per_token:.2f} target passes per token.\nBy position: {by_pos}"
    )


def speed_text(
    steps: list[Step], summary: RunSummary | None, pacing: float, paced: np.ndarray
) -> str:
    """The speed as the plot's title and the status bar both say it: decode rate (or the paced
    rate the class sees), time per token, and the time to the first token on its own."""
    last = steps[-1]
    # the last 20 decode steps, walked from the end (a long run is not re-read at each redraw)
    newest = (s.step_time for s in reversed(steps) if not s.prefill and s.step_time > 0)
    decode = list(islice(newest, 20))
    per_token = f" · {1000 * sum(decode) / len(decode):.0f} ms/token" if decode else ""
    first = next((s for s in steps if s.prefill), None)
    ttft = summary.first_token_s if summary is not None else None
    if ttft is None and first is not None:
        ttft = first.step_time
    first_text = f" · first token {ttft:.2f} s" if ttft is not None else ""
    if pacing > 0 and len(paced) and np.isfinite(paced[-1]):
        return (
            f"{paced[-1]:.1f} tok/s paced to {pacing:g} (the model alone: "
            f"{last.tokens_per_s:.1f}){first_text}"
        )
    return f"{last.tokens_per_s:.1f} tok/s{per_token}{first_text}"


def choices(bits: float, at_least: bool = False) -> str:
    """What an entropy means: as unsure as a fair pick among this many tokens (``at_least``:
    the entropy is a lower bound, a served model's top-N with the rest as one)."""
    n = max(1, round(2**bits))
    if at_least:  # short: the curves' titles must fit a narrow column at 1280x720
        return f"a fair pick of {n}+"
    return "1 sure choice" if n == 1 else f"a fair pick of {n}"


def entropy_title(step: Step) -> str:
    """The entropy plot's title for ``step``: "≥" where its entropy is a lower bound."""
    bound = bool(getattr(step, "entropy_lower_bound", False))
    h = step.entropy_raw
    return f"{'≥ ' if bound else ''}{bits(h)} bits ≈ {choices(h, bound)}"


class RunView:
    def __init__(
        self,
        store: RunStore,
        output: Any,  # gui.shell.areas.OutputBox
        plots: Any,  # gui.shell.areas.PlotArea
        method: MethodPanel,
        rate_label: QLabel,
    ) -> None:
        self.store = store
        self.output, self.plots, self.method, self.rate_label = output, plots, method, rate_label
        self.pane = output.pane
        self.pane.bind(store)
        self.selected: int | None = None
        self.pacing = 0.0  # tokens/s the worker is held to (0: off); set by the window
        self.compact = False  # the presentation view: shorter step summaries
        self._frame = 0
        self._summary = ""  # the shown step's summary line, before the cut's label
        self._shown = ""  # the line as this view last set it
        self._resized = OnEvent(plots.dist_box.plot, (QEvent.Type.Resize,), self.follow_cut, True)

    # -- the run -----------------------------------------------------------------------------

    def apply(self, change: Change, busy: bool) -> None:
        if change.reset:
            self.clear()
        if change.truncated:
            self.pane.truncate(change.start)
            if self.selected is not None and self.selected >= change.start:
                self.selected = None
        self.pane.append_steps(change.added)
        for event in change.beam_events:
            self.plots.beam_tree.add_event(event)
        if change.beam_result is not None:
            self.plots.beam_tree.finish(change.beam_result)
        if change.report is not None:
            self.method.stats.setText(report_text(change.report))
        for result in change.results:
            self.plots.compare_view.add_result(result)
        if change.reset or change.truncated or change.added:
            self.redraw(busy)

    def clear(self) -> None:
        self.selected = None
        self.pane.clear_tokens()
        self.plots.beam_tree.clear_tree()
        self.method.stats.setText("")
        self.redraw(busy=False)

    def select(self, index: int | None) -> None:
        self.selected = index
        self.pane.select(index)
        self.redraw(busy=False)

    def follow_cut(self, drawn: bool = False) -> None:
        """The step's summary line, with the cut's label where the plot had no room for it
        (the plot decides again at every resize: the line follows). After a resize
        (``drawn`` False) only while the line is still ours: a scored token's line is the
        Score view's."""
        info = self.plots.dist_box.info
        if not drawn and info.text() != self._shown:
            return
        note = self.plots.dist_box.plot.cut_note if self.store.steps else ""
        extra = f" · <span style='color:{CUT_MARK}'>┅ {note}</span>" if note else ""
        self._shown = self._summary + extra
        info.setText(self._shown)

    def redraw(self, busy: bool) -> None:
        """The distribution of the selected (or last) step and the per-step curves. While
        generating, plots redraw less often than the text (painting holds the GIL the worker
        needs), and never both in one frame."""
        steps = self.store.steps
        dist, info = self.plots.dist_box.plot, self.plots.dist_box.info
        speed, entropy = self.plots.speed, self.plots.entropy
        if not steps:
            dist.set_step(None)
            self._summary = self._shown = step_summary(None)
            info.setText(self._summary)
            speed.clear_series()
            entropy.clear_series()
            self.rate_label.setText("")
            return
        index = self.selected if self.selected is not None and self.selected < len(steps) else -1
        self._frame += 1
        if not busy or self._frame % DIST_EVERY == 0:
            dist.set_step(steps[index])
            self._summary = step_summary(steps[index], compact=self.compact)
            self.follow_cut(drawn=True)
        if busy and self._frame % SERIES_EVERY != 1:
            return
        x = np.arange(1, len(steps) + 1)
        series = {k: np.asarray(v) for k, v in self.store.series.items()}
        last = steps[-1]
        text = speed_text(steps, self.store.summary, self.pacing, series["paced"])
        running = series["paced"] if self.pacing > 0 else series["running"]
        speed.set_note("paced" if self.pacing > 0 else "")
        speed.set_series(
            x, {"running": running, "this step": series["per_step"]}, text.split(" · first")[0]
        )
        entropy.set_series(
            x, {"model": series["h_raw"], "after sampler": series["h"]},
            entropy_title(last),
        )  # fmt: skip
        marker = self.selected + 1 if self.selected is not None else None
        speed.mark(marker)
        entropy.mark(marker)
        self.rate_label.setText(f"{count(len(steps), 'token')} · {text}")

    # -- colours -----------------------------------------------------------------------------

    def update_legend(self, theme: Theme) -> None:
        t = theme

        def chip(color: str, label: str) -> str:
            return f"<span style='background:{color}; color:{t.text}'>&nbsp;{label}&nbsp;</span>"

        if self.method.current() in (SPEC_NGRAM, SPEC_DRAFT):
            draft, target = chip(t.draft, "draft accepted"), chip(t.target, "chosen by the target")
            self.output.legend.setText(f"Speculative: {draft} {target}")
            return
        if self.pane.mode == COLOR_BY_RANK:
            pairs = zip(t.buckets, BUCKET_LABELS, strict=True)
            text = "Rank of the chosen token: " + " ".join(chip(c, label) for c, label in pairs)
        elif self.pane.mode == COLOR_BY_DECISION:
            self.output.legend.setText(decision_legend(t, self.pane.layers))
            return
        else:
            text = f"Probability: {chip(t.prob_low, '0%')} → {chip(t.prob_high, '100%')}"
        self.output.legend.setText(f"{text} {chip(t.forced, 'chosen by you')}")
