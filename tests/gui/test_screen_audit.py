"""The screen audit: the real window (Xvfb + openbox, as a desktop draws it) walked as a class
sees it, every tab and its pages in the normal and the presentation view, and every stage of
every bundled lesson (normal view, then the lesson in the presentation view), light and dark,
at 1280x720 and at a 1024x768 projector (tests/gui/audit_probe.py). Each screen: the window
fits the screen; no plot smaller than it reads at its text size; no label, button or menu cut
without its whole text one hover away; nothing runs off the window; no exception while the
audit hovers, clicks and wheels through every plot once a view. Each theme: every check box
and slider groove at least 3:1 against the window (WCAG 2.1 non-text contrast).

The screens are kept as a gallery: tests/artifacts/screens/<size>-<theme>/ (`make screens`)."""

from __future__ import annotations

import json
import subprocess
import sys
from fnmatch import fnmatch
from pathlib import Path

import pytest
from test_window_fit import ROOT, x_screen

PROBE = Path(__file__).with_name("audit_probe.py")
GALLERY = ROOT / "tests" / "artifacts" / "screens"
# (size, theme, what is walked): the lessons' stages once (1280x720, light), the tabs in all
RUNS = [((1280, 720), "light", "all"), ((1280, 720), "dark", "tabs"),
        ((1024, 768), "light", "tabs"), ((1024, 768), "dark", "tabs")]  # fmt: skip


@pytest.fixture(scope="module")
def audits(tiny_dir):
    out = {}
    for size, theme, walk in RUNS:
        with x_screen(*size) as env:
            env = {**env, "QT_QPA_PLATFORM": "xcb",
                   "PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}", "HF_HUB_OFFLINE": "1"}  # fmt: skip
            env.pop("QT_QPA_PLATFORMTHEME", None)
            folder = GALLERY / f"{size[0]}x{size[1]}-{theme}"
            proc = subprocess.run(
                [sys.executable, str(PROBE), str(tiny_dir), theme, walk, str(folder)],
                env=env, cwd=ROOT, capture_output=True, text=True, timeout=900,
            )  # fmt: skip
            lines = proc.stdout.splitlines()
            if folder.is_dir():  # the findings beside the pictures, for whoever opens them
                (folder / "audit.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
            screens = [json.loads(x[6:]) for x in lines if x.startswith("AUDIT ")]
            marks = [json.loads(x[9:]) for x in lines if x.startswith("CONTROLS ")]
            assert screens and marks, f"the audit failed ({proc.returncode}): {proc.stderr[-3000:]}"
            out[size, theme] = (screens, marks[0])
    return out


# What the audit still finds, each a known fault to fix (issue 54), by check: a pattern on
# "<size>-<theme>/<screen>" and the words of the finding. The list may shrink, not grow: an
# entry that no longer matches anything fails test_the_known_faults_are_still_there.
KNOWN: dict[str, list[tuple[str, str]]] = {}


def _known(check: str, where: str, finding: str) -> bool:
    return any(fnmatch(where, pattern) and words in finding
               for pattern, words in KNOWN.get(check, []))  # fmt: skip


def _failing(audits, check: str, found_in) -> dict[str, object]:
    bad = {}
    for (size, theme), (screens, _marks) in audits.items():
        for s in screens:
            where = f"{size[0]}x{size[1]}-{theme}/{s['screen']}"
            found = [f for f in found_in(s) if not _known(check, where, str(f))]
            if found:
                bad[where] = found
    return bad


def test_the_known_faults_are_still_there(audits):
    """A fault fixed is taken off KNOWN (so the audit holds it from then on)."""
    findings = {
        "fits": [(f"{k[0][0]}x{k[0][1]}-{k[1]}/{s['screen']}", str(s["window"]))
                 for k, (screens, _m) in audits.items() for s in screens if not s["fits"]],
        "small_plots": [(f"{k[0][0]}x{k[0][1]}-{k[1]}/{s['screen']}", f)
                        for k, (screens, _m) in audits.items() for s in screens
                        for f in s["small_plots"]],
        "clipped": [(f"{k[0][0]}x{k[0][1]}-{k[1]}/{s['screen']}", f)
                    for k, (screens, _m) in audits.items() for s in screens
                    for f in s["clipped"] + s["outside"]],
    }  # fmt: skip
    stale = [
        (check, entry)
        for check, entries in KNOWN.items()
        for entry in entries
        if not any(fnmatch(w, entry[0]) and entry[1] in f for w, f in findings[check])
    ]
    assert not stale, f"fixed: take these off KNOWN: {stale}"


def test_the_audit_walked_every_screen(audits):
    names = {s["screen"] for screens, _ in audits.values() for s in screens}
    assert any(n.startswith("presentation-inside") for n in names)
    assert sum(n.startswith("lesson") for n in names) >= 60  # 14 lessons, every stage
    assert sum(len(screens) for screens, _ in audits.values()) >= 150


def test_the_window_fits_the_screen_on_every_screen(audits):
    assert not _failing(audits, "fits", lambda s: [] if s["fits"] else [str(s["window"])])


def test_no_plot_is_drawn_smaller_than_it_reads(audits):
    assert not _failing(audits, "small_plots", lambda s: s["small_plots"])


def test_no_text_is_cut_without_its_whole_on_hover(audits):
    assert not _failing(audits, "clipped", lambda s: s["clipped"] + s["outside"])


def test_no_exception_while_hovering_clicking_and_wheeling(audits):
    assert not _failing(audits, "errors", lambda s: s["errors"])


def test_every_control_mark_reads_against_the_window(audits):
    low = {f"{k[1]}": {n: c for n, c in marks.items() if c < 3.0}
           for k, (_s, marks) in audits.items()}  # fmt: skip
    assert not any(low.values()), low
