"""The live round in the screen audit: the real window (Xvfb + openbox) at 1280x720, light and
dark, with a live round open and students joined, walked through the round (open, a vote
asked, revealed with the class's bars, the leaderboard, be the sampler with the class's text
scored) in the normal and the presentation view (tests/gui/live_audit_probe.py). Every screen
is held to the screen audit's checks (tests/gui/audit_probe.py): the window fits the screen; no
plot smaller than it reads; no text cut without its whole on hover, nothing off the window, the
live panel never scrolls sideways; no exception while hovering, clicking and wheeling the
plots; every check box and slider groove 3:1 against the window. A finding the same view
already had before the round opened is the window's, held by the screen audit
(tests/gui/test_screen_audit.py), not the live round's: it is told apart, not hidden (the
walk's audit.jsonl keeps both).

The screens are kept: tests/artifacts/screens/live-1280x720-<theme>/."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from test_window_fit import ROOT, x_screen

PROBE = Path(__file__).with_name("live_audit_probe.py")
GALLERY = ROOT / "tests" / "artifacts" / "screens"
SIZE = (1280, 720)
THEMES = ("light", "dark")
SCREENS = ("open", "question", "reveal", "leaderboard", "sampler")


@pytest.fixture(scope="module")
def audits(tiny_dir):
    out = {}
    for theme in THEMES:
        with x_screen(*SIZE) as env:
            env = {**env, "QT_QPA_PLATFORM": "xcb",
                   "PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}", "HF_HUB_OFFLINE": "1"}  # fmt: skip
            env.pop("QT_QPA_PLATFORMTHEME", None)
            folder = GALLERY / f"live-{SIZE[0]}x{SIZE[1]}-{theme}"
            proc = subprocess.run(
                [sys.executable, str(PROBE), str(tiny_dir), theme, str(folder)],
                env=env, cwd=ROOT, capture_output=True, text=True, timeout=900,
            )  # fmt: skip
            lines = proc.stdout.splitlines()
            (folder / "audit.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
            screens: dict[str, dict] = {}
            for line in lines:  # a screen's later line (a finding added) replaces its first
                if line.startswith("AUDIT "):
                    found = json.loads(line[6:])
                    screens[found["screen"]] = found
            marks = [json.loads(x[9:]) for x in lines if x.startswith("CONTROLS ")]
            assert proc.returncode == 0 and marks, (
                f"the live audit failed ({proc.returncode}): {proc.stderr[-3000:]}"
            )
            out[theme] = (screens, marks[0])
    return out


def _findings(audits, pick) -> dict[str, object]:
    """What a live screen finds that the same view found before the round opened (findings of
    the window itself, which the screen audit holds: tests/gui/test_screen_audit.py)."""
    out = {}
    for theme, (screens, _m) in audits.items():
        for name, s in screens.items():
            if name.endswith("-before"):
                continue
            before = pick(screens[name.split("-")[0] + "-before"])
            if found := [f for f in pick(s) if f not in before]:
                out[f"{theme}/{name}"] = found
    return out


def test_every_live_screen_was_walked_in_both_views_and_themes(audits):
    for theme in THEMES:
        names = set(audits[theme][0])
        want = {f"{view}-live-{s}" for view in ("normal", "presentation") for s in SCREENS}
        want |= {"normal-before", "presentation-before"}
        assert names == want, (theme, sorted(names))
        for name in names:
            assert (GALLERY / f"live-1280x720-{theme}" / f"{name}.png").stat().st_size > 10_000


def test_the_window_fits_1280x720_with_the_live_dock(audits):
    unfit = {f"{t}/{n}": s["window"] for t, (screens, _m) in audits.items()
             for n, s in screens.items() if not s["fits"]}  # fmt: skip
    assert not unfit


def test_no_plot_is_drawn_smaller_than_it_reads(audits):
    assert not _findings(audits, lambda s: s["small_plots"])


def test_no_live_text_is_cut_and_nothing_runs_off_the_window(audits):
    assert not _findings(audits, lambda s: s["clipped"] + s["outside"])


def test_no_exception_while_hovering_clicking_and_wheeling(audits):
    assert not _findings(audits, lambda s: s["errors"])


def test_every_control_mark_reads_against_the_window(audits):
    low = {t: {n: c for n, c in marks.items() if c < 3.0} for t, (_s, marks) in audits.items()}
    assert not any(low.values()), low
    assert all("check box 'Leaderboard'" in marks for _s, marks in audits.values())
