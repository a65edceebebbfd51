"""The run's buttons in the window: Generate, Step, Continue (a run restored from the autosave
is rebuilt by the engine first), Stop, Compare methods and Clear, each one runner call built
from the panels' request. ``RunActions`` never imports the window: ``RunNeeds`` is what it is given
there (undo, redo and a chosen token are the run tree's: gui.tree.actions)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from engine.drivers.workbench import RunRequest
from engine.records import BEAMS, CONTRASTIVE, SAMPLING
from engine.words import count
from gui.common.actions import ActionSpec, Place
from gui.core.session import Session

if TYPE_CHECKING:
    from engine.sampling.settings import SamplerSettings
    from gui.controls.method_panel import MethodPanel
    from gui.controls.sampler_panel import SamplerPanel
    from gui.run.view import RunView

TREE_METHODS = (*BEAMS, CONTRASTIVE)  # methods that draw a tree (BeamEvent records)


@dataclass
class RunNeeds(Session):
    """What the run's buttons are given: the panels a request is read from, the views a new
    run clears, and two callbacks."""

    prompt_box: Any  # gui.shell.areas.PromptBox
    sampler: SamplerPanel
    method: MethodPanel
    plots: Any  # gui.shell.areas.PlotArea
    views: RunView
    lesson_settings: Callable[[SamplerSettings], SamplerSettings]  # a stage's hidden settings
    update_actions: Callable[[], None]


class RunActions:
    def __init__(self, host: RunNeeds) -> None:
        self.host = host

    def action_specs(self) -> list[ActionSpec]:
        """The run's buttons: on the main toolbar, Clear in the Edit menu too."""
        h = self.host
        idle = lambda: not h.runner.busy  # noqa: E731
        ready = lambda: idle() and h.bundle is not None  # noqa: E731

        def can_go_on() -> bool:
            store = h.store
            return store.can_resume() or (
                store.can_continue() and store.method not in BEAMS and not store.restored
            )

        def button(aid: str, text: str, slot: Any, keys: str, tip: str, order: int,
                   enabled: Any) -> ActionSpec:  # fmt: skip
            return ActionSpec(aid, text, slot, (Place("toolbar.main", "run", order),), keys,
                              tip, keys_in_tip=True, enabled_when=enabled)  # fmt: skip

        return [
            button("generate", "Generate", self.generate, "Ctrl+Return",
                   "Start a new run from the prompt", 0, ready),
            button("stop", "Stop", self.stop, "Esc", "Stop after the current token", 1,
                   lambda: h.runner.busy),
            button("step", "Step", self.step_once, "Ctrl+Right",
                   "Generate exactly one more token", 2, ready),
            button("continue_", "Continue", self.continue_run, "Ctrl+Shift+Return",
                   "Carry on from where the run stopped", 3, lambda: idle() and can_go_on()),
            ActionSpec("clear", "Clear", self.clear_output,
                       (Place("edit", "choice", 2), Place("toolbar.main", "run", 5)), "Ctrl+L",
                       "Clear the output and the plots", keys_in_tip=True, enabled_when=idle),
        ]  # fmt: skip

    def request(self, new_seed: bool = True, limit: int | None = None) -> RunRequest:
        """What the panels say now: the prompt, the method and its options, the settings."""
        h = self.host
        settings = h.sampler.next_run_settings() if new_seed else h.sampler.settings()
        settings = h.lesson_settings(settings)
        return RunRequest(
            prompt=h.prompt_box.editor.toPlainText(), method=h.method.current(), settings=settings,
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
            h.say("Generating…")

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
            n = count(len(h.store.steps), "token")
            h.say(f"Rebuilding the restored run ({n}), then going on…")

    def stop(self) -> None:
        if self.host.runner.busy:
            self.host.runner.stop()
            self.host.say("Stopping…")

    def run_comparison(self) -> None:
        h = self.host
        if h.runner.busy:
            return
        h.plots.compare_view.clear_results()
        h.store.results.clear()
        if h.runner.compare(self.request()):
            h.plots.tabs.setCurrentWidget(h.plots.compare_view)
            h.say("Comparing methods…")

    def clear_output(self) -> None:
        h = self.host
        if h.runner.busy:
            return
        h.runner.forget_run()
        h.store.clear(tree=True)  # the tree goes on the shelf of the session's trees
        h.views.clear()
        h.update_actions()
        if h.store.track.cleared is not None:
            h.say("Cleared. The tree is kept (Tree > Trees…); Undo brings it "
                                  "back.")  # fmt: skip
