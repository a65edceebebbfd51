"""The run tree in the window: going to a node, the keys that move along the tree, taking an
alternative on any path (a restored one too), expanding by probability as a job, next and
previous fork, and tree files. The composition root makes one ``TreeActions(TreeNeeds(...))``;
it is never given the window."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from PySide6.QtCore import QObject, QSettings, Slot
from PySide6.QtWidgets import QFileDialog, QInputDialog

from engine.records import SAMPLING, ChoiceHistory
from engine.tree import RunTree, TreeFormatError
from engine.tree.options import ExpandOptions
from engine.words import count
from gui.common.actions import ActionSpec
from gui.core.session import Session
from gui.core.tree_track import path_copy
from gui.tree.menu import tree_specs
from gui.tree.rows import path_percent
from gui.tree.trees import TreeList

FORK_BELOW, FORK_BITS = 0.5, 3.0  # a fork: the chosen token below 50 %, or above 3 bits
TREE_FILTER = "Decoding Lab tree (*.json)"


@dataclass
class TreeNeeds(Session):
    """What the run tree is given: its tab and the panels a node's path is shown in, the
    settings (fork thresholds), and the window's calls it moves the run with."""

    plots: Any  # gui.shell.areas.PlotArea: the Tree tab
    pane: Any  # the output's TokenPane
    views: Any  # gui.run.view.RunView
    prompt_box: Any  # gui.shell.areas.PromptBox
    sampler: Any  # gui.controls.sampler_panel.SamplerPanel
    settings_store: QSettings
    request: Callable[..., Any]  # the panels' RunRequest (gui.run.actions.RunActions.request)
    select_step: Callable[[int], None]
    refresh: Callable[[], None]  # records on their way drawn first
    update_actions: Callable[[], None]


class TreeActions(QObject):
    def __init__(self, w: TreeNeeds) -> None:
        super().__init__(w.parent)
        self.w, self.store, self.runner = w, w.store, w.runner
        self.view = w.plots.tree_view
        self.options = ExpandOptions()
        s = w.settings_store
        self.fork_below = _number(s.value("tree/fork_below"), FORK_BELOW, 0.0, 1.0)
        self.fork_bits = _number(s.value("tree/fork_bits"), FORK_BITS, 0.0, 64.0)
        self._trail = 0  # the deepest node the keys came up from: Right goes back down to it
        # nodes stood on before each move (undo goes back), and those undone (redo); per tree
        self._back: list[int] = []
        self._forward: list[int] = []
        self._history_of: Any = None
        self._frame = 0
        self.view.node_clicked.connect(self.goto)
        self.view.expand_requested.connect(self.ask_expand)
        self.view.fork_requested.connect(self.fork)
        self.runner.job_done.connect(self._job_done)
        self.trees = TreeList(w, self.open_tree)  # Tree > Trees…, Undo after Clear

    def action_specs(self) -> list[ActionSpec]:
        """The Tree menu, Open / Save tree in File too, and Edit's Undo / Redo choice."""
        return tree_specs(self)

    # -- drawing -------------------------------------------------------------------------------

    def tick(self, _busy: bool) -> None:  # the display clock
        self.redraw()
        self.trees.report()

    @Slot()
    def redraw(self, force: bool = False) -> None:
        """On the window's redraw timer: the tab, when it is shown, follows the store (at 3 Hz
        while a job runs: a growing tree is laid out again each time)."""
        self._frame += 1
        if force or (self.view.isVisible() and (not self.runner.busy or self._frame % 10 == 0)):
            self.view.show_tree(self.store.tree)

    # -- going to a node -----------------------------------------------------------------------

    @Slot(int)
    def goto(self, nid: int, remember: bool = True) -> None:
        """Show the path to ``nid``; the engine follows at the next run action. The node left
        is remembered for Undo (unless ``remember`` is off: undo and redo themselves)."""
        if self.runner.busy:
            self.runner.stop()
            self.w.after_idle(lambda: self.goto(nid, remember))
            return
        w, store = self.w, self.store
        w.refresh()  # records still on their way come first
        if store.tree is None or nid not in store.tree.nodes:
            return
        if self._history_of is not store.tree:
            self._back, self._forward, self._history_of = [], [], store.tree
        if remember and nid != store.tree.cursor:
            self._back.append(store.tree.cursor)
            self._forward.clear()
        change = store.goto(nid)
        store.choices = change.choices = ChoiceHistory(bool(self._back), bool(self._forward))
        if not store.steps:  # at the prompt: the next Step starts a run there
            self.runner.forget_run()
        w.views.apply(change, busy=False)
        w.update_actions()
        self.redraw(force=True)
        w.say(f"At node {nid}: {count(len(store.steps), 'token')}. Continue, Step or "
              "click a bar to go on from here.")  # fmt: skip

    @Slot(str)
    def move(self, kind: str) -> None:
        """parent, child (back towards where the keys came from), next or previous sibling."""
        tree = self.store.tree
        if tree is None:
            return
        here = tree.nodes[tree.cursor]
        target = here.id
        if kind == "parent" and here.parent is not None:
            if self._trail not in tree.nodes or here.id not in tree.path(self._trail):
                self._trail = here.id
            target = here.parent
        elif kind == "child" and here.children:
            trail = tree.path(self._trail) if self._trail in tree.nodes else []
            target = next((n for n in trail if tree.nodes[n].parent == here.id), here.children[0])
        elif kind in ("next", "previous") and here.parent is not None:
            kids = tree.nodes[here.parent].children
            i = kids.index(here.id) + (1 if kind == "next" else -1)
            target = kids[i] if 0 <= i < len(kids) else here.id
            self._trail = target
        if target != here.id:
            self.goto(target)

    def undo(self) -> None:
        """Take back the last choice (the engine's own undo: the exact records it replaced),
        or, on a path the engine does not hold, go back to the node stood on before."""
        if not self.runner.busy and self.trees.undo_clear():
            return
        can = not self.store.restored and self.store.choices.can_undo
        self._undo_or_redo(self._back, self._forward, self.runner.undo if can else None)

    def redo(self) -> None:
        can = not self.store.restored and self.store.choices.can_redo
        self._undo_or_redo(self._forward, self._back, self.runner.redo if can else None)

    def _undo_or_redo(self, source: list[int], target: list[int], engine: Any) -> None:
        store = self.store
        if self.runner.busy:
            return
        if engine is not None:
            engine()
        elif source and self._history_of is store.tree and store.tree is not None:
            target.append(store.tree.cursor)
            self.goto(source.pop(), remember=False)

    # -- taking an alternative -----------------------------------------------------------------

    def choose_token(self, step_index: int, token_id: int) -> None:
        """Take ``token_id`` at ``step_index`` and go on for the whole token budget from there
        (a new branch of the tree). Steps the engine does not hold (a restored run, a node gone
        to) are handed to it first: its session follows them, then branches."""
        w, store = self.w, self.store
        if self.runner.busy:
            self.runner.stop()
            w.after_idle(lambda: self.choose_token(step_index, token_id))
            return
        settings = w.sampler.settings()
        limit = settings.max_new_tokens  # counted from the branch point
        if store.restored and store.run is not None:
            ok = self.runner.resume_branch(self._request(), store.steps, step_index, token_id,
                                           limit)  # fmt: skip
        else:
            ok = self.runner.branch(step_index, token_id, settings, limit)
        if ok:
            w.say(f"Chose another token at step {step_index + 1}; continuing…")

    def _request(self) -> Any:
        run = self.store.run
        return replace(self.w.request(new_seed=False), prompt=run.prompt,
                       chat_template=run.chat_template, method=SAMPLING)  # fmt: skip

    @Slot(str)
    def _job_done(self, name: str) -> None:
        if name == "branch":
            self.store.restored = False  # the engine holds this path now

    # -- expanding -----------------------------------------------------------------------------

    @Slot()
    def ask_expand(self) -> None:
        from gui.tree.expand_dialog import ExpandDialog

        dialog = ExpandDialog(self.w.parent, self.options, self.describe_start())
        if dialog.exec() == ExpandDialog.DialogCode.Accepted:
            self.options = dialog.options()
            self.expand(self.options)

    def describe_start(self) -> str:
        """The node an expansion grows from, in words: the prompt, or the path's last words."""
        tree = self.store.tree
        if tree is None or tree.cursor == 0:
            return "the prompt (the first tokens after it)"
        node = tree.nodes[tree.cursor]
        words = " ".join(tree.path_text().split())
        tail = words if len(words) <= 60 else "…" + words[-59:]
        return (f"node {node.id}, after “{tail}” ({count(node.depth, 'token')}, path "
                f"{path_percent(node.path_logprob)})")  # fmt: skip

    def expand(self, opts: ExpandOptions) -> bool:
        """Grow the tree from the node you stand on, as a job (progress and Stop as a run's).
        The job expands a copy of the path on its thread; the result is grafted on here."""
        w, store = self.w, self.store
        if self.runner.busy:
            return False
        w.refresh()
        if store.tree is None:  # no run yet: expand the prompt in the editor
            prompt = w.prompt_box.editor.toPlainText()
            if not prompt.strip():
                w.show_error("The prompt is empty: type something to expand.")
                return False
            w.views.apply(store.adopt_tree(RunTree([], prompt), w.prompt_box.use_chat()), False)
        tree, at = store.tree, store.tree.cursor
        prompt, chat = tree.nodes[0].text, store.track.key[1]
        copy, tail = path_copy(tree, at, [])
        settings = w.sampler.settings()

        def work(job: Any, bundle: Any) -> Any:
            from engine.tree.expand import expand

            copy.prompt_ids = bundle.encode_prompt(prompt, chat)
            if tree.prompt_ids and copy.prompt_ids != list(tree.prompt_ids):
                raise ValueError(
                    "This tree was grown from other prompt ids (another model or chat-template "
                    "choice): expanding it here would grow children in another context."
                )

            def progress(done: int, total: int) -> None:
                job.say(f"Expanding: level {done} of {total}")
                job.fraction.emit(done / total)

            stats = expand(bundle, copy, tail, opts, settings, progress,
                           job.controls.cancelled.is_set)  # fmt: skip
            return copy, stats

        def done(result: Any) -> None:
            grown, stats = result
            if not tree.prompt_ids:
                tree.prompt_ids = list(grown.prompt_ids)
            added = store.track.graft(at, grown, tail)
            store.version += 1  # the autosave writes the grown tree
            self.redraw(force=True)
            stopped = " (stopped)" if stats.stopped else ""
            budget = f"; stopped at the node budget of {stats.budget:,}" if stats.limited else ""
            passes = count(stats.forwards, "forward pass", "forward passes")
            w.say(f"Expanded{stopped}: {count(added, 'node')} added in {passes}{budget}.")

        w.plots.tabs.setCurrentWidget(self.view)
        return self.runner.job("expand", work, done)

    # -- forks -------------------------------------------------------------------------------

    def fork(self, forward: bool) -> None:
        """Select the next (previous) step of the path shown where the chosen token had less
        than ``fork_below`` or the entropy passed ``fork_bits``: its distribution shows."""
        w, store, tree = self.w, self.store, self.store.tree
        if tree is None or not store.steps:
            return
        path = store.track.path
        sel = w.views.selected
        start = path[sel] if sel is not None and sel < len(path) else (0 if forward else path[-1])
        found = tree.find_fork(start, path[-1], forward, self.fork_below, self.fork_bits)
        rule = f"below {self.fork_below:.0%} or above {self.fork_bits:g} bits"
        if found is None:
            w.say(f"No {'next' if forward else 'previous'} fork ({rule}).")
            return
        node = tree.nodes[found]
        w.select_step(node.depth - 1)
        w.pane.show_step(node.depth - 1)  # the token in view, the class sees where it is
        w.say(
            f"Fork at step {node.depth}: {node.text!r} {node.raw_prob:.0%}, entropy "
            f"{node.entropy_raw:.2f} bits ({rule}). Click a bar to branch here."
        )

    @Slot()
    def ask_thresholds(self) -> None:
        below, ok = QInputDialog.getDouble(
            self.w.parent, "Fork thresholds", "A fork: the chosen token's probability below (%)",
            self.fork_below * 100, 0.0, 100.0, 1,
        )  # fmt: skip
        if not ok:
            return
        bits, ok = QInputDialog.getDouble(
            self.w.parent, "Fork thresholds", "…or the entropy above (bits)", self.fork_bits,
            0.0, 64.0, 2,
        )  # fmt: skip
        if ok:
            self.set_thresholds(below / 100, bits)

    def set_thresholds(self, below: float, bits: float) -> None:
        self.fork_below, self.fork_bits = below, bits
        self.w.settings_store.setValue("tree/fork_below", below)
        self.w.settings_store.setValue("tree/fork_bits", bits)

    # -- files -------------------------------------------------------------------------------

    def open_tree(self, tree: RunTree, chat: bool | None = None) -> None:
        """Show ``tree`` (a file, a lesson's prepared tree, one of the session's): its path to
        the cursor in the output and plots, the Tree tab in front; the prompt and the
        chat-template tick become its own. A run on it rebuilds the engine's session."""
        w = self.w
        if self.runner.busy:
            self.runner.stop()
            w.after_idle(lambda: self.open_tree(tree, chat))
            return
        w.refresh()
        self.runner.forget_run()
        if chat is None:
            chat = tree.uses_chat_template()  # the file says how its prompt was read
        w.views.apply(self.store.adopt_tree(tree, chat), busy=False)
        w.prompt_box.choose_chat(chat)
        if tree.nodes[0].text:
            w.prompt_box.editor.setPlainText(tree.nodes[0].text)
        w.plots.tabs.setCurrentWidget(self.view)
        w.update_actions()
        self.redraw(force=True)
        w.say(f"Opened a tree of {count(len(tree.nodes) - 1, 'node')}.")

    def open_tree_file(self, path: str | None = None) -> bool:
        from engine.validate import InputError
        from engine.validate.core import collector_paused
        from engine.validate.jsonio import read_json
        from engine.validate.limits import MAX_RUN_FILE_BYTES

        if path is None:
            path, _ = QFileDialog.getOpenFileName(self.w.parent, "Open tree", "", TREE_FILTER)
            if not path:
                return False
        try:  # the file is only read: one that fails is left as it is
            with collector_paused():
                tree = RunTree.from_json(read_json(path, MAX_RUN_FILE_BYTES), self._vocab())
        except (InputError, TreeFormatError, OSError) as exc:
            self.w.show_error(f"Could not open the tree {path}:\n{exc}")
            return False
        self.open_tree(tree)
        return True

    def _vocab(self) -> int | None:
        """The loaded model's vocabulary size (a tree's token ids must be below it)."""
        model = getattr(self.w.bundle, "model", None)
        if model is None:
            return None
        from engine.models.device import vocab_size

        return vocab_size(model)

    def save_tree(self, path: str | None = None) -> bool:
        from engine.classroom.export import write_atomic

        tree = self.store.tree
        if tree is None:
            self.w.show_error("There is no tree yet: generate or expand first.")
            return False
        if path is None:
            path, _ = QFileDialog.getSaveFileName(
                self.w.parent, "Save tree", "tree.json", TREE_FILTER
            )
            if not path:
                return False
        data = tree.to_json()
        chat = bool(self.store.track.key[1]) if self.store.track.key else tree.uses_chat_template()
        data["chat_template"] = chat
        data["settings"] = {**data["settings"], "chat_template": chat}  # older readers look here
        if self.w.bundle is not None:
            data["model"] = data.get("model") or self.w.bundle.source_key[:2000]
        try:
            write_atomic(path, json.dumps(data, ensure_ascii=False))
        except (OSError, ValueError) as exc:
            self.w.show_error(f"Could not save the tree to {path}:\n{exc}")
            return False
        self.w.say(f"Saved the tree ({count(len(tree.nodes) - 1, 'node')}) to {path}")
        return True


def _number(value: Any, default: float, least: float, most: float) -> float:
    """A number from the settings file (hostile: anything may be there)."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        return default
    return x if least <= x <= most else default
