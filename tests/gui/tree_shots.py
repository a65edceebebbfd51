"""Screenshots of the Tree tab in a real window (run under Xvfb + openbox, as fit_probe.py), as
a teacher grows a tree on SmolLM2 (issue 54, item 5): a 120-token story, three branches taken
at steps 6, 30 and 80, an expansion of 2 levels x 3 children at step 10; then the dividers
dragged as far as they go, and the status bar after a long message. Usage: tree_shots.py OUTDIR
[THEME] [VIEW]. Prints one line per shot and one ``TREE {json}`` line of measurements."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from experiment_shots import job
from fit_probe import open_window, wait
from PySide6.QtCore import QPoint
from PySide6.QtWidgets import QApplication, QSplitter

from engine.tree.options import ExpandOptions
from gui.shell.window import MainWindow


def shoot(app: QApplication, path: Path) -> None:
    wait(app, lambda: False, 0.8)
    subprocess.run(["import", "-window", "root", str(path)], check=False, timeout=30)
    print("SHOT", path, flush=True)


def grow(app: QApplication, w: MainWindow) -> None:
    w.prompt.setPlainText("Once upon a time, a dragon")
    w.prompt_box.chat_template.setChecked(False)
    w.sampler.random_seed.setChecked(False)
    w.sampler.set_settings(w.sampler.settings().with_(temperature=1.0, top_k=0, top_p=1.0,
                                                      max_new_tokens=120, seed=3))  # fmt: skip
    job(app, w, w.generate)
    for at, rest in ((80, 30), (30, 60), (5, 40)):
        w.sampler.set_settings(w.sampler.settings().with_(max_new_tokens=rest))
        step = w.store.steps[at]
        other = next(c.token_id for c in step.candidates if c.token_id != step.token_id)
        job(app, w, lambda at=at, other=other: w.tree.choose_token(at, other))
    tree = w.store.tree
    w.tree.goto(tree.path()[9])
    job(app, w, lambda: w.tree.expand(ExpandOptions(depth=2, max_children=3)))
    w.tabs.setCurrentWidget(w.plots.tree_view)
    w.tree.redraw(force=True)


def drag(app: QApplication, splitter: QSplitter, to: QPoint) -> None:
    """Drag the splitter's first handle with the mouse (xdotool) to ``to`` (global)."""
    handle = splitter.handle(1)
    start = handle.mapToGlobal(handle.rect().center())
    for args in (("mousemove", str(start.x()), str(start.y())), ("mousedown", "1"),
                 ("mousemove", str((start.x() + to.x()) // 2), str((start.y() + to.y()) // 2)),
                 ("mousemove", str(to.x()), str(to.y())), ("mouseup", "1")):  # fmt: skip
        subprocess.run(["xdotool", *args], check=True, timeout=30)
        wait(app, lambda: False, 0.2)


def main() -> None:
    out = Path(sys.argv[1])
    theme = sys.argv[2] if len(sys.argv) > 2 else "light"
    view = sys.argv[3] if len(sys.argv) > 3 else "normal"
    out.mkdir(parents=True, exist_ok=True)
    tag = f"{view}-{theme}"
    app, w = open_window("smollm2-135m", theme, 300)
    grow(app, w)
    w.set_presentation(view == "presentation")
    wait(app, lambda: False, 1.0)
    outline = w.plots.tree_view.outline
    shoot(app, out / f"tree-{tag}.png")
    outline.scrollToTop()
    shoot(app, out / f"tree-top-{tag}.png")
    rows, item = 0, outline.topLevelItem(0)
    while item is not None:
        rows, item = rows + 1, outline.itemBelow(item)
    last = outline.visualItemRect(outline.itemAbove(outline.itemBelow(outline.topLevelItem(0))))
    found = {
        "text_column": outline.columnWidth(0),
        "outline": [outline.width(), outline.height()],
        "rows": rows,
        "first_rows_height": last.bottom(),
        "status": w.status_text.text(),
    }
    w.tabs.setCurrentWidget(w.plots.dist_box)
    wait(app, lambda: False, 0.5)
    left = w.splitter.mapToGlobal(QPoint(0, w.splitter.height() // 2))
    drag(app, w.splitter, left)  # the output column towards nothing
    found["middle_after_drag"] = w.splitter.sizes()
    bottom = w.plots.mapToGlobal(QPoint(w.plots.width() // 2, w.plots.height() - 2))
    drag(app, w.plots, bottom)  # the curves under the tabs towards nothing
    found["plots_after_drag"] = w.plots.sizes()
    top = w.plots.mapToGlobal(QPoint(w.plots.width() // 2, 2))
    drag(app, w.plots, top)
    found["plots_after_drag_up"] = w.plots.sizes()
    middle = w.prompt_box.parentWidget()
    if isinstance(middle, QSplitter):  # the prompt over the output
        drag(app, middle, middle.mapToGlobal(QPoint(middle.width() // 2, middle.height() - 2)))
        found["prompt_output_after_drag"] = middle.sizes()
    shoot(app, out / f"dividers-dragged-{tag}.png")
    found["status_shown"] = w.status.text.shown_text() if hasattr(w.status.text, "shown_text") \
        else w.status.text.text()  # fmt: skip
    found["status_tip"] = w.status.text.toolTip()
    print("TREE " + json.dumps(found), flush=True)
    w.runner.shutdown()
    w.close()


if __name__ == "__main__":
    main()
