"""Score a text in the window (issue 25): File > Score a text… (paste or open a file), the
scoring on the job loop's thread (``EngineRunner.job``), the Score view in the middle column
in place of the output, a clicked token's top-N in the Distribution tab, and "branch here".

"Branch here": a click on a bar of the Distribution tab while it shows a scored token. The
prompt becomes the context plus the text before that token (decoder-only models; the chat
template is switched off, as the text was scored without it), a one-token run is made from it
(Step) and the clicked token is then taken at that first step (the window's choose path), so
the run continues from the alternative for the usual token budget. On an encoder-decoder model
the context stays the encoder input and only the first token can be branched (the window
cannot start the decoder from a given text yet). The text before the token is found on the
job's thread too (a served model's tokenizer may answer over the network).

The composition root makes one ``ScoreActions(ScoreNeeds(...))``; it is never given the
window."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PySide6.QtCore import QTimer, Slot
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from engine.cli.tree import score_precision_note
from engine.records import SCORED, Step
from engine.tree.scored import TextScore
from engine.words import count
from gui.common.actions import ActionSpec, Place
from gui.core.session import Session
from gui.inside.api import JOBS as INSIDE_JOBS
from gui.score.view import ScoreView, describe_token, score_steps

MAX_SCORE_FILE_BYTES = 1024 * 1024  # a text file to score; bigger is refused, not truncated
MAX_SCORE_CHARS = 200_000  # one forward pass over the whole text: keep it to a page or a few
BRANCH_HINT = "Click a bar: branch here with that token."
SCORE_TOP_N = 50  # candidates kept per token: the distribution plot's largest top-N
CONTEXT_HINT = (
    "Without a context the text is read as the start of a document: its first token is a "
    "guess from nothing, marked \u201cno context\u201d and not counted as a surprise. A "
    "sentence before it (the story so far, a title) makes the first words fairer. For a T5 "
    "model the context is its encoder input."
)


@dataclass
class ScoreNeeds(Session):
    """What the Score view is given: the middle column (it takes the output's place), the
    plots, the prompt, and the run's calls it branches with."""

    output: QWidget  # gui.shell.areas.OutputBox
    plots: Any  # gui.shell.areas.PlotArea
    prompt_box: Any  # gui.shell.areas.PromptBox
    choose_token: Callable[[int, int], None]
    clear_output: Callable[[], None]
    step_once: Callable[[], None]
    inside_shown: Callable[[], bool]  # the Inside tab is the one in view (it follows a click)


def read_text_file(path: str | Path) -> str:
    """A text file to score, bounded; undecodable bytes become U+FFFD."""
    with open(path, "rb") as f:
        data = f.read(MAX_SCORE_FILE_BYTES + 1)
    if len(data) > MAX_SCORE_FILE_BYTES:
        raise ValueError(f"{Path(path).name} is over {MAX_SCORE_FILE_BYTES // 1024} KB: "
                         "score a shorter text")  # fmt: skip
    return data.decode("utf-8", errors="replace")


class ScoreDialog(QDialog):
    """The text (pasted, or opened from a file) and an optional context before it."""

    def __init__(self, parent: QWidget | None, text: str = "", prompt: str = "") -> None:
        super().__init__(parent)
        self.setWindowTitle("Score a text")
        self.text = QPlainTextEdit(text)
        self.text.setObjectName("score_text")
        self.text.setPlaceholderText("Paste a text here, or open a file.")
        self.context = QLineEdit(prompt)
        self.context.setObjectName("score_context")
        self.context.setPlaceholderText("For example: Here is a short story.")
        open_file = QPushButton("Open a file…")
        open_file.clicked.connect(self._open)
        buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel
        )
        buttons.button(QDialogButtonBox.StandardButton.Ok).setText("Score")
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        how = "Every token is coloured by its rank in the model's list; click one to see more."
        layout.addWidget(QLabel(how))
        layout.addWidget(self.text, 1)
        layout.addWidget(QLabel("<b>Context</b> (optional): what the model reads before the text"))
        layout.addWidget(self.context)
        hint = QLabel(CONTEXT_HINT)
        hint.setObjectName("score_context_hint")
        hint.setWordWrap(True)
        layout.addWidget(hint)
        layout.addWidget(open_file)
        layout.addWidget(buttons)
        self.resize(640, 420)

    def _open(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Open a text", "", "Text (*.txt *.md);;All (*)")
        if not path:
            return
        try:
            self.text.setPlainText(read_text_file(path))
        except (OSError, ValueError) as exc:
            self.text.setPlaceholderText(f"Could not open it: {exc}")


class ScoreActions:
    """The Score view, its menu entry and its job; see the module's docstring."""

    def __init__(self, w: ScoreNeeds) -> None:
        self.w = w
        self.view = ScoreView()
        self.view.hide()
        w.output.parentWidget().addWidget(self.view)  # the middle column's splitter
        self.score: TextScore | None = None
        self.steps: list[Step] = []
        self.text, self.prompt = "", ""
        self._sizes: list[int] = []  # the middle column's split before the view opened
        self._hint = ""  # the Distribution tab's hint before it said BRANCH_HINT
        self.selected: int | None = None
        w.runner.busy_changed.connect(self._on_busy)
        self.view.token_clicked.connect(self.select)
        self.view.closed.connect(self.close)

    def action_specs(self) -> list[ActionSpec]:
        """File > Score a text…"""
        return [
            ActionSpec("score_text", "Score a text…", self.ask, (Place("file", "lesson", 1),),
                       tip="Read a text through the model's eyes: rank and surprisal"),
        ]  # fmt: skip

    # -- scoring ------------------------------------------------------------------------------

    @Slot()
    def ask(self) -> None:
        dialog = ScoreDialog(self.w.output.window(), self.text, self.prompt)
        if dialog.exec() == QDialog.DialogCode.Accepted:
            self.show(dialog.text.toPlainText(), dialog.context.text())

    def show(self, text: str, prompt: str = "") -> None:
        """Score ``text`` after ``prompt`` on the loaded model (off the GUI thread), then show
        it; refused while a job runs."""
        w = self.w
        if not text.strip():
            w.show_error("Nothing to score: paste or open a text first.")
            return
        if len(text) + len(prompt) > MAX_SCORE_CHARS:
            w.show_error(f"The text is over {MAX_SCORE_CHARS:,} characters: score a shorter one.")
            return
        if w.runner.busy:
            w.show_error("Busy: press Stop first, then score the text.")
            return
        self.text, self.prompt = text, prompt

        def work(_job: Any, bundle: Any) -> TextScore:
            from engine.tree.score import score_text  # torch: loaded with the first model

            return score_text(bundle, text, prompt=prompt, top_n=SCORE_TOP_N)

        if w.runner.job("score", work, self._scored):
            w.say("Scoring the text…")

    def _scored(self, score: TextScore) -> None:
        w = self.w
        self.score, self.steps = score, score_steps(score)
        name = getattr(w.bundle, "name", "")
        context = " ".join(self.prompt.split())
        after = f"after “{context if len(context) <= 80 else '…' + context[-79:]}”"
        what = f"{f'by {name} · ' if name else ''}{after if context else 'no context'}"
        self.view.show_score(score, self.steps, what)
        # bfloat16 / int8 / int4: why these numbers can differ from the run that wrote the text
        note = score_precision_note(w.bundle)
        self.view.title.setToolTip(note)
        if note:
            self.view.title.setText(self.view.title.text() + " · <i>rounded: hover</i>")
        self.open_view()
        peak = score.peak()  # the most surprising token; a no-context first one left out
        if peak is not None:
            self.select(peak)
        w.say(
            f"Scored {count(len(score.tokens), 'token')}: perplexity {score.perplexity:.2f}. "
            "Click a token for the model's list there."
        )

    # -- showing ------------------------------------------------------------------------------

    def open_view(self) -> None:
        """The view in the output's place, with most of the column: the prompt box shrinks
        (its sizes come back with the output)."""
        split = self.view.parentWidget()
        if not self.view.isVisible():
            self._sizes = split.sizes()
        self.w.output.hide()
        self.view.show()
        total = sum(split.sizes())
        split.setSizes([total // 6, 0, total - total // 6])
        self.apply_look()

    @Slot()
    def close(self) -> None:
        """Back to the run: the output again, and the run's own step in the distribution."""
        if not self.view.isVisible():
            return
        self.view.hide()
        self.w.output.show()
        if self._sizes:
            self.view.parentWidget().setSizes(self._sizes)
        if self._hint:
            self.w.plots.dist_box.hint.setText(self._hint)
        dist = self.w.plots.dist_box.plot
        if dist.step is not None and dist.step.source == SCORED:
            dist.set_step(None)  # the run's views draw their step at the next change
            if self.w.store.steps:
                dist.set_step(self.w.store.steps[-1])

    @Slot(int)
    def select(self, index: int) -> None:
        """Show scored token ``index`` in the text, the surprisal plot and the Distribution tab."""
        if not 0 <= index < len(self.steps) or self.score is None:
            return
        self.selected = index
        self.view.select(index)
        self.w.plots.dist_box.plot.set_step(self.steps[index])
        box = self.w.plots.dist_box
        alone = self.score.no_context and index == 0
        box.info.setText(describe_token(self.score.tokens[index], self.w.looks.presenting, alone))
        if box.hint.text() != BRANCH_HINT:
            self._hint = box.hint.text()
            box.hint.setText(BRANCH_HINT)
        if not self.w.inside_shown():  # the Inside tab follows the click
            self.w.plots.tabs.setCurrentWidget(self.w.plots.dist_box)

    def set_text_size(self, _points: int, _presenting: bool) -> None:  # the display clock
        self.apply_look()

    def set_theme(self, _theme: Any) -> None:
        self.apply_look()

    def apply_look(self) -> None:
        """The window's theme and text size."""
        pt = self.w.looks.text_points()
        self.view.set_theme(self.w.looks.theme)
        self.view.set_compact(self.w.looks.presenting)
        self.view.set_font_size(pt)
        # the presentation switch redraws the run's step into the plot after this: ours again
        QTimer.singleShot(0, self._reselect)

    def _reselect(self) -> None:
        if self.view.isVisible() and self.selected is not None:
            self.select(self.selected)

    @Slot(bool)
    def _on_busy(self, busy: bool) -> None:
        quiet = ("score", *INSIDE_JOBS)  # jobs that read the text, not write a run
        if busy and self.w.runner.job_name not in quiet:  # a run: its output must show
            self.close()
        elif not busy:  # the window has just redrawn the run's step into the plot: ours again
            self._reselect()

    # -- branch here --------------------------------------------------------------------------

    @Slot(int, int)
    def shows_scored_token(self) -> bool:
        """A bar click means "take this token in the run", except while the plot shows a
        scored token: then it means "branch here" (see the module's docstring)."""
        step = self.w.plots.dist_box.plot.step
        return step is not None and step.source == SCORED

    def branch_here(self, index: int, token_id: int) -> None:
        """Prompt = context + the text before scored token ``index``; take ``token_id`` there
        and let the run continue (see the module's docstring)."""
        w, score = self.w, self.score
        if score is None or w.runner.busy or w.bundle is None:
            return
        position = score.tokens[index].index  # its place among the text's tokens
        if w.bundle.is_encoder_decoder and position > 0:
            w.show_error("On an encoder-decoder model only the first token can be branched: "
                         "the window cannot start the decoder from a given text yet.")  # fmt: skip
            return
        text, context = self.text, self.prompt
        self.close()

        # on the job's thread: a served model's tokenizer may be remote
        def before(_job: Any, bundle: Any) -> str:
            if bundle.is_encoder_decoder:
                return ""
            from engine.tree.scored import context_and_text  # the ids as they were scored

            _head, ids = context_and_text(bundle.tokenizer, text, context)
            return bundle.tokenizer.decode(ids[:position])

        def then(prefix: str) -> None:
            w.after_idle(lambda: self._branch(prefix, token_id))

        if w.runner.job("branch here", before, then):
            w.say(f"Branching at token {position + 1} of the scored text…")

    def _branch(self, before: str, token_id: int) -> None:
        """The prompt is the context plus ``before``; one Step, then ``token_id`` replaces it."""
        w = self.w
        w.clear_output()
        w.prompt_box.chat_template.setChecked(False)
        w.prompt_box.editor.setPlainText(self.prompt + before)
        w.step_once()
        w.after_idle(lambda: w.choose_token(0, token_id) if w.store.steps else None)
