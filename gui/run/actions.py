"""The run's buttons in the window: Generate, Step, Continue (a run restored from the autosave
is rebuilt by the engine first), Stop, Compare methods and Clear, each one runner call built
from the panels' request. ``RunActions`` never imports the window: ``RunHost`` is what it uses
there (undo, redo and a chosen token are the run tree's: gui.tree.actions)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Protocol

from PySide6.QtWidgets import QLabel, QPlainTextEdit

from engine.drivers.workbench import RunRequest
from engine.records import BEAMS, CONTRASTIVE, SAMPLING

if TYPE_CHECKING:
    from engine.models.loading import ModelBundle
    from gui.classroom.actions import Classroom
    from gui.controls.method_panel import MethodPanel
    from gui.controls.sampler_panel import SamplerPanel
    from gui.core.store import RunStore
    from gui.core.worker import EngineRunner
    from gui.run.view import RunView
    from gui.shell.areas import PlotArea, PromptBox

TREE_METHODS = (*BEAMS, CONTRASTIVE)  # methods that draw a tree (BeamEvent records)


class RunHost(Protocol):
    """The window as the run's buttons see it."""

    runner: EngineRunner
    store: RunStore
    views: RunView
    bundle: ModelBundle | None
    prompt: QPlainTextEdit
    prompt_box: PromptBox
    sampler: SamplerPanel
    method: MethodPanel
    plots: PlotArea
    classroom: Classroom  # a lesson stage's settings the panels cannot show
    status_text: QLabel

    def show_error(self, message: str) -> None: ...
    def _update_buttons(self) -> None: ...


class RunActions:
    def __init__(self, host: RunHost) -> None:
        self.host = host

    def request(self, new_seed: bool = True, limit: int | None = None) -> RunRequest:
        """What the panels say now: the prompt, the method and its options, the settings."""
        h = self.host
        settings = h.sampler.next_run_settings() if new_seed else h.sampler.settings()
        settings = h.classroom.settings(settings)
        return RunRequest(
            prompt=h.prompt.toPlainText(), method=h.method.current(), settings=settings,
            chat_template=h.prompt_box.use_chat(), limit=limit, **h.method.request_options(),
        )  # fmt: skip

    def generate(self) -> None:
        h = self.host
        if h.runner.busy:
            return
        request = self.request()
        if not request.prompt.strip():
            h.show_error("The prompt is empty: type something for the model to continue.")
            return
        if h.runner.generate(request):
            h.store.clear()  # the old run leaves the screen now, not when the new one starts
            h.views.clear()
            if request.method in TREE_METHODS:
                h.plots.tabs.setCurrentWidget(h.plots.beam_panel)
            h.status_text.setText("Generating…")

    def step_once(self) -> None:
        h = self.host
        if h.runner.busy:
            return
        if h.store.can_resume():
            self._resume(1)
        else:
            h.runner.step(self.request(new_seed=not h.store.steps))

    def continue_run(self) -> None:
        h = self.host
        if h.runner.busy:
            return
        if h.store.can_resume():
            self._resume(None)
        else:
            h.runner.continue_(h.sampler.settings())

    def _resume(self, limit: int | None) -> None:
        """Continue or Step on a run restored from the autosave: the engine rebuilds it from
        the saved prompt and tokens (one prefill), then goes on."""
        h = self.host
        run = h.store.run
        if h.bundle is None or run is None:
            h.show_error("Load a model first: the restored run needs one to go on.")
            return
        request = replace(
            self.request(new_seed=False), prompt=run.prompt, chat_template=run.chat_template,
            method=SAMPLING,
        )  # fmt: skip
        if h.runner.resume(request, h.store.steps, limit):
            h.status_text.setText(
                f"Rebuilding the restored run ({len(h.store.steps)} tokens), then going on…"
            )

    def stop(self) -> None:
        if self.host.runner.busy:
            self.host.runner.stop()
            self.host.status_text.setText("Stopping…")

    def run_comparison(self) -> None:
        h = self.host
        if h.runner.busy:
            return
        h.plots.compare_view.clear_results()
        h.store.results.clear()
        if h.runner.compare(self.request()):
            h.plots.tabs.setCurrentWidget(h.plots.compare_view)
            h.status_text.setText("Comparing methods…")

    def clear_output(self) -> None:
        h = self.host
        if h.runner.busy:
            return
        h.runner.forget_run()
        h.store.clear(tree=True)  # the tree goes on the shelf of the session's trees
        h.views.clear()
        h._update_buttons()
        if h.store.track.cleared is not None:
            h.status_text.setText("Cleared. The tree is kept (Tree > Trees…); Undo brings it "
                                  "back.")  # fmt: skip
