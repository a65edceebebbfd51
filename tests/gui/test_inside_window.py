"""The Inside tab (issue 33) in a real window under a window manager (Xvfb + openbox, as the
window-fit tests), at 1280x720: opened by a click on its tab, a click on a token updates it, every
page fits in the normal and the presentation view, a scored text and a restored run work.
Each case runs tests/gui/inside_probe.py under QT_QPA_PLATFORM=xcb and reads its JSON."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from test_window_fit import ROOT, x_screen

PROBE = ROOT / "tests" / "gui" / "inside_probe.py"


@pytest.fixture(scope="module")
def probed(tiny_dir):
    with x_screen(1280, 720) as screen:
        env = {**screen, "QT_QPA_PLATFORM": "xcb",
               "PYTHONPATH": f"{ROOT}:{ROOT / 'tests' / 'gui'}:{ROOT / 'tests'}"}  # fmt: skip
        env.pop("QT_QPA_PLATFORMTHEME", None)
        proc = subprocess.run([sys.executable, str(PROBE), str(tiny_dir)], env=env, cwd=ROOT,
                              capture_output=True, text=True, timeout=400)  # fmt: skip
        lines = [x for x in proc.stdout.splitlines() if x.startswith("INSIDE ")]
        assert lines, f"probe failed ({proc.returncode}): {proc.stderr[-3000:]}"
        yield json.loads(lines[-1][len("INSIDE ") :])


def test_the_tab_opens_on_the_last_token_and_a_click_moves_it(probed):
    assert probed["window"][0] <= 1280 and probed["window"][1] < 720
    assert "Token 24 of the run" in probed["first"], probed["first"]
    assert "Token 4 of the run" in probed["clicked"], probed["clicked"]
    assert probed["lens_rows"] >= 10


@pytest.mark.parametrize("view", ["normal", "presentation"])
def test_every_page_fits_at_1280x720(probed, view):
    assert probed[view]["clipped"] == [], probed[view]["clipped"]
    assert probed[view]["outside"] == [], probed[view]["outside"]


def test_a_scored_text_and_a_restored_run_are_read_inside(probed):
    assert "Token 3 of the scored text" in probed["scored"], probed["scored"]
    assert probed["tab_after_score"]
    assert probed["restored_tokens"] == 24
    assert "Token 24 of the run" in probed["restored"], probed["restored"]
