"""The run store: the one owner of the run the window shows. No Qt.

The worker pushes engine records from its thread (``push``: an append to a deque, which is
atomic). The window's timer calls ``drain`` on the GUI thread: the store applies the records
(new run, steps, rewinds, beam events, reports, results, the summary), keeps its memory
bounded, and returns a ``Change`` saying what the views must redraw. Export and the autosave
read the store too.
"""

from __future__ import annotations

import json
import math
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import pydantic_core

from engine.classroom.export import (
    run_to_csv,
    run_to_json,
    run_to_markdown,
    step_to_dict,
)
from engine.records import (
    KEEP_FULL,
    BeamEvent,
    BeamResult,
    ChoiceHistory,
    MethodResult,
    Rewind,
    RunStarted,
    RunSummary,
    SpeculativeReport,
    Step,
    lighten_old,
)
from engine.validate.autosave import AUTOSAVE_FORMAT  # one spelling for writer and reader
from gui.core.tree_track import TreeTrack, common_prefix


def _dumps(step: Step) -> str:
    """A step's autosave JSON (pydantic-core's writer: 2.5x Python's on the 80,000 records a
    long restored run writes when it is closed; NaN written as Python's json writes it)."""
    record = step_to_dict(step)
    try:
        return pydantic_core.to_json(record, inf_nan_mode="constants").decode()
    except ValueError:  # a lone surrogate, which UTF-8 cannot hold: the file writer replaces it
        return json.dumps(record, ensure_ascii=False)


SERIES = ("running", "per_step", "h_raw", "h", "paced")
NAN = math.nan


@dataclass
class Change:
    """What one drain changed. Views truncate to ``start`` (when ``truncated``) and append
    ``added``; the rest they take as given."""

    reset: bool = False  # a new run: clear everything first
    start: int = 0  # index of the first step in ``added``
    truncated: bool = False  # steps from ``start`` on were replaced
    added: list[Step] = field(default_factory=list)
    beam_events: list[BeamEvent] = field(default_factory=list)
    beam_result: BeamResult | None = None
    report: SpeculativeReport | None = None
    results: list[MethodResult] = field(default_factory=list)
    summary: RunSummary | None = None
    choices: ChoiceHistory | None = None

    def __bool__(self) -> bool:
        return bool(
            self.reset or self.truncated or self.added or self.beam_events or self.results
            or self.beam_result or self.report or self.summary or self.choices
        )  # fmt: skip


class RunStore:
    def __init__(self, keep_full: int | None = KEEP_FULL) -> None:
        self.keep_full = keep_full
        self.inbox: deque[Any] = deque()
        self._pushed_at: deque[float] = deque()  # when each Step was pushed, in order
        self.version = 0  # bumped by every change, so savers know when to write
        self.results: list[MethodResult] = []
        self._restoring = False  # steps being drained come from a file
        self.track = TreeTrack()  # every branch of the runs on this prompt
        self.clear()

    @property
    def tree(self) -> Any:
        """The run tree (engine.tree.RunTree) the steps are a path of; None before a run."""
        return self.track.tree

    def clear(self, tree: bool = False) -> None:
        """Forget the run (the comparison results stay); with ``tree`` its tree leaves the
        screen too, for the shelf of the session's trees (a new run on the same prompt
        otherwise adds a branch to it)."""
        if tree:
            self.track.forget()
        else:
            self.track.rewind(0)
        self.run: RunStarted | None = None
        self.steps: list[Step] = []
        self.series: dict[str, list[float]] = {k: [] for k in SERIES}
        self.beam_events: list[BeamEvent] = []
        self.beam_result: BeamResult | None = None
        self.report: SpeculativeReport | None = None
        self.summary: RunSummary | None = None
        self.choices = ChoiceHistory(False, False)
        # the engine does not hold these steps (an autosave, a tree file, a node gone to): the
        # next Continue, Step or choice rebuilds its session from them first
        self.restored = False
        self.arrived: list[float] = []  # when each step reached the store (wall clock)
        # each step's autosave JSON, written once; None until the first autosave for steps
        # that came from a file (opening a long run need not serialise it again)
        self._saved: list[str | None] = []
        self.version += 1

    # -- in (any thread) ---------------------------------------------------------------------

    def push(self, record: Any) -> None:
        if isinstance(record, Step):
            self._pushed_at.append(time.perf_counter())  # before the record: drain pairs them
        self.inbox.append(record)

    # -- out (GUI thread) --------------------------------------------------------------------

    def drain(self) -> Change:
        change = Change(start=len(self.steps))
        shown = len(self.steps)  # what the views show before this drain
        while self.inbox:
            record = self.inbox.popleft()
            if isinstance(record, Step):
                self._append(record)
            elif isinstance(record, Rewind):
                self._truncate(record.keep)
                self.track.rewind(record.keep)
                change.start = min(change.start, record.keep)
            elif isinstance(record, RunStarted):
                self.clear()
                self.run = record
                self.track.start(record.prompt, record.chat_template)
                change = Change(reset=True)
                shown = 0
            elif isinstance(record, BeamEvent):
                self.beam_events.append(record)
                change.beam_events.append(record)
            elif isinstance(record, BeamResult):
                self.beam_result = change.beam_result = record
            elif isinstance(record, SpeculativeReport):
                self.report = change.report = record
            elif isinstance(record, MethodResult):
                self.results.append(record)
                change.results.append(record)
            elif isinstance(record, RunSummary):
                self.summary = change.summary = record
            elif isinstance(record, ChoiceHistory):
                self.choices = change.choices = record
        change.truncated = change.start < shown
        change.added = self.steps[change.start :]
        if change:
            self.version += 1
        return change

    def _append(self, step: Step) -> None:
        arrived = self._pushed_at.popleft() if self._pushed_at else time.perf_counter()
        self.steps.append(step)
        self.track.add(step)
        self.arrived.append(arrived)
        self._saved.append(None if self._restoring else _dumps(step))
        for i in lighten_old(self.steps, 1, self.keep_full):  # the autosave keeps what we keep
            self.track.relight(i, self.steps[i])
            if self._saved[i] is not None:
                self._saved[i] = _dumps(self.steps[i])
        s = self.series
        # The step that read the prompt is not a decode step: no point on the speed curves
        # (its time is the time to first token, shown on its own).
        s["running"].append(NAN if step.prefill else step.tokens_per_s)
        decode = step.step_time > 0 and not step.prefill
        s["per_step"].append(1.0 / step.step_time if decode else NAN)
        s["paced"].append(self._paced_rate())
        s["h_raw"].append(step.entropy_raw)
        # a raw-only served stream: nothing after the sampler is known, so no point is drawn
        s["h"].append(step.entropy if getattr(step, "after_sampler", True) else NAN)

    def _paced_rate(self) -> float:
        """Tokens per second as they reached the screen, over the last 20 (pacing included)."""
        t = self.arrived[-21:]
        if len(t) < 2 or t[-1] <= t[0]:
            return NAN
        return (len(t) - 1) / (t[-1] - t[0])

    def _truncate(self, keep: int) -> None:
        del self.steps[keep:]
        del self.arrived[keep:]
        del self._saved[keep:]
        for values in self.series.values():
            del values[keep:]

    # -- reading -----------------------------------------------------------------------------

    @property
    def text(self) -> str:
        return "".join(s.text for s in self.steps)

    @property
    def method(self) -> str | None:
        return self.run.method if self.run else None

    def can_resume(self) -> bool:
        """A restored sampling run that can go on (its cache is rebuilt in one prefill)."""
        from engine.records import SAMPLING

        return self.restored and self.method == SAMPLING and self.can_continue()

    def can_undo(self) -> bool:
        """A choice to take back, or a Clear (its tree comes back)."""
        return self.choices.can_undo or (self.track.cleared is not None and self.tree is None)

    def can_continue(self) -> bool:
        """Steps exist and the run did not end its answer or fill the context."""
        if not self.steps or self.steps[-1].is_eos:
            return False
        return not (self.summary is not None and self.summary.finished)

    # -- the tree ------------------------------------------------------------------------------

    def goto(self, nid: int) -> Change:
        """Show the path to node ``nid`` (drain first: records in the inbox would come first):
        the steps it shares with the path shown stay, the rest are replaced by its nodes'
        records. The engine does not follow at once (moving
        about the tree costs no model work): the next run action rebuilds from these steps."""
        if self.tree is None or nid not in self.tree.nodes:
            raise KeyError(f"no node {nid}")
        steps = self.track.steps_to(nid)
        keep = common_prefix(self.track.path, self.tree.path(nid))
        return self._show(keep, steps[keep:])

    def adopt_tree(self, tree: Any, chat_template: bool = False) -> Change:
        """Show a tree from a file (or a lesson), at its cursor; a run on it starts by
        rebuilding the engine's session from the prompt and the path."""
        from engine.records import SAMPLING

        self.drain()
        cursor = tree.cursor
        self.track.adopt(tree, chat_template)  # the tree that was open goes on the shelf
        self.clear()
        self.run = RunStarted(SAMPLING, tree.nodes[0].text, len(tree.prompt_ids),
                              dict(tree.settings), chat_template=chat_template)  # fmt: skip
        change = self._show(0, self.track.steps_to(cursor))
        change.reset = True
        return change

    def _show(self, keep: int, steps: list[Step]) -> Change:
        self.inbox.extend([Rewind(keep), *steps])
        self._restoring = True  # their autosave text is written when the autosave needs it
        try:
            change = self.drain()
        finally:
            self._restoring = False
        self.summary = None  # the summary was of the run that ended elsewhere
        self.choices = change.choices = ChoiceHistory(False, False)  # undo: of another path
        self.restored = True
        self.version += 1
        return change

    # -- files -------------------------------------------------------------------------------

    def export(self, kind: str, model: str, settings: dict[str, Any],
               decisions: tuple[int, dict[int, int | None]] | None = None) -> str:  # fmt: skip
        """The run as ``kind``; the web page with the decision layers where they were read
        (``decisions``: the model's layers and step index -> layer)."""
        prompt = self.run.prompt if self.run else ""
        tree = self.tree if self.tree is not None and len(self.tree.nodes) > 1 else None
        ending = self.summary.ending if self.summary is not None else ""  # the grammar's word
        if kind == "json":
            return run_to_json(prompt, model, settings, self.steps, tree, ending)
        if kind == "csv":
            return run_to_csv(self.steps)
        if kind == "md":
            return run_to_markdown(prompt, model, settings, self.steps, ending)
        if kind == "html":
            from engine.classroom.share import run_to_html

            method = self.run.method if self.run else ""
            layers, decided = decisions or (0, {})
            return run_to_html(prompt, model, settings, self.steps, method=method, tree=tree,
                               decisions=decided, layers=layers, ending=ending)  # fmt: skip
        raise ValueError(f"unknown export format {kind!r}")

    def autosave_text(self, head: dict[str, Any]) -> str:
        """The autosave file: ``head`` (prompt, settings, ...) and every step. Each step was
        serialised once, when it arrived, so a long run costs a join, not a walk."""
        head = {"format": AUTOSAVE_FORMAT, **head}
        if self.tree is not None and not self._tree_fits():  # the next start says so too
            head["tree_left_out"] = len(self.tree.nodes) - 1
        if self.run is not None:
            head.setdefault("method", self.run.method)
            head.setdefault("prompt", self.run.prompt)
            head.setdefault("chat_template", self.run.chat_template)
        kept = self.track.shelf.kept
        return (
            json.dumps(head, ensure_ascii=False)[:-1]
            + (f', "tree": {self.track.json_text()}' if self._tree_fits() else "")
            + (f', "trees": {self.track.shelf.json_text()}' if kept else "")
            + ', "steps": ['
            + ",".join(self._filled())
            + "]}"
        )

    def _tree_fits(self) -> bool:
        """A tree past the tree reader's bound is left out (the path is still saved): one
        that could not be read back would set the whole autosave aside."""
        from engine.tree.node import MAX_NODES

        return self.tree is not None and len(self.tree.nodes) <= MAX_NODES

    def _filled(self) -> list[str]:
        if None in self._saved:
            self._saved = [t if t is not None else _dumps(self.steps[i])
                           for i, t in enumerate(self._saved)]  # fmt: skip
        return self._saved  # type: ignore[return-value]

    def restore(self, data: dict[str, Any]) -> Change:
        """Load an autosave's run (``data`` as ``autosave_text`` wrote it, parsed); a damaged
        one raises ``engine.validate.InputError`` (a ValueError) naming the field."""
        from engine.validate.autosave import saved_run

        return self.restore_saved(saved_run(data))

    def restore_saved(self, saved: Any) -> Change:
        """Load a checked autosave (``engine.validate.autosave.SavedRun``); returns the change
        the views must draw."""
        run = RunStarted(
            saved.method, saved.prompt, 0, saved.settings.to_dict(),
            chat_template=saved.chat_template,
        )  # fmt: skip
        if saved.tree is not None:  # the steps below walk the saved tree, not a new one
            self.track.adopt(saved.tree, saved.chat_template)
        self.inbox.extend([run, *saved.steps])
        self._restoring = True
        try:
            change = self.drain()
        finally:
            self._restoring = False
        if saved.tree is not None and self.track.tree is not saved.tree:
            self._replay(saved.tree, saved.chat_template)  # its root is not the run's prompt
        self.track.shelf.restore(saved.trees)  # the session's other trees
        self.restored = True
        return change

    def _replay(self, tree: Any, chat_template: bool) -> None:
        """The saved tree, with the saved steps as its path again (they carry the records)."""
        self.track.adopt(tree, chat_template, keep_open=False)
        self.track.rewind(0)
        for step in self.steps:
            self.track.add(step)
