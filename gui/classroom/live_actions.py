"""The live round in the window: the class answers the model's next token from their phones
(``engine.classroom.live``; the server, ``live_server``, runs on its own thread only while a
round is open). ``LiveActions`` is given ``LiveNeeds``, never the window.

Ask peeks at the model's next-token distribution on the worker (the run does not move) and
sends the question; Reveal makes the step (in "be the sampler", then takes the class's token
there, the tree's own branch for one token, its record marked as the class's choice), reads
the guesses with the model's tokenizer on the worker, scores every answer, sends each student
their own result and draws the class's answers as bars of their own beside the model's. The
server's events reach the window through a queue drained on the display clock (``tick``): the
window never waits on the network. A lesson's live stage (``lesson_stage``) opens the round
and asks in its mode; Score the text sets what the class wrote as the sampler beside
the model's greedy and sampled texts (``engine.classroom.live_sampler``)."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QEvent, Qt
from PySide6.QtWidgets import QDockWidget, QFileDialog

from engine.classroom import live_messages as say_to
from engine.classroom.live import SAMPLER, Distribution, LiveRound, Reveal, class_span
from engine.classroom.live_export import write_round
from engine.classroom.live_server import LiveServer, lan_addresses
from engine.records import CLASS
from gui.classroom.live_panel import LivePanel, visible
from gui.common.actions import ActionSpec, Place
from gui.common.events import OnEvent
from gui.core.session import Session
from gui.run.api import show_class

if TYPE_CHECKING:
    from gui.run.api import RunView

CONTEXT_CHARS = 1500  # the end of the text so far that a phone shows


@dataclass
class LiveNeeds(Session):
    plots: Any  # gui.shell.areas.PlotArea: the distribution plot shows the class's answers
    views: RunView
    request: Callable[..., Any]  # the panels' RunRequest (prompt, chat template, settings)
    step_once: Callable[[], None]
    add_dock: Callable[[QDockWidget], None]


class LiveActions:
    def __init__(self, w: LiveNeeds) -> None:
        self.w = w
        self.round: LiveRound | None = None
        self.server: LiveServer | None = None
        self.dist: Distribution | None = None
        self.pending: str | None = None  # "step" / "branch": a reveal waits for that job
        self.class_choice: int | None = None
        self.class_steps: dict[int, int] = {}  # step index -> the token the class chose
        self.text_result: Any = None  # the class's text scored (live_sampler.TextComparison)
        self.rng = random.Random()
        self.panel = LivePanel()
        self.dock = QDockWidget("Live round", w.parent)
        self.dock.setObjectName("live_dock")
        self.dock.setWidget(self.panel)
        self.dock.setAllowedAreas(Qt.DockWidgetArea.LeftDockWidgetArea
                                  | Qt.DockWidgetArea.RightDockWidgetArea)  # fmt: skip
        w.add_dock(self.dock)
        self.dock.hide()
        p = self.panel
        p.start_button.clicked.connect(self.toggle_open)
        p.ask_button.clicked.connect(self.ask)
        p.close_button.clicked.connect(self.close_answers)
        p.reveal_button.clicked.connect(self.reveal)
        p.remove_button.clicked.connect(self.remove_selected)
        p.export_button.clicked.connect(self.export)
        p.score_button.clicked.connect(self.score_text)
        self._closer = OnEvent(w.parent, (QEvent.Type.Close,), self.shutdown)  # the server too

    def action_specs(self) -> list[ActionSpec]:
        return [ActionSpec(
            "live_round", "Live round (students' phones)…", self.show,
            (Place("lessons", "live", 0), Place("toolbar.main", "present", 1)),
            tip="Students guess and vote on the next token from their own phones, on this "
            "network; nothing leaves the room", icon_text="Live round",
        )]  # fmt: skip

    # -- opening and closing -------------------------------------------------------------------

    def show(self) -> None:
        if not self.panel.address.count():
            self.panel.set_addresses(lan_addresses())
        self.dock.show()
        self.dock.raise_()

    def toggle_open(self) -> None:
        if self.server is not None:
            self.end()
        else:
            self.open_round()

    def open_round(self, host: str | None = None, port: int | None = None) -> str | None:
        if self.server is not None:
            return self.server.url
        self.round = LiveRound()
        host = host or self.panel.address.currentText() or "127.0.0.1"
        server = LiveServer(self.round, host, self.panel.port.value() if port is None else port)
        try:
            url = server.start()
        except OSError as exc:
            self.w.show_error(f"The live round could not open on {host}.\n\n{exc}")
            return None
        self.server = server
        self.panel.set_open(url, self.round.code)
        self.refresh()
        self.w.say(f"Live round open: students go to {url} (code {self.round.code}).")
        return url

    def shutdown(self) -> None:
        """The window closes: the server stops (no widget is touched)."""
        if self.server is not None:
            self.server.push_all(say_to.ENDED)
            self.server.stop()
            self.server = None

    def lesson_stage(self, mode: str) -> None:
        """A lesson's live stage: the round opened if it is not (on the address the panel
        offers first), the stage's mode set, and its question asked once the window is idle
        (the stage may be loading its model); a stage's new prompt starts a new run."""
        self.show()
        self.panel.mode.setCurrentIndex(max(0, self.panel.mode.findData(mode)))
        if self.server is None and self.open_round() is None:
            return
        self.w.after_idle(self._ask_stage)

    def _ask_stage(self) -> None:
        w = self.w
        run = w.store.run
        if run is not None and run.prompt != w.request(new_seed=False).prompt:
            w.runner.forget_run()  # Reveal's step starts a run of the stage's prompt
            w.store.clear()
            w.views.clear()
        self.ask()

    def end(self) -> None:
        """Stop the server (the students' pages are told); the round stays for Export."""
        self.shutdown()
        self.pending = None
        self.panel.set_open(False)
        self.w.say("Live round ended.")

    # -- a question ----------------------------------------------------------------------------

    def ask(self) -> None:
        w = self.w
        if self.round is None or self.server is None:
            return
        if w.runner.busy or w.bundle is None:
            w.say("Load a model and wait for the current job before asking.")
            return
        mode = self.panel.mode.currentData()
        store = w.store
        if store.run is not None and store.steps:
            prompt, chat = store.run.prompt, store.run.chat_template
            prefix = [s.token_id for s in store.steps]
            context = prompt + "".join(s.text for s in store.steps)
        else:
            req = w.request(new_seed=False)
            prompt, chat, prefix, context = req.prompt, req.chat_template, [], req.prompt
        if len(context) > CONTEXT_CHARS:
            context = "…" + context[-CONTEXT_CHARS:]
        step_index = len(prefix)

        def work(job: Any, bundle: Any) -> Distribution:
            from engine.classroom.live_model import peek

            return peek(bundle, prompt, chat, prefix)

        w.runner.job("live round", work,
                     lambda dist: self._asked(mode, dist, context, step_index))  # fmt: skip

    def _asked(self, mode: str, dist: Distribution, context: str, step_index: int) -> None:
        if self.round is None or self.server is None:
            return
        self.dist = dist
        choices = dist.top(self.panel.choices.value()) if mode != "guess" else []
        q = self.round.ask(mode, context, choices, step_index)
        self.server.push_all(say_to.question(q))
        show_class(self.w.plots.dist_box.plot, {}, {})
        self.panel.answers.setText(f"Question {q.number} is open.")
        self.refresh()

    def close_answers(self) -> None:
        if self.round is not None and self.server is not None and self.round.accepting:
            self.round.close()
            self.server.push_all(say_to.CLOSED)
            self.refresh()

    def reveal(self) -> None:
        """Close the answers, make the step (the class's token in "be the sampler"), score."""
        w, r = self.w, self.round
        if r is None or r.question is None or self.dist is None or self.pending:
            return
        if w.runner.busy:
            w.say("Wait for the current job, then Reveal.")
            return
        self.close_answers()
        self.class_choice = None
        if r.question.mode == SAMPLER:
            how = self.panel.how.currentData()
            self.class_choice = r.class_token(how, self.dist, self.rng)
        self.pending = "step"
        w.step_once()
        if not w.runner.busy:  # the step could not start (the run has ended): the greedy token
            self.pending = None
            self._score(self.dist.top(1)[0].token_id)

    def job_done(self, name: str) -> None:
        """The window calls this after every job: a reveal's step (or branch) arrives here."""
        if self.pending is None:
            return
        w, steps = self.w, self.w.store.steps
        step = steps[-1] if steps else None
        if self.pending == "step" and name in ("step", "resume") and step is not None:
            choice = self.class_choice
            if choice is not None:  # taken even where it is the model's: marked as the class's
                self.pending = "branch"
                settings = w.request(new_seed=False).settings
                w.after_idle(lambda: self._branch(step.index, choice, settings))
                return
        self.pending = None
        token = step.token_id if step is not None else self.dist.top(1)[0].token_id
        if self.class_choice is not None and step is not None:
            self.class_steps[step.index] = self.class_choice
        w.after_idle(lambda: self._score(token))

    def _branch(self, index: int, token: int, settings: Any) -> None:
        """The class's token at ``index``: the tree's own branch, for one token, its step
        marked as the class's choice (a job named as the branch it is)."""
        runner = self.w.runner

        def work(job: Any, bundle: Any) -> Any:
            from engine.classroom.live_sampler import class_branch

            return class_branch(runner.workbench, index, token, settings)

        if not runner.job("branch", work, lambda _summary: None):
            self.pending = None
            self._score(self.w.store.steps[-1].token_id)

    def _score(self, token_id: int) -> None:
        r, dist = self.round, self.dist
        if r is None or dist is None or r.question is None:
            return
        guesses = r.guesses()
        if not guesses:
            self._revealed(token_id, {})
            return

        def work(job: Any, bundle: Any) -> dict:
            from engine.classroom.live_model import guess_tokens

            return guess_tokens(bundle.tokenizer, dist, guesses)

        if not self.w.runner.job("live round: reading the guesses", work,
                                 lambda tokens: self._revealed(token_id, tokens)):  # fmt: skip
            self._revealed(token_id, {})

    def _revealed(self, token_id: int, tokens: dict) -> None:
        r, dist = self.round, self.dist
        if r is None or dist is None or r.question is None:
            return
        v = r.reveal(dist, token_id, tokens, self.class_choice)
        if self.server is not None:
            self.server.push_to(say_to.reveals(v, list(r.students)))
        marks = self.marks(v)
        plots = self.w.plots
        plots.tabs.setCurrentWidget(plots.dist_box)
        self.w.views.select(None)
        show_class(plots.dist_box.plot, marks, v.class_counts)
        self.panel.show_reveal(v, marks)
        self.panel.show_totals(*r.summary(), r.leaderboard())
        self.dist = None
        if v.class_choice is not None:
            self.w.say(f"Step {v.question.step_index + 1} is the class's choice: "
                       f"{visible(v.token_text)}.")  # fmt: skip
        self.refresh()

    @staticmethod
    def marks(v: Reveal) -> dict[int, str]:
        """token id -> how many of the class named it, most named first."""
        total = sum(v.class_counts.values()) or 1
        ranked = sorted(v.class_counts.items(), key=lambda kv: -kv[1])
        return {tid: f"{n} of the class ({n / total:.0%})" for tid, n in ranked}

    def score_text(self) -> None:
        """Be the sampler's end: the class's text (from its first chosen token to its last)
        beside the model's greedy and sampled texts of the same length, by perplexity."""
        w = self.w
        steps, run = w.store.steps, w.store.run
        span = class_span(steps)
        if span is None or run is None:
            w.say("The class has chosen no token yet: ask in Be the sampler, then Reveal.")
            return
        if w.runner.busy or w.bundle is None:
            w.say("Wait for the current job, then score the class's text.")
            return
        start, end = span
        prefix = [s.token_id for s in steps[:start]]
        tokens = [s.token_id for s in steps[start:end]]
        chosen = sum(s.source == CLASS for s in steps[start:end])
        prompt, chat = run.prompt, run.chat_template

        def work(job: Any, bundle: Any) -> Any:
            from engine.classroom.live_sampler import score_class_text

            return score_class_text(bundle, prompt, chat, prefix, tokens, chosen)

        if w.runner.job("live round: scoring the class's text", work, self._text_scored):
            w.say("Scoring the class's text beside greedy and sampled texts…")

    def _text_scored(self, result: Any) -> None:
        self.text_result = result
        self.panel.show_text_score(result)

    # -- the students --------------------------------------------------------------------------

    def tick(self, busy: bool) -> None:  # the display clock
        server = self.server
        if server is None or server.events.empty():
            return
        while not server.events.empty():
            server.events.get_nowait()
        self.refresh()

    def refresh(self) -> None:
        r = self.round
        if r is None:
            return
        with r.lock:
            students = [(s.sid, s.nick, s.connected) for s in r.students.values()]
        self.panel.show_students(students, r.answered())

    def remove_selected(self) -> None:
        r = self.round
        if r is None:
            return
        for sid in self.panel.selected_students():
            if r.remove(sid) is not None and self.server is not None:
                self.server.drop(sid, say_to.REMOVED)
        self.refresh()

    def set_text_size(self, points: int, presenting: bool) -> None:  # the display clock
        self.panel.set_text_size(points, presenting)

    def export(self, path: str | None = None) -> bool:
        """Nicknames and answers only, as CSV or JSON (by the file's suffix)."""
        if self.round is None:
            return False
        if path is None:
            path, _ = QFileDialog.getSaveFileName(self.w.parent, "Export the live round",
                                                  str(Path.home() / "live-round.csv"),
                                                  "CSV (*.csv);;JSON (*.json)")  # fmt: skip
            if not path:
                return False
        try:
            write_round(self.round.export(), path)
        except OSError as exc:
            self.w.show_error(f"The round could not be saved.\n\n{exc}")
            return False
        return True
