"""Inside the step in the window (issue 33). The Inside tab follows the step in view: the run's
clicked token (else its last), or the scored text's clicked token while the Score view is open.
Each step is read by one job on the runner, only when the tab is shown and the runner is idle:
a run is never slowed or interrupted (the tab says so and catches up when it ends), and with
the tab closed nothing is computed. The last few results are kept, so going back is instant;
the path's keys and values are kept too (``engine.internals.reader``), taken from the run's
decode session where it has them, so any token costs a one-token pass (issue 54); its rollout
follows (``gui.inside.rollout``). The step clicked is read first, on the threads the
machine's load leaves free. "Colour by decision layer" asks for the run's decision strip the
same way; the Inputs page asks for integrated gradients on demand (progress on the page and in
the status bar, a Stop that ends it within one block and puts the page back as it was).

The composition root makes one ``InsideActions(InsideNeeds(...))``; it is never given the
window."""

from __future__ import annotations

import html
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Protocol

from PySide6.QtCore import Slot

from engine.classroom.lesson_reader import INSIDE_PAGES
from engine.internals.pace import LoadWatch
from gui.common.token_pane import COLOR_BY_DECISION
from gui.core.runtime import all_cores
from gui.core.session import Session
from gui.inside.api import JOBS
from gui.inside.rollout import Rollouts
from gui.inside.view import InsideView

KEEP = 12  # steps whose views are kept
POLL_FRAMES = 6  # the tab checks which step is in view every 6th frame (200 ms at 30 Hz)


class ScoredText(Protocol):
    """The Score view as the Inside tab reads it (``gui.score.actions.ScoreActions``)."""

    view: Any  # its ScoreView: a pane, a colour choice, token clicks
    score: Any  # the TextScore shown, or None
    selected: int | None


@dataclass
class InsideNeeds(Session):
    """What the Inside tab is given: its tab, the output, the step in view, the Score view."""

    plots: Any  # gui.shell.areas.PlotArea
    output: Any  # gui.shell.areas.OutputBox
    views: Any  # gui.run.view.RunView
    score: ScoredText


@dataclass(frozen=True)
class Target:
    """A path and one of its tokens, as the job needs them (plain values: they cross threads)."""

    key: tuple[Any, ...]
    where: str
    prompt: str  # the run's prompt (encoded on the job's thread) ...
    chat: bool
    context: tuple[int, ...] | None  # ... or the ids a scored text was read after
    tokens: tuple[int, ...]
    step: int
    whole: tuple[int, ...] = ()  # every token of the run or text: what the reader reads on
    kind: str = "run"  # "run" or "score": each keeps its own reader

    def path(self, bundle: Any) -> Any:  # the path up to the token
        return self.paths(bundle)[0]

    def paths(self, bundle: Any) -> tuple[Any, Any]:
        """The path up to the token, and the whole run's or text's."""
        from engine.internals.inspect import path_for

        context = self.context
        if context is None:
            context = tuple(bundle.encode_prompt(self.prompt, self.chat))
        whole = path_for(bundle, context, self.whole or self.tokens)
        return path_for(bundle, context, self.tokens), whole


class InsideActions:
    def __init__(self, w: InsideNeeds) -> None:
        self.w = w
        self.view = InsideView()
        w.plots.tabs.insertTab(1, self.view, "Inside")
        self.results: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
        self.failed: dict[tuple[Any, ...], str] = {}
        self.shown: tuple[Any, ...] | None = None
        self.strip_key: tuple[Any, ...] | None = None  # the path the strip is (being) read for
        self.strips: OrderedDict[tuple[Any, ...], Any] = OrderedDict()  # DecisionStrip by path
        self.current: Target | None = None
        self.readers: dict[str, Any] = {}  # engine.internals.reader.PathReader by Target.kind
        self.fast = True  # False: each step from a full pass, as before issue 54 (the bench)
        self.load = LoadWatch()  # the machine's load, read on the display clock
        self.rollouts = Rollouts(w.runner, self.readers, self.load, self.view, self.sync)
        w.output.color_mode.addItem("Colour by decision layer", COLOR_BY_DECISION)
        self.view.inputs.requested.connect(self.attribute)
        # a click asks at once (after the window's own handlers chose the step), not at the poll
        for signal in (w.plots.tabs.currentChanged, w.output.pane.token_clicked,
                       w.score.view.token_clicked, w.score.view.colour.currentIndexChanged,
                       w.output.color_mode.currentIndexChanged):  # fmt: skip
            signal.connect(lambda _i: self.sync())
        w.runner.failed.connect(self._job_failed)
        self.after_run_step: int | None = None  # a lesson stage's token, shown when its run ends
        w.runner.fraction.connect(self._progress)
        w.runner.progress.connect(self._said)
        self.view.inputs.stop_requested.connect(self.stop_attribution)
        self._frame = 0

    # -- what is in view ------------------------------------------------------------------------

    def _target(self) -> Target | None:
        w = self.w
        scoring = w.score
        if scoring.view.isVisible() and scoring.score is not None:
            score, i = scoring.score, scoring.selected
            if i is None or not 0 <= i < len(score.tokens):
                return None
            tokens = tuple(t.token_id for t in score.tokens)
            where = f"Token {score.tokens[i].index + 1} of the scored text:"
            context = tuple(score.context_ids)
            return Target(("score", id(score), i), where, "", False, context, tokens, i,
                          tokens, "score")  # fmt: skip
        run, steps = w.store.run, w.store.steps
        if run is None or not steps:
            return None
        sel = w.views.selected
        i = sel if sel is not None and sel < len(steps) else len(steps) - 1
        whole = tuple(s.token_id for s in steps)
        tokens = whole[: i + 1]
        key = ("run", run.prompt, bool(run.chat_template), tokens)
        return Target(key, f"Token {i + 1} of the run:", run.prompt, bool(run.chat_template),
                      None, tokens, i, whole)  # fmt: skip

    def _unavailable(self) -> str | None:
        if (bundle := self.w.bundle) is None:
            return "No model is loaded yet."
        if getattr(bundle, "model", None) is None:
            return ("Inside the step needs the model's weights: open a local model (a served "
                    "model sends only its top-N probabilities, not its layers).")  # fmt: skip
        return None

    @Slot()
    def sync(self) -> None:
        """Show the step in view, asking for it when it is not at hand. With the tab closed and
        no pane coloured by decision layer this returns at once (it runs five times a second)."""
        w = self.w
        if w.plots.tabs.currentWidget() is not self.view:
            self._sync_strip()  # where a pane is coloured by decision layer
            return
        target = self._sync_step()
        self._sync_strip()  # after the step in view: what was clicked is read first
        if target is not None and target.key == self.shown:  # then its rollout, where it follows
            self.rollouts.start(target, self.results.get(target.key), self._delivered)

    def _sync_step(self) -> Target | None:
        w = self.w
        target = self._target()
        if target is None:
            self.view.show_message("Generate, or click a token, to look inside the step that "
                                   "made it.")  # fmt: skip
            return None
        if self.rollouts.yield_to(target.key):  # the step clicked as soon as that job ends
            self.w.after_idle(self.sync)
        if target.key == self.shown:
            return target
        result = self.results.get(target.key)
        if result is not None:
            self._show(target, result)
            return target
        why = self._unavailable() or self.failed.get(target.key)
        if why is not None:
            self.view.show_message(why)
            self.shown = target.key
            return None
        if w.runner.busy:
            if w.runner.job_name not in JOBS:
                self.view.show_message("The run is busy: this tab catches up when it stops.")
            return None
        self._start(target)
        return None

    def _start(self, target: Target) -> None:
        fast, load, workbench = self.fast, self.load, self.w.runner.workbench
        reader = self.readers.get(target.kind) if fast else None

        def work(_job: Any, bundle: Any) -> Any:
            from engine.errors import InternalsUnavailable
            from engine.internals.inspect import inspect_step
            from engine.internals.reader import reader_for

            try:
                with all_cores(), load.fitting():
                    path, whole = target.paths(bundle)
                    found = reader_for(reader, bundle, whole) if fast else None
                    if found is None:  # an encoder-decoder, or the bench's old path
                        return None, inspect_step(bundle, path, target.step)
                    # the run's own keys and values where its session has them (read on the
                    # worker: no other job runs); the rollout follows (gui.inside.rollout)
                    return found, found.inspect(bundle, path, target.step, rollout=False,
                                                session=workbench.session)  # fmt: skip
            except InternalsUnavailable as exc:  # said in the tab, not in a dialog
                return None, str(exc)

        def done(result: Any) -> None:
            found, inside = result
            if found is not None:
                self.readers[target.kind] = found
            if isinstance(inside, str):
                self.failed[target.key] = inside
                self.shown = target.key
                self.view.show_message(inside)
                return
            self.results[target.key] = inside
            while len(self.results) > KEEP:
                self.results.popitem(last=False)
            self._show(target, inside)

        self.view.show_message(f"Reading inside token {target.step + 1}…")
        self.current = target
        self.w.runner.job("inside", work, done)

    def _delivered(self, target: Target, inside: Any) -> None:  # the step with its rollout
        if target.key in self.results:
            self.results[target.key] = inside
        if self.shown == target.key:
            self.view.show_inside(inside, target.where)

    def _show(self, target: Target, inside: Any) -> None:
        self.shown, self.current = target.key, target
        self.results.move_to_end(target.key)
        self.view.show_inside(inside, target.where)

    @Slot(str)
    def _job_failed(self, message: str) -> None:
        """A job of ours failed (the window shows the message): do not ask again for it."""
        if self.w.runner.job_name in JOBS and self.current is not None:
            self.failed[self.current.key] = message
            self.view.show_message(message)
            self.shown = self.current.key
            self.view.inputs.end_busy()

    # -- the decision strip -------------------------------------------------------------------

    def _strip_target(self) -> tuple[Any, Target] | None:
        """The pane coloured by decision layer (the Score view's while it is open, else the
        output's) and the path it shows; None when neither asks for decision layers."""
        w, scoring = self.w, self.w.score
        scored = scoring.view.isVisible() and scoring.score is not None
        if (scoring.view.pane if scored else w.output.pane).mode != COLOR_BY_DECISION:
            return None  # nothing asked: nothing built (this runs five times a second)
        if scored:
            score, pane = scoring.score, scoring.view.pane
            tokens = tuple(t.token_id for t in score.tokens)
            target = Target(("strip", "score", id(score)), "", "", False,
                            tuple(score.context_ids), tokens, 0)  # fmt: skip
        else:
            run, steps, pane = w.store.run, w.store.steps, w.output.pane
            if run is None or not steps:
                return None
            tokens = tuple(s.token_id for s in steps)
            key = ("strip", run.prompt, bool(run.chat_template), tokens)
            target = Target(key, "", run.prompt, bool(run.chat_template), None, tokens, 0)
        return pane, target

    def _sync_strip(self) -> None:
        found = self._strip_target()
        if found is None or self.w.runner.busy or self._unavailable():
            return
        pane, target = found
        key = target.key
        if key in self.failed or pane.decisions and key == self.strip_key:
            return
        if key in self.strips:  # read before: the same run or text drawn again
            self.strip_key = key
            self._strip_done(pane, self.strips[key])
            return

        def work(_job: Any, bundle: Any) -> Any:
            from engine.internals.inspect import decision_strip

            with all_cores():
                return decision_strip(bundle, target.path(bundle))

        def done(strip: Any) -> None:
            self.strips[key] = strip
            while len(self.strips) > KEEP:
                self.strips.popitem(last=False)
            self._strip_done(pane, strip)
            self.w.say(f"Decision layers of {len(strip.decision)} tokens in "
                                       f"{strip.seconds:.2f} s.")  # fmt: skip

        self.strip_key = key
        self.current = target
        self.w.runner.job("decision strip", work, done)

    def _strip_done(self, pane: Any, strip: Any) -> None:
        pane.set_decisions(strip)
        if pane is self.w.output.pane:
            self.w.views.update_legend(self.w.looks.theme)
        else:
            self.w.score.view.update_legend()

    # -- input attribution --------------------------------------------------------------------

    @Slot()
    def attribute(self) -> None:
        w, target = self.w, self.current
        inside = self.results.get(self.shown) if self.shown is not None else None
        if target is None or inside is None or target.key != self.shown:
            w.show_error("Pick a token first: the Inputs page attributes the step in view.")
            return
        if self.rollouts.make_way(w.after_idle, self.attribute):  # the rollout goes on later
            return
        if w.runner.busy:
            w.show_error("Busy: wait for the current job, or press Stop.")
            return
        page, load, before = self.view.inputs, self.load, self.view.inputs.state()

        def work(job: Any, bundle: Any) -> Any:
            from engine.internals.attribution import Stopped, attribute_inputs

            try:
                with all_cores(), load.fitting():
                    return attribute_inputs(bundle, target.path(bundle), target.step,
                                            progress=job.fraction.emit, say=job.say,
                                            cancelled=job.controls.cancelled.is_set)  # fmt: skip
            except Stopped:
                return None

        def done(result: Any) -> None:
            if result is None:  # stopped: the page as it was before the button
                page.restore(before)
                self.w.say("Input attribution stopped.")
            elif self.shown == target.key:
                page.show_attribution(result)
                self.w.say(f"Input attribution: {result.n_steps} steps, completeness delta "
                           f"{result.relative_delta:.1%}, {result.seconds:.1f} s.")  # fmt: skip
            else:
                page.end_busy()

        if w.runner.job("attribution", work, done):
            page.start_busy()

    @Slot()
    def stop_attribution(self) -> None:
        """The page's Stop: ends the attribution within one block (the job then ends)."""
        if self.w.runner.job_name == "attribution":
            self.view.inputs.stop.setEnabled(False)
            self.w.runner.stop()

    @Slot(float)
    def _progress(self, fraction: float) -> None:  # the attribution's bar
        if self.w.runner.job_name == "attribution":
            self.view.inputs.progress.setValue(round(1000 * fraction))

    @Slot(str)
    def _said(self, text: str) -> None:  # the attribution's line per round, on the page too
        if self.w.runner.job_name == "attribution":
            self.view.inputs.note.setText(html.escape(text) + " (Stop ends it)")

    # -- lessons ------------------------------------------------------------------------------

    def prepare_stage(self, options: dict[str, Any]) -> None:
        """A lesson stage's Inside options: the page and attention view now, the token when
        the stage's run ends (engine.classroom.lesson_reader's inside_* options)."""
        page = options.get("inside_page")
        if page is not None:
            self.view.pages.setCurrentIndex(INSIDE_PAGES.index(page))
        self.view.attention.want(options.get("attention_view"), options.get("attention_layer"),
                                 options.get("attention_head"))  # fmt: skip
        self.after_run_step = options.get("inside_step")

    @Slot(object)
    def after_run(self, _summary: Any) -> None:
        step, self.after_run_step = self.after_run_step, None
        if step is not None and step <= len(self.w.store.steps):
            self.w.views.select(step - 1)

    def tick(self, _busy: bool) -> None:  # the display clock
        self._frame += 1
        if self._frame % POLL_FRAMES == 0:
            self.load.read()
            self.sync()

    def set_text_size(self, _points: int, _presenting: bool) -> None:  # the display clock
        self.apply_look()

    def set_theme(self, _theme: Any) -> None:
        self.apply_look()

    def apply_look(self) -> None:
        presenting = self.w.looks.presenting
        self.view.set_theme(self.w.looks.theme)
        self.view.set_font_size(self.w.looks.text_points() - (0 if presenting else 1))
        self.view.set_compact(presenting)
