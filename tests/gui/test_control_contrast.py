"""Every check box's indicator and every slider's groove at least 3:1 against the window, on
the rendered pixels, in both themes (WCAG 2.1 non-text contrast). On the dark theme Fusion drew
"Use the chat template" and "random" black on dark grey and the grooves of temperature, top-k
and min-p not at all; on the light one the boxes were about 2:1."""

from __future__ import annotations

import pytest
from audit_probe import controls


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_check_boxes_and_slider_grooves_read_against_the_window(qtbot, window, theme):
    window.set_theme(theme)
    qtbot.wait(20)
    marks = controls(window, theme)  # the screen audit's measure, on this window
    names = {k for k in marks if k.startswith("check box ")}
    assert {"check box 'Use the chat template'", "check box 'random'"} <= names, names
    assert sum(k.startswith("slider ") for k in marks) >= 4
    low = {k: c for k, c in marks.items() if c < 3.0}
    assert not low, f"below 3:1 against the window on the {theme} theme: {low}"
