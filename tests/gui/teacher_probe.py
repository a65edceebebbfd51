"""The teacher's ten-minute demo (issue 34) in the real window, under a real X display with a
window manager (run by tests/gui/test_teacher_replay.py under Xvfb + openbox at 1280x720):
SmolLM2, the prompt "Once upon a time, a dragon", a 30-token run at temperature 1, a branch by
clicking a bar, Tree > Expand 3 deep x 3 children, File > Score a text, an Experiments sweep,
F5, quit and restart. Driven through the window's own widgets and menus (the bar, the token
and the wheel as real X events through xdotool); prints what the test checks as one JSON line.

Usage: teacher_probe.py STATE_DIR first|second [SHOT_DIR]. The state folder holds the settings
and the autosave, so the second phase is a restart of the first."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fit_probe import wait  # the window-fit probe's: run the events until a condition
from PySide6.QtCore import QPoint, QPointF, QSettings, QTimer
from PySide6.QtWidgets import QApplication, QDialog, QWidget

from gui.common.step_text import pct
from gui.shell.window import MainWindow

MODEL = "smollm2-135m"
PROMPT = "Once upon a time, a dragon"
TEXT = "The teacher opened the old book and smiled at the class."
CONTEXT = "Here is a short story."
OUT: dict[str, Any] = {}


def settle(app: QApplication, seconds: float = 0.6) -> None:
    wait(app, lambda: False, seconds)


class Teacher:
    def __init__(self, state: Path, shots: Path | None) -> None:
        self.app = QApplication.instance() or QApplication(sys.argv[:1])
        self.shots = shots
        ini = QSettings(str(state / "settings.ini"), QSettings.Format.IniFormat)
        self.w = MainWindow(settings_store=ini, autoload=False, autosave_path=state / "auto.json")
        self.w.showMaximized()
        self.w.load_model(MODEL)
        assert self.wait_idle(300) and self.w.bundle is not None, "the model did not load"
        settle(self.app)

    # -- doing things as the teacher does -------------------------------------------------------

    def wait_idle(self, seconds: float = 300) -> bool:
        return wait(self.app, lambda: not self.w.runner.busy, seconds)

    def job(self, start: Callable[[], Any], name: str, seconds: float = 600) -> None:
        done: list[str] = []
        self.w.runner.job_done.connect(done.append)
        start()
        ok = wait(self.app, lambda: name in done and not self.w.runner.busy, seconds)
        self.w.runner.job_done.disconnect(done.append)
        assert ok, f"the {name} job did not finish ({self.w.last_error})"
        self.w.drain()
        settle(self.app, 0.4)

    def in_dialog(self, fill: Callable[[QDialog], Any], accept: bool = True) -> None:
        """Fill the modal dialog the next action opens, then press its OK (or Close)."""

        def poll() -> None:
            dialog = QApplication.activeModalWidget()
            if not isinstance(dialog, QDialog):
                QTimer.singleShot(50, poll)
                return
            settle(self.app, 0.3)
            fill(dialog)
            dialog.accept() if accept else dialog.reject()

        QTimer.singleShot(50, poll)

    def xdo(self, *args: str) -> None:
        subprocess.run(["xdotool", *args], check=True, timeout=30)
        settle(self.app, 0.3)

    def click(self, widget: QWidget, at: QPoint | None = None) -> None:
        """A real mouse click (xdotool) at ``at`` in ``widget`` (its middle by default)."""
        p = widget.mapToGlobal(at if at is not None else widget.rect().center())
        self.xdo("mousemove", "--sync", str(p.x()), str(p.y()), "click", "1")

    def wheel(self, widget: QWidget, notches: int = 3) -> None:
        """Real wheel turns (button 5: towards the user) over ``widget``."""
        p = widget.mapToGlobal(widget.rect().center())
        self.xdo("mousemove", "--sync", str(p.x()), str(p.y()))
        self.xdo("click", "--repeat", str(notches), "--delay", "80", "5")

    def shoot(self, name: str) -> None:
        if self.shots is None:
            return
        settle(self.app, 0.8)
        path = self.shots / f"{name}.png"
        subprocess.run(["import", "-window", "root", str(path)], check=False, timeout=30)
        OUT.setdefault("shots", []).append(str(path))

    def generate(self) -> None:
        done: list[Any] = []
        self.w.run_finished.connect(done.append)
        self.w.acts.generate.trigger()
        assert wait(self.app, lambda: bool(done) and not self.w.runner.busy, 600), "no run"
        self.w.run_finished.disconnect(done.append)
        self.w.drain()
        settle(self.app, 0.4)


def bar_point(w: MainWindow, rank: int) -> QPoint:
    """Where the bar of the ``rank``-th candidate (0: the most likely) is drawn."""
    plot = w.dist
    y, cand, _rank = plot.rows[rank]
    vb = plot.getPlotItem().getViewBox()
    x = max(cand.raw_prob, cand.prob) / 2
    return plot.mapFromScene(vb.mapViewToScene(QPointF(x, y)))


def token_point(w: MainWindow, index: int) -> QPoint:
    from PySide6.QtGui import QTextCursor

    pane = w.pane
    a, _b = pane._spans[index]
    cursor = QTextCursor(pane.document())
    cursor.setPosition(a)
    pane.setTextCursor(cursor)
    pane.ensureCursorVisible()
    rect = pane.cursorRect(cursor)
    return pane.viewport().mapTo(pane, rect.center() + QPoint(4, 0))


def tree_shape(tree: Any) -> list[list[int]]:
    return sorted(tree.path_ids(n) for n in tree.nodes if n)


def first(t: Teacher) -> None:
    w, app = t.w, t.app
    box = w.prompt_box.chat_template
    OUT["ticked_on_load"] = box.isChecked()
    if box.isChecked():
        t.click(box)  # a story goes on from the prompt: no chat template
    w.prompt.setPlainText(PROMPT)
    w.sampler.random_seed.setChecked(False)
    w.sampler.rows["temperature"].set_value(1.0)
    w.sampler.max_new.setValue(30)
    w.sampler.seed.setValue(11)
    t.generate()  # 1. a 30-token run at temperature 1
    OUT["run_tokens"] = len(w.store.steps)
    t.click(w.pane, token_point(w, 8))  # 2. a token, then another bar at that step
    assert wait(app, lambda: w.views.selected == 8, 5), "the token click did not select it"
    settle(app)
    t.job(lambda: t.click(w.dist, bar_point(w, 1)), "branch")
    OUT["branched"] = len(w.store.tree.nodes) - 1
    w.tabs.setCurrentWidget(w.plots.tree_view)

    def three_by_three(d: QDialog) -> None:
        d.depth.setValue(3)
        d.children.setValue(3)
        OUT["expand_from"] = d.start.text()

    t.in_dialog(three_by_three)
    t.job(w.acts.expand.trigger, "expand")  # 3. Tree > Expand 3 deep x 3 children
    tree = w.store.tree
    OUT["nodes"] = len(tree.nodes) - 1
    t.shoot("tree-normal")
    view = w.plots.tree_view
    t.click(view.order)  # the leaves by their path's probability per token
    settle(app)
    t.xdo("key", "Down", "Return")
    t.click(view.most_likely)  # the most likely branch per token: one action
    leaf = tree.cursor
    best = max(tree.leaves(), key=lambda n: (tree.per_token(n), tree.nodes[n].path_logprob))
    item = view.outline.currentItem()
    OUT["most_likely"] = {
        "cursor": leaf, "best": best, "order": view.order.currentData(),
        "shown": [item.text(2), item.text(3)] if item else [],  # per token, the whole path
        "want": [pct(tree.per_token(best)), pct(math.exp(tree.nodes[best].path_logprob))],
    }  # fmt: skip
    t.shoot("tree-sorted-normal")
    wheel_check(t)
    score(t)
    sweep(t)
    present(t)
    OUT["shape"] = tree_shape(w.store.tree)
    OUT["cursor_path"] = w.store.tree.path_ids()


def wheel_check(t: Teacher) -> None:
    """Scrolling the sampler panel with the wheel over Order and Max new tokens."""
    w = t.w
    before = w.sampler.settings()
    bar = w.left.verticalScrollBar()
    bar.setValue(0)
    w.prompt.setFocus()
    settle(t.app)
    moved = []
    for control in (w.sampler.order, w.sampler.max_new, w.sampler.rows["top_p"].slider):
        start = bar.value()
        t.wheel(control)
        moved.append(bar.value() - start)
    OUT["wheel"] = {"same": w.sampler.settings() == before, "scrolled": moved,
                    "scrollable": bar.maximum() > 0}  # fmt: skip
    bar.setValue(0)


def score(t: Teacher) -> None:
    """File > Score a text, without and with a context."""
    w = t.w
    results = {}
    for name, context in (("no_context", ""), ("context", CONTEXT)):

        def fill(d: QDialog, c: str = context) -> None:
            d.text.setPlainText(TEXT)
            d.context.setText(c)

        t.in_dialog(fill)
        t.job(w.acts.score_text.trigger, "score")
        s = w.score.score
        pick = w.score.selected
        info = w.plots.dist_box.info.text()
        results[name] = {
            "no_context": s.no_context, "picked": pick, "peak": s.peak(),
            "text": s.tokens[pick].text, "bits": s.tokens[pick].surprisal,
            "first_bits": s.tokens[0].surprisal, "number": s.tokens[pick].index + 1,
            "marker": w.score.view.plot.marker.value(), "info": info,
            "perplexity": s.perplexity,
            "tokens": [(x.text, round(x.surprisal, 2)) for x in s.tokens],
        }  # fmt: skip
        t.shoot(f"score-{name}-normal")
    OUT["score"] = results
    OUT["after_chat_marker"] = chat_marker_perplexity(w)
    w.score.view.back.click()
    settle(t.app)


def chat_marker_perplexity(w: MainWindow) -> float:
    """The text's perplexity read after the tokenizer's BOS, <|im_start|> (the old rule)."""
    import torch

    b = w.bundle
    ids = b.tokenizer(TEXT, add_special_tokens=False)["input_ids"]
    with torch.inference_mode():
        x = torch.tensor([[b.tokenizer.bos_token_id, *ids]])
        logp = torch.log_softmax(b.model(input_ids=x).logits[0, :-1].float(), dim=-1)
    total = float(logp[torch.arange(len(ids)), torch.tensor(ids)].sum())
    return math.exp(-total / len(ids))


def sweep(t: Teacher) -> None:
    """Experiments > Sweep a setting…: temperature, as the dialog offers it."""
    w = t.w
    said: dict[str, str] = {}

    def look(d: QDialog) -> None:
        said["also_on"] = d.also_on.text()
        said["values"] = d.values.text()

    t.in_dialog(look)
    t.job(w.acts.sweep.trigger, "sweep")
    view = w.plots.experiments.sweep
    assert wait(t.app, lambda: len(view.rows) > 0, 10), "no sweep rows"
    settle(t.app)
    OUT["sweep"] = {**said, "info": view.info.text(), "rows": len(view.rows),
                    "visible_rows": visible_rows(view.table),
                    "outputs": [r.text for r in view.rows]}  # fmt: skip
    t.shoot("sweep-normal")
    w.tabs.setCurrentWidget(w.compare_view)
    OUT["compare_visible_rows"] = visible_rows(w.compare_view.table)
    t.shoot("compare-normal")


def visible_rows(table: Any) -> int:
    """Rows of a table shown whole in its viewport."""
    height = table.viewport().height()
    tops = [(table.rowViewportPosition(r), table.rowHeight(r)) for r in range(table.rowCount())]
    return sum(1 for top, tall in tops if top >= 0 and top + tall <= height)


def present(t: Teacher) -> None:
    """F5: the presentation view, with the run, the tree, the sweep and a scored text."""
    w = t.w
    w.tabs.setCurrentWidget(w.plots.dist_box)
    w.acts.presentation.trigger()
    settle(t.app, 1.5)
    tabs = w.plots.tabs
    bar = tabs.tabBar()
    line = w.findChild(QWidget, "presentation_prompt")
    OUT["presentation"] = {
        "prompt_shown": line.shown_text() if line is not None and line.isVisible() else "",
        "tabs": [bar.tabText(i) for i in range(bar.count())],
        "tabs_fit": all(bar.tabRect(i).width() >= bar.tabSizeHint(i).width()
                        for i in range(bar.count())),
    }  # fmt: skip
    t.shoot("presentation-run")
    w.tabs.setCurrentWidget(w.plots.tree_view)
    t.shoot("presentation-tree")
    w.tabs.setCurrentWidget(w.plots.experiments)
    w.plots.experiments.setCurrentWidget(w.plots.experiments.sweep)
    t.shoot("presentation-sweep")
    t.job(lambda: w.score.show(TEXT, CONTEXT), "score")
    t.shoot("presentation-score")
    w.score.view.back.click()
    w.acts.presentation.trigger()
    settle(t.app)


def second(t: Teacher, before: dict[str, Any]) -> None:
    """The restart: the tick, the tree and the node stood on as they were; a Generate goes on
    in the same tree; one with the template ticked starts another and keeps this one."""
    w = t.w
    tree = w.store.tree
    OUT["restart"] = {
        "ticked": w.prompt_box.chat_template.isChecked(),
        "same_tree": tree is not None and tree_shape(tree) == before["shape"],
        "same_node": tree is not None and tree.path_ids() == before["cursor_path"],
        "method": w.method.current(),
    }  # fmt: skip
    t.generate()
    grown = w.store.tree
    OUT["after_generate"] = {
        "same_tree": grown is tree,
        "kept_all": {tuple(p) for p in before["shape"]} <= {tuple(p) for p in tree_shape(grown)},
    }  # fmt: skip
    t.click(w.prompt_box.chat_template)  # the template ticked: another tree
    t.generate()
    kept = w.store.track.shelf.kept
    OUT["ticked_generate"] = {
        "new_tree": w.store.tree is not tree,
        "kept": [len(k.tree.nodes) - 1 for k in kept],
        "old_kept": any(k.tree is tree for k in kept),
    }  # fmt: skip

    def look(d: QDialog) -> None:
        OUT["trees_list"] = [[d.table.item(r, c).text() for c in range(d.table.columnCount())]
                             for r in range(d.table.rowCount())]  # fmt: skip
        t.shoot("trees-list-normal")

    t.in_dialog(look, accept=False)
    w.acts.trees.trigger()
    w.acts.presentation.trigger()
    settle(t.app, 1.0)
    t.in_dialog(lambda _d: t.shoot("trees-list-presentation"), accept=False)
    w.acts.trees.trigger()
    w.acts.presentation.trigger()
    settle(t.app, 1.0)
    t.click(w.prompt_box.chat_template)  # unticked again: the old tree comes back
    ticked = w.prompt_box.chat_template.isChecked()
    t.generate()
    OUT["unticked_generate"] = {"ticked": ticked, "old_back": w.store.tree is tree}


def main() -> None:
    state, phase = Path(sys.argv[1]), sys.argv[2]
    shots = Path(sys.argv[3]) if len(sys.argv) > 3 else None
    if shots is not None:
        shots.mkdir(parents=True, exist_ok=True)
    t = Teacher(state, shots)
    if phase == "first":
        first(t)
        (state / "first.json").write_text(json.dumps(OUT))
    else:
        second(t, json.loads((state / "first.json").read_text()))
    print("TEACHER " + json.dumps(OUT), flush=True)
    t.w.close()  # quit: the autosave and the settings are written
    t.w.runner.shutdown()


if __name__ == "__main__":
    main()
