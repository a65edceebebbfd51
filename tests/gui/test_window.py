"""The window end to end on tiny models: pytest-qt, offscreen, waits on signals."""

from pathlib import Path

import numpy as np
import pytest
from conftest import load, run

from engine import GenerationSession
from gui.common.token_pane import tooltip_html
from gui.shell.window import MainWindow

ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"


def produced(window):
    """Steps of the current run drawn so far."""
    window.drain()
    return len(window.store.steps)


def set_settings(window, **changes):
    window.sampler.set_settings(window.sampler.settings().with_(**changes))


def test_generate_pane_and_plots_match_the_engine(qtbot, window, tiny_dir):
    load(qtbot, window, tiny_dir)
    assert "decoder-only" in window.model_label.text() and "cpu" in window.model_label.text()
    set_settings(window, temperature=0.9, top_k=20, top_p=0.95, max_new_tokens=16, seed=4)
    window.prompt.setPlainText("Hello there")
    run(qtbot, window, window.generate)
    steps = window.steps
    assert len(steps) == 16
    # same seed + settings through the engine directly gives the same tokens
    bundle = window.bundle
    ids = bundle.encode_prompt("Hello there", use_chat_template=False)
    ref = GenerationSession(
        bundle.model,
        ids,
        window.sampler.settings(),
        tokenizer=bundle.tokenizer,
        eos_token_ids=bundle.eos_token_ids,
    )
    assert [s.token_id for s in ref.stream()] == [s.token_id for s in steps]
    # the pane shows exactly those steps, in order
    assert [s.token_id for s in window.pane.steps] == [s.token_id for s in steps]
    # the distribution plot holds the last step's data
    last = steps[-1]
    assert window.dist.step is last
    # the top rows, as many as can be labelled (issue 27), plus the chosen token's own row
    # when it ranks below them
    n = window.dist.shown_n
    assert 5 <= n <= window.dist.top_n
    widths = np.concatenate([window.dist.processed.opts["width"]])
    assert len(widths) in (n, n + 1)
    np.testing.assert_allclose(widths[:n], [c.prob for c in last.candidates[:n]])
    assert "Step 16" in window.plots.dist_box.info.text()
    # one point per step on the speed and entropy plots
    x, _ = window.plots.speed.curves["running"].getData()
    assert len(x) == 16
    x, y = window.plots.entropy.curves["model"].getData()
    np.testing.assert_allclose(y, [s.entropy_raw for s in steps])


def test_slider_change_mid_run_applies_to_next_steps(qtbot, window, tiny_dir):
    load(qtbot, window, tiny_dir)
    set_settings(window, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=60)
    window.sampler.pacing.setValue(40)  # slow enough to act mid-run
    window.prompt.setPlainText("abc")
    with qtbot.waitSignal(window.run_finished, timeout=30000):
        window.generate()
        qtbot.waitUntil(lambda: produced(window) >= 5, timeout=10000)
        window.sampler.rows["temperature"].field.setValue(0.0)
        changed_at = produced(window)
    window.drain()
    sources = [s.source for s in window.steps]
    assert sources[0] == "sample"
    assert all(src == "greedy" for src in sources[changed_at + 1 :])
    assert sources[-1] == "greedy"


def test_stop_step_continue(qtbot, window, tiny_dir):
    load(qtbot, window, tiny_dir)
    set_settings(window, temperature=0.7, max_new_tokens=500)
    window.sampler.pacing.setValue(50)
    window.prompt.setPlainText("abc")
    with qtbot.waitSignal(window.run_finished, timeout=30000) as blocker:
        window.generate()
        qtbot.waitUntil(lambda: produced(window) >= 3, timeout=10000)
        window.stop()
    qtbot.waitUntil(lambda: not window.runner.busy)
    window.drain()
    summary = blocker.args[0]
    assert summary.stop_reason == "stopped" and summary.tokens < 20
    n = len(window.steps)
    window.sampler.pacing.setValue(0)
    run(qtbot, window, window.step_once)
    assert len(window.steps) == n + 1
    set_settings(window, max_new_tokens=5)
    run(qtbot, window, window.continue_run)
    assert len(window.steps) == n + 6
    assert [s.index for s in window.steps] == list(range(n + 6))


def test_click_bar_branches_and_undo_restores(qtbot, window, tiny_dir):
    load(qtbot, window, tiny_dir)
    set_settings(window, temperature=0.0, max_new_tokens=12)
    window.prompt.setPlainText("branch me")
    run(qtbot, window, window.generate)
    original = [s.token_id for s in window.steps]
    k = 4
    window.select_step(k)
    assert window.dist.step.index == k and window.pane.selected == k
    alt = window.steps[k].candidates[3].token_id
    assert alt != original[k]
    run(qtbot, window, lambda: window.dist.bar_clicked.emit(k, alt))
    branched = [s.token_id for s in window.steps]
    assert branched[:k] == original[:k] and branched[k] == alt
    # issue 25: the branch goes on for the whole budget, counted from the branch point
    assert window.steps[k].forced and (len(branched) == k + 12 or window.steps[-1].is_eos)
    assert [s.token_id for s in window.pane.steps] == branched
    run(qtbot, window, window.undo)
    assert [s.token_id for s in window.steps] == original
    assert not window.store.choices.can_undo


def test_close_during_generation_leaves_no_thread(qtbot, store, autosave, tiny_dir):
    w = MainWindow(settings_store=store, autoload=False, autosave_path=autosave)
    qtbot.addWidget(w)
    w.show()
    load(qtbot, w, tiny_dir)
    set_settings(w, max_new_tokens=100000)
    w.sampler.pacing.setValue(30)
    w.prompt.setPlainText("long run")
    w.generate()
    qtbot.waitUntil(lambda: produced(w) >= 2)
    w.close()
    assert not w.runner.thread_running()


def test_switch_model_during_generation(qtbot, window, tiny_dir, tiny_t5_dir):
    load(qtbot, window, tiny_dir)
    set_settings(window, max_new_tokens=100000)
    window.sampler.pacing.setValue(30)
    window.prompt.setPlainText("switch")
    window.generate()
    qtbot.waitUntil(lambda: produced(window) >= 2)
    with qtbot.waitSignal(window.runner.model_loaded, timeout=60000):
        window.load_model(str(tiny_t5_dir))
    qtbot.waitUntil(lambda: not window.runner.busy)
    assert window.bundle.is_encoder_decoder
    assert "Encoder input" in window.prompt_box.label.text()
    assert not window.prompt_box.chat_template.isEnabled()
    window.sampler.pacing.setValue(0)
    set_settings(window, max_new_tokens=8, temperature=0)
    window.prompt.setPlainText("date: 2024-03-05")
    run(qtbot, window, window.generate)
    assert 1 <= len(window.steps) <= 8


def test_bad_model_path_shows_one_message_and_keeps_the_model(qtbot, window, tiny_dir, tmp_path):
    load(qtbot, window, tiny_dir)
    with qtbot.waitSignal(window.runner.load_failed, timeout=10000):
        window.load_model(str(tmp_path / "missing.gguf"))
    qtbot.waitUntil(lambda: not window.runner.busy)
    assert "No such file or folder" in window.last_error
    assert window.bundle is not None and window.bundle.source == str(tiny_dir)
    assert window._error_box is not None and window._error_box.isVisible()
    window._error_box.close()
    set_settings(window, max_new_tokens=3)
    window.prompt.setPlainText("still works")
    run(qtbot, window, window.generate)
    assert len(window.steps) == 3


def test_empty_prompt_message(qtbot, window, tiny_dir):
    load(qtbot, window, tiny_dir)
    window.prompt.setPlainText("   ")
    window.generate()
    assert "prompt is empty" in window.last_error
    assert not window.runner.busy


def test_settings_round_trip(qtbot, store, autosave, tiny_dir):
    w = MainWindow(settings_store=store, autoload=False, autosave_path=autosave)
    qtbot.addWidget(w)
    set_settings(
        w,
        temperature=0.42,
        top_k=17,
        top_p=0.83,
        min_p=0.05,
        repetition_penalty=1.2,
        max_new_tokens=77,
        seed=99,
        order="temperature_last",
    )
    w.sampler.add_user_preset("Mine", w.sampler.settings().with_(temperature=1.3))
    w.sampler.pacing.setValue(4.5)
    w.set_theme("dark")
    w.set_zoom(16)
    w.output.color_mode.setCurrentIndex(1)
    w.prompt.setPlainText("remember me")
    w.picker.recents = [str(tiny_dir)]
    w.close()
    w2 = MainWindow(settings_store=store, autoload=False, autosave_path=autosave)
    qtbot.addWidget(w2)
    s = w2.sampler.settings()
    assert (s.temperature, s.top_k, s.top_p, s.min_p, s.repetition_penalty) == (
        0.42,
        17,
        0.83,
        0.05,
        1.2,
    )
    assert (s.max_new_tokens, s.seed, s.order) == (77, 99, "temperature_last")
    assert w2.sampler.user_presets["Mine"].temperature == 1.3
    assert w2.sampler.pacing.value() == 4.5
    assert w2.theme.name == "dark" and w2.font_pt == 16
    assert w2.output.color_mode.currentData() == "probability"
    assert w2.prompt.toPlainText() == "remember me"
    assert w2.picker.recents == [str(tiny_dir)]
    assert store.value("version", type=int) == 1
    w2.close()


def test_export_files_and_unwritable_path(qtbot, window, tiny_dir, tmp_path):
    import csv
    import json

    load(qtbot, window, tiny_dir)
    set_settings(window, max_new_tokens=6, temperature=0)
    window.prompt.setPlainText("export")
    run(qtbot, window, window.generate)
    assert window.export("json", str(tmp_path / "run.json"))
    data = json.loads((tmp_path / "run.json").read_text())
    assert data["prompt"] == "export" and len(data["steps"]) == 6
    assert len(data["steps"][0]["candidates"]) == 50
    assert window.export("csv", str(tmp_path / "run.csv"))
    rows = list(csv.reader((tmp_path / "run.csv").open()))
    assert len(rows) == 7 and rows[0][0] == "index"
    assert window.export("md", str(tmp_path / "run.md"))
    assert "export" in (tmp_path / "run.md").read_text()
    assert window.export("png", str(tmp_path / "plots.png"))
    assert (tmp_path / "plots.png").stat().st_size > 1000
    assert not window.export("json", str(tmp_path / "no-such-dir" / "run.json"))
    assert "Could not export" in window.last_error


def test_hover_text_lists_alternatives(qtbot, window, tiny_dir):
    load(qtbot, window, tiny_dir)
    set_settings(window, max_new_tokens=3)
    window.prompt.setPlainText("hover")
    run(qtbot, window, window.generate)
    text = tooltip_html(window.steps[0])
    assert f"id {window.steps[0].token_id}" in text and text.count("<tr>") == 5


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_screenshot_after_generation(qtbot, window, tiny_dir, theme):
    load(qtbot, window, tiny_dir)
    window.set_theme(theme)
    window.resize(1600, 900)
    set_settings(window, max_new_tokens=40, temperature=1.0, top_k=30)
    window.prompt.setPlainText("A screenshot")
    run(qtbot, window, window.generate)
    window.select_step(3)
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / f"window-{theme}.png"
    assert window.grab().save(str(path))
    assert path.stat().st_size > 20000


def test_keyboard_shortcuts_from_the_prompt(qtbot, window, tiny_dir):
    from PySide6.QtCore import Qt

    load(qtbot, window, tiny_dir)
    set_settings(window, max_new_tokens=100000)
    window.sampler.pacing.setValue(30)
    window.prompt.setPlainText("keys")
    window.activateWindow()
    window.prompt.setFocus()
    with qtbot.waitSignal(window.run_finished, timeout=20000) as blocker:
        qtbot.keyClick(window.prompt, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)
        qtbot.waitUntil(lambda: window.runner.busy, timeout=5000)
        qtbot.waitUntil(lambda: produced(window) >= 2, timeout=10000)
        qtbot.keyClick(window.prompt, Qt.Key.Key_Escape)
    assert blocker.args[0].stop_reason == "stopped"
    assert window.prompt.toPlainText() == "keys"  # the shortcut did not type a newline


def test_stop_during_load_keeps_the_previous_model(qtbot, window, tiny_dir, tiny_t5_dir):
    load(qtbot, window, tiny_dir)
    first = window.bundle
    window.load_model(str(tiny_t5_dir))
    window.stop()
    qtbot.waitUntil(lambda: not window.runner.busy, timeout=60000)
    assert window.bundle is first


def test_step_summary_escapes_special_tokens():
    from engine.records import Step
    from gui.common.step_text import step_summary

    step = Step(
        index=0,
        token_id=2,
        text="",
        token_str="<|im_end|>",
        raw_prob=0.8,
        prob=1.0,
        rank=1,
        candidates=(),
        survivors=1,
        entropy_raw=1.0,
        entropy=0.0,
        step_time=0.01,
        tokens_per_s=10.0,
    )
    assert "&lt;|im_end|&gt;" in step_summary(step)


def test_libraries_are_frozen_for_the_collector_but_models_are_not(qtbot, window, tiny_dir):
    # Full collections over torch's and transformers' objects paused the window for up to
    # 240 ms; a frozen model, though, could never be freed after switching models.
    import gc
    import weakref

    load(qtbot, window, tiny_dir)
    assert gc.get_freeze_count() > 0
    model = weakref.ref(window.bundle.model)
    assert any(o is model() for o in gc.get_objects())  # tracked, not in the frozen set
    load(qtbot, window, tiny_dir)  # a second load replaces the first model...
    gc.collect()
    assert model() is None  # ...which the collector can free


def test_plots_export_at_a_slides_resolution_and_dialogs_start_in_documents(
    qtbot, window, tiny_dir, tmp_path, monkeypatch
):
    """ "Export plots as PNG" wrote the screen's 597x610 grab, too coarse for a slide; the save
    dialogs opened in the program's own folder."""
    from PySide6.QtGui import QImage
    from PySide6.QtWidgets import QFileDialog

    from gui.shell.persist import SLIDE_WIDTH, documents_folder

    load(qtbot, window, tiny_dir)
    set_settings(window, max_new_tokens=3)
    window.prompt.setPlainText("slide")
    run(qtbot, window, window.generate)
    assert window.export("png", str(tmp_path / "plots.png"))
    image = QImage(str(tmp_path / "plots.png"))
    assert image.width() >= SLIDE_WIDTH > window.plots.width()
    asked: list[str] = []
    monkeypatch.setattr(QFileDialog, "getSaveFileName",
                        lambda *a, **_k: (asked.append(a[2]), ("", ""))[1])  # fmt: skip
    assert not window.export("json")
    assert asked and asked[0].startswith(str(documents_folder()))
    assert documents_folder().is_dir()


def test_the_status_bar_says_when_threads_are_reduced_because_the_machine_is_busy(
    qtbot, window, monkeypatch
):
    from engine.runtime import threads
    from gui.shell import jobs

    busy = threads.ThreadState(1, 2, reduced=True, reductions=1, others=1.0,
                               message=threads.reduced_message(1, 2))  # fmt: skip
    monkeypatch.setattr(jobs, "thread_state", lambda: busy)
    window.clock.tick()
    note = window.status.threads
    assert note.isVisible() and note.text() == "Running on 1 thread of 2: the machine is busy"
    assert "1.0 cores" in note.toolTip()
    monkeypatch.setattr(jobs, "thread_state", lambda: threads.ThreadState(2, 2))
    window.clock.tick()
    assert not note.isVisible()
