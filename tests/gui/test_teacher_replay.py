"""Issue 34, "Must show": the teacher's seven steps replayed in the real, decorated window
(Xvfb + openbox at 1280x720, SmolLM2): a 30-token run at temperature 1 on "Once upon a time, a
dragon", a branch by clicking a bar, Tree > Expand 3 deep x 3 children, File > Score a text
without and with a context, an Experiments sweep, F5, quit and restart. tests/gui/
teacher_probe.py drives the window through its own widgets and menus (the bar, the token and
the wheel as real X events) in two processes sharing the settings and the autosave; this test
reads what it measured. DECODING_LAB_SHOTS=<folder> keeps its screenshots there."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_window_fit import x_screen

ROOT = Path(__file__).resolve().parents[2]
PROBE = Path(__file__).with_name("teacher_probe.py")
PROMPT = "Once upon a time, a dragon"


@pytest.fixture(scope="module")
def screen():
    """An Xvfb screen of 1280x720 with openbox managing it; both stopped afterwards."""
    with x_screen(1280, 720) as env:
        yield env


@pytest.fixture(scope="module")
def replay(screen, tmp_path_factory):
    from engine.models.catalog import list_bundled

    if not any(m.name == "smollm2-135m" and m.available() for m in list_bundled()):
        pytest.skip("the bundled SmolLM2 is not installed (make setup)")
    state = tmp_path_factory.mktemp("teacher")
    shots = Path(os.environ.get("DECODING_LAB_SHOTS") or state / "shots")
    env = {**screen, "QT_QPA_PLATFORM": "xcb", "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'tests'}"}
    env.pop("QT_QPA_PLATFORMTHEME", None)
    out = {}
    for phase in ("first", "second"):
        proc = subprocess.run(
            [sys.executable, str(PROBE), str(state), phase, str(shots)],
            env=env, cwd=ROOT, capture_output=True, text=True, timeout=900,
        )  # fmt: skip
        lines = [x for x in proc.stdout.splitlines() if x.startswith("TEACHER ")]
        assert lines, f"{phase} failed ({proc.returncode}): {proc.stderr[-3000:]}"
        out[phase] = json.loads(lines[-1][8:])
    return out


@pytest.mark.slow
def test_the_tree_survives_a_restart_and_a_generate_with_the_template(replay):
    first, second = replay["first"], replay["second"]
    assert first["run_tokens"] == 30 and first["nodes"] > first["branched"] > 30
    assert "Grows from</b> node" in first["expand_from"]
    assert second["restart"] == {"ticked": False, "same_tree": True, "same_node": True,
                                 "method": "sampling"}  # fmt: skip
    assert second["after_generate"] == {"same_tree": True, "kept_all": True}
    ticked = second["ticked_generate"]
    assert ticked["new_tree"] and ticked["old_kept"] and ticked["kept"][0] >= first["nodes"]
    listed = second["trees_list"]
    assert [row[0] for row in listed] == [PROMPT, PROMPT]
    assert [row[1] for row in listed] == ["yes", "no"]  # the one open now, then the kept one
    assert second["unticked_generate"] == {"ticked": False, "old_back": True}


@pytest.mark.slow
def test_the_most_likely_leaf_is_one_action_and_says_its_percent(replay):
    best = replay["first"]["most_likely"]
    assert best["cursor"] == best["best"] and best["order"] == "likely"
    # the row's per-token column (1 / perplexity) and its path column (exp(path log p)), in %
    assert best["shown"] == best["want"]


@pytest.mark.slow
def test_the_wheel_scrolls_the_panel_and_changes_no_setting(replay):
    wheel = replay["first"]["wheel"]
    assert wheel["scrollable"] and wheel["same"] and max(wheel["scrolled"]) > 0


@pytest.mark.slow
def test_the_most_surprising_token_with_and_without_a_context(replay):
    first = replay["first"]
    alone, context = first["score"]["no_context"], first["score"]["context"]
    assert alone["no_context"] and not context["no_context"]
    for s in (alone, context):
        assert s["picked"] == s["peak"] and s["marker"] == s["number"]  # one number for it
        assert s["info"].startswith(f"<b>Scored token {s['number']}</b>")
    assert alone["picked"] != 0  # the no-context first token is never "the most surprising"
    bits = [b for _t, b in alone["tokens"][1:]]
    assert alone["bits"] == pytest.approx(max(bits), abs=0.01)
    # read as a document's start, the text is likelier than after the chat-turn marker
    assert alone["perplexity"] < first["after_chat_marker"]


@pytest.mark.slow
def test_the_presentation_view_shows_the_prompt_and_whole_names(replay):
    shown = replay["first"]["presentation"]
    assert shown["prompt_shown"].startswith("Prompt: ") and shown["prompt_shown"].endswith(
        PROMPT[-10:]
    )
    assert shown["tabs_fit"], shown["tabs"]


@pytest.mark.slow
def test_the_sweep_names_what_stays_on_and_shows_every_row(replay):
    sweep = replay["first"]["sweep"]
    assert "top-k 40" in sweep["also_on"] and "top-p 0.9" in sweep["also_on"]
    assert "top-k 40" in sweep["info"]
    assert sweep["visible_rows"] == sweep["rows"] == 5
    assert replay["first"]["compare_visible_rows"] == 5
