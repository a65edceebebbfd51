"""The live round's screen audit walker, run under a real X display (QT_QPA_PLATFORM=xcb,
DISPLAY set): the real window maximised under the window manager, a tiny model's run, a live
round open on 127.0.0.1 with students joined (tests/live_clients.py, nicknames long and
hostile among them), then its screens in the normal and the presentation view: the round
open, a vote asked and answered, revealed (the class's bars beside the model's, the round's
totals), the leaderboard shown, be the sampler revealed and the class's text scored (and,
first, the same window before the round in both views, to tell the round's findings). Each
screen is checked with the screen audit's checks (audit_probe.check: fit, small plots, text cut
without its whole on hover, widgets off the window, exceptions while hovering and clicking the
plots) plus one of its own: the live panel needs no sideways scrolling. One JSON line per
screen ("AUDIT {...}"), one for the theme's controls ("CONTROLS {...}").
Usage: live_audit_probe.py MODEL_DIR THEME GALLERY_FOLDER."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import audit_probe
from audit_probe import POKED, check, controls
from fit_probe import open_window, run_story, wait
from live_clients import Students
from PySide6.QtWidgets import QScrollArea

from engine.classroom.live import SAMPLER, VOTE

NICKS = ["Ada", "<b>Grace</b>", "Alan", "Katherine J.", "x" * 24, "Émilie", "李", "Sam", "Sam"]


def live_check(app, w, name: str, gallery: Path, size, show=None) -> dict:
    """The audit's checks, and the live panel's width: no sideways scroll bar in its dock.
    ``show``: the panel's part the screen is about, scrolled into view first."""
    scroll = w.live.panel.findChild(QScrollArea, "live_scroll")
    if show is not None:
        wait(app, lambda: False, 0.1)
        scroll.ensureWidgetVisible(show)
    result = check(app, w, name, gallery, size)
    bar = scroll.horizontalScrollBar()
    if bar.isVisible() and bar.maximum() > 0:
        result["clipped"].append(f"the live panel scrolls sideways by {bar.maximum()} px")
        print("AUDIT " + json.dumps(result), flush=True)  # the finding added: the last line wins
    return result


def ask(app, w, mode: str) -> None:
    assert wait(app, lambda: not w.runner.busy, 60)  # a poked bar may have taken its token
    p = w.live.panel
    p.mode.setCurrentIndex(p.mode.findData(mode))
    w.live.ask()
    assert wait(app, lambda: w.live.round.question is not None and not w.runner.busy, 60)


def reveal(app, w) -> None:
    assert wait(app, lambda: not w.runner.busy, 60)
    number = w.live.round.question.number
    w.live.reveal()
    assert wait(app, lambda: len(w.live.round.reveals) == number and not w.runner.busy, 60)


def play(app, w, students: Students, view: str, gallery: Path, size) -> None:
    n = len(NICKS)
    live_check(app, w, f"{view}-live-open", gallery, size, w.live.panel.start_button)
    ask(app, w, VOTE)
    students.send([{"choice": i % 3} for i in range(n)])
    assert wait(app, lambda: w.live.round.answered() == n, 20)
    live_check(app, w, f"{view}-live-question", gallery, size, w.live.panel.close_button)
    reveal(app, w)
    live_check(app, w, f"{view}-live-reveal", gallery, size, w.live.panel.totals)
    w.live.panel.show_board.setChecked(True)
    live_check(app, w, f"{view}-live-leaderboard", gallery, size, w.live.panel.board)
    w.live.panel.show_board.setChecked(False)
    ask(app, w, SAMPLER)
    students.send([{"choice": 1}] * n)
    assert wait(app, lambda: w.live.round.answered() == n, 20)
    reveal(app, w)
    w.live.text_result = None
    assert wait(app, lambda: not w.runner.busy, 60)
    w.live.score_text()
    assert wait(app, lambda: w.live.text_result is not None and not w.runner.busy, 120)
    live_check(app, w, f"{view}-live-sampler", gallery, size, w.live.panel.text_score)


def main() -> None:
    model_dir, theme, folder = sys.argv[1:4]
    gallery = Path(folder)
    gallery.mkdir(parents=True, exist_ok=True)
    sys.excepthook = audit_probe._hook
    app, w = open_window(model_dir, theme, 120)
    size = (w.screen().size().width(), w.screen().size().height())
    run_story(app, w, 24)
    for view in ("normal", "presentation"):  # the window before the round: what is not ours
        w.set_presentation(view == "presentation")
        wait(app, lambda: False, 0.5)
        check(app, w, f"{view}-before", gallery, size)
    w.set_presentation(False)
    POKED.clear()
    w.live.panel.set_addresses(["127.0.0.1"])
    w.live.show()
    url = w.live.open_round("127.0.0.1", 0)
    assert url is not None, "the round did not open"
    students = Students(f"http://127.0.0.1:{w.live.server.port}", w.live.round.code)
    try:
        students.join(NICKS)
        assert wait(app, lambda: len(w.live.round.students) == len(NICKS), 20), "not joined"
        print("CONTROLS " + json.dumps(controls(w, theme)), flush=True)
        for view in ("normal", "presentation"):
            POKED.clear()
            w.set_presentation(view == "presentation")
            wait(app, lambda: False, 0.5)
            play(app, w, students, view, gallery, size)
        w.set_presentation(False)
    finally:
        w.live.end()
        students.close()
    w.runner.shutdown()
    w.close()


if __name__ == "__main__":
    try:
        main()
    except BaseException:  # the walk's own failure: said on stderr (the hook keeps the slots')
        import traceback

        traceback.print_exc()
        sys.exit(1)
