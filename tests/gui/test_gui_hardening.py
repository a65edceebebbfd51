"""Bad input, faults and long runs: a clear message, nothing lost, no thread left behind."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
from conftest import load, run
from transformers import BertConfig, BertForMaskedLM, ByT5Tokenizer, LlamaConfig, LlamaForCausalLM

from gui.devtools.harness import Heartbeat
from gui.shell.window import MainWindow

ROOT = Path(__file__).resolve().parents[2]


def set_settings(window, **changes):
    window.sampler.set_settings(window.sampler.settings().with_(**changes))


def produced(window):
    """Steps of the current run drawn so far."""
    window.drain()
    return len(window.store.steps)


# -- nothing lost --------------------------------------------------------------------------------


def test_autosave_restores_prompt_settings_and_run(qtbot, store, autosave, tiny_dir):
    a = MainWindow(settings_store=store, autoload=False, autosave_path=autosave)
    qtbot.addWidget(a)
    load(qtbot, a, tiny_dir)
    set_settings(a, temperature=0.9, seed=12, max_new_tokens=30)
    a.prompt.setPlainText("keep me safe")
    run(qtbot, a, a.generate)
    assert a.autosave()
    tokens = [s.token_id for s in a.steps]
    a.runner.shutdown()  # no closeEvent: as if the process died here
    b = MainWindow(settings_store=store, autoload=False, autosave_path=autosave)
    qtbot.addWidget(b)
    assert b.restored_from_autosave
    assert b.prompt.toPlainText() == "keep me safe"
    assert b.sampler.settings().seed == 12 and b.sampler.settings().temperature == 0.9
    assert [s.token_id for s in b.steps] == tokens == [s.token_id for s in b.pane.steps]
    assert "Restored the last run" in b.status_text.text()
    b.close()


def test_autosave_survives_kill_during_generation(tmp_path, tiny_dir):
    autosave = tmp_path / "autosave.json"
    script = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(ROOT)!r})
        from PySide6.QtCore import QSettings
        from gui.shell.app import make_app
        from gui.shell.window import MainWindow
        app = make_app()
        ini = QSettings({str(tmp_path / "s.ini")!r}, QSettings.Format.IniFormat)
        w = MainWindow(settings_store=ini, autoload=False, autosave_path={str(autosave)!r})
        w.show()
        started = []
        def go(busy):
            if not busy and w.bundle is not None and not started:
                started.append(1)
                w.generate()
        w.runner.busy_changed.connect(go)
        w.sampler.set_settings(w.sampler.settings().with_(max_new_tokens=100000, seed=3))
        w.sampler.pacing.setValue(40)
        w.prompt.setPlainText("killed mid-run")
        w.load_model({str(tiny_dir)!r})
        app.exec()
    """)
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen([sys.executable, "-c", script], env=env)
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            time.sleep(0.5)
            try:
                if len(json.loads(autosave.read_text())["steps"]) >= 40:
                    break
            except (OSError, ValueError, KeyError):
                pass
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    data = json.loads(autosave.read_text())  # never a half-written file: it was renamed into place
    assert data["prompt"] == "killed mid-run" and len(data["steps"]) >= 40
    assert not list(tmp_path.glob(".autosave.json.*.tmp"))


# -- faults ----------------------------------------------------------------------------------------


def test_out_of_memory_while_generating_keeps_the_model_usable(
    qtbot, window, tiny_dir, monkeypatch
):
    load(qtbot, window, tiny_dir)
    from engine.step.fastpath import LlamaFastStepper
    from engine.step.stepper import ModelStepper

    calls = {"n": 0}

    def failing(original):
        def logits(self, *args, **kwargs):  # a forward pass of either decode path
            calls["n"] += 1
            if calls["n"] == 4:
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
            return original(self, *args, **kwargs)

        return logits

    originals = {cls: cls.logits for cls in (LlamaFastStepper, ModelStepper)}
    for cls, original in originals.items():
        monkeypatch.setattr(cls, "logits", failing(original))
    set_settings(window, max_new_tokens=10)
    window.prompt.setPlainText("memory")
    with qtbot.waitSignal(window.runner.failed, timeout=30000):
        window.generate()
    qtbot.waitUntil(lambda: not window.runner.busy)
    window.drain()
    assert "ran out of memory" in window.last_error
    assert len(window.steps) == 3  # the tokens before the failure are kept
    for cls, original in originals.items():
        monkeypatch.setattr(cls, "logits", original)
    window._error_box.close()
    run(qtbot, window, window.generate)
    assert len(window.steps) == 10


def test_out_of_memory_while_loading_keeps_the_previous_model(qtbot, window, tiny_dir, monkeypatch):
    load(qtbot, window, tiny_dir)
    previous = window.bundle

    def oom(*_a, **_k):
        raise torch.OutOfMemoryError("out of memory")

    monkeypatch.setattr("engine.models.catalog.open_model", oom)
    with qtbot.waitSignal(window.runner.load_failed, timeout=10000):
        window.load_model("smollm2-135m")
    qtbot.waitUntil(lambda: not window.runner.busy)
    assert "ran out of memory" in window.last_error and window.bundle is previous


def test_stop_close_and_switch_a_hundred_times(qtbot, store, autosave, tiny_dir, tiny_t5_dir):
    w = MainWindow(settings_store=store, autoload=False, autosave_path=autosave)
    qtbot.addWidget(w)
    load(qtbot, w, tiny_dir)
    set_settings(w, max_new_tokens=100000)
    w.prompt.setPlainText("again and again")
    rss_at_10 = 0
    for i in range(100):
        if i == 10:
            rss_at_10 = rss_mb()
        if i % 3 == 0:  # stop mid-generation
            w.generate()
            qtbot.waitUntil(lambda: produced(w) >= 1, timeout=10000)
            w.stop()
            qtbot.waitUntil(lambda: not w.runner.busy, timeout=10000)
        elif i % 3 == 1:  # switch the model mid-generation, then stop the load
            w.generate()
            qtbot.waitUntil(lambda: produced(w) >= 1, timeout=10000)
            w.load_model(str(tiny_t5_dir if i % 2 else tiny_dir))
            qtbot.waitUntil(lambda: w.runner.job_name == "load", timeout=10000)
            w.stop()
            qtbot.waitUntil(lambda: not w.runner.busy, timeout=30000)
        else:  # a whole window closed mid-generation
            other = MainWindow(settings_store=store, autoload=False, autosave_path=autosave)
            other.runner.workbench.adopt(w.bundle)
            other.bundle = w.bundle
            other.prompt.setPlainText("closing")
            other.sampler.set_settings(other.sampler.settings().with_(max_new_tokens=100000))
            other.generate()
            qtbot.waitUntil(lambda o=other: produced(o) >= 1, timeout=10000)
            other.close()
            assert not other.runner.thread_running()
            other.deleteLater()
    assert not w.runner.thread_running()
    growth = rss_mb() - rss_at_10
    assert growth < 60, f"memory grew by {growth:.0f} MB over 90 stop/switch/close rounds"
    set_settings(w, max_new_tokens=5, temperature=0)
    run(qtbot, w, w.generate)
    assert len(w.steps) == 5
    w.close()


def rss_mb() -> float:
    import gc

    gc.collect()
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 1024
    return 0.0


def test_ten_thousand_tokens_memory_is_bounded_and_window_responsive(qtbot, window, tmp_path):
    from engine.records import KEEP_FULL as KEEP_CANDIDATES

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=384,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=12000,
    )
    path = tmp_path / "long"
    LlamaForCausalLM(cfg).save_pretrained(path)
    ByT5Tokenizer().save_pretrained(path)
    load(qtbot, window, path)
    window.bundle.eos_token_ids = ()  # a random model may say EOS early; run all 10,000 tokens
    set_settings(window, max_new_tokens=10000, temperature=1.0, top_k=0, top_p=1.0)
    window.prompt.setPlainText("long")
    heartbeat = Heartbeat()
    heartbeat.start()
    run(qtbot, window, window.generate, timeout=600000)
    gaps = heartbeat.stop()
    steps = window.steps
    assert len(steps) == 10000 == len(window.pane.steps)
    assert all(len(s.candidates) <= 5 for s in steps[: 10000 - KEEP_CANDIDATES])
    assert all(len(s.candidates) == 50 for s in steps[-KEEP_CANDIDATES:])
    history = window.runner.workbench.session.history
    assert sum(len(s.candidates) for s in history) <= KEEP_CANDIDATES * 50 + 8000 * 5
    assert max(gaps) < 1.0, f"the event loop stalled for {max(gaps):.2f} s"


# -- bad input -------------------------------------------------------------------------------------


def test_prompt_longer_than_the_context_is_refused(qtbot, window, tiny_dir):
    load(qtbot, window, tiny_dir)
    window.prompt.setPlainText("x" * 400)  # 400 byte tokens; the model holds 256
    with qtbot.waitSignal(window.runner.failed, timeout=10000):
        window.generate()
    qtbot.waitUntil(lambda: not window.runner.busy)
    assert "401 tokens but the model's context holds 256" in window.last_error


def test_four_megabyte_paste_is_refused_without_freezing(qtbot, window, tiny_dir):
    load(qtbot, window, tiny_dir)
    window.prompt.setPlainText("lorem ipsum " * 350000)  # 4.2 MB
    with qtbot.waitSignal(window.runner.failed, timeout=120000):
        window.generate()
    qtbot.waitUntil(lambda: not window.runner.busy)
    assert "context holds 256" in window.last_error


def test_characters_of_any_script_are_accepted(qtbot, window, tiny_dir):
    load(qtbot, window, tiny_dir)
    set_settings(window, max_new_tokens=4)
    window.prompt.setPlainText("naïve 東京 🚀 \u200b\x00 مرحبا")
    run(qtbot, window, window.generate)
    assert len(window.steps) == 4


@pytest.mark.parametrize("case", ["corrupt", "truncated", "fake_gguf", "bert", "no_config"])
def test_bad_model_files_get_a_message(qtbot, window, tiny_dir, tmp_path, case):
    import shutil

    load(qtbot, window, tiny_dir)
    target = tmp_path / case
    if case in ("corrupt", "truncated"):
        shutil.copytree(tiny_dir, target)
        weights = target / "model.safetensors"
        data = weights.read_bytes()
        weights.write_bytes(b"\x00garbage" * 100 if case == "corrupt" else data[: len(data) // 2])
    elif case == "fake_gguf":
        target = tmp_path / "model.gguf"
        target.write_bytes(b"GGUF" + b"\x03\x00\x00\x00" + b"\x00" * 64)
    elif case == "bert":
        cfg = BertConfig(
            vocab_size=384,
            hidden_size=16,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=32,
        )
        BertForMaskedLM(cfg).save_pretrained(target)
        ByT5Tokenizer().save_pretrained(target)
    else:
        target.mkdir()
    with qtbot.waitSignal(window.runner.load_failed, timeout=60000):
        window.load_model(str(target))
    qtbot.waitUntil(lambda: not window.runner.busy)
    expected = {
        "corrupt": "weights",
        "truncated": "weights",
        "fake_gguf": "GGUF",
        "bert": "cannot generate text",
        "no_config": "no config.json",
    }[case]
    assert expected in window.last_error, window.last_error
    assert window.bundle is not None and window.bundle.source == str(tiny_dir)


def test_model_without_chat_template_disables_the_toggle(qtbot, window, tiny_dir):
    load(qtbot, window, tiny_dir)
    toggle = window.prompt_box.chat_template
    assert not toggle.isEnabled() and not toggle.isChecked()
