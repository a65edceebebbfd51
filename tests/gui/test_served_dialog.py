"""Opening a served model from the window: the dialog, the picker's recents (no key in them),
the method panel's stream mode, and a clear message when nothing listens at the address."""

import pytest

from engine.records import SAMPLING, SERVED_STREAM
from gui.models.served_dialog import ServedDialog, parse_served, served_source, served_title


def test_dialog_gives_a_source_without_a_key(qtbot, monkeypatch):
    monkeypatch.setenv("DECODING_LAB_API_KEY", "sk-secret-1234")
    dialog = ServedDialog()
    qtbot.addWidget(dialog)
    dialog.url.setText("http://gpu-box:8000/")
    dialog.model.setText("meta-llama/Llama-3.1-8B-Instruct")
    source = dialog.source()
    assert source is not None and "sk-secret" not in source
    assert parse_served(source) == (
        "http://gpu-box:8000",
        "meta-llama/Llama-3.1-8B-Instruct",
        "env",
    )
    assert served_title(source) == "Served: meta-llama/Llama-3.1-8B-Instruct @ gpu-box:8000"
    dialog.url.setText("gpu-box")  # no scheme: refused, not guessed
    assert dialog.source() is None
    again = ServedDialog(last=source)
    qtbot.addWidget(again)
    assert again.url.text() == "http://gpu-box:8000" and again.key.currentData() == "env"


def test_window_opens_a_served_source_and_remembers_it_without_the_key(
    qtbot, window, store, monkeypatch
):
    monkeypatch.setenv("DECODING_LAB_API_KEY", "sk-secret-5678")
    calls = []
    monkeypatch.setattr(window.runner, "open_served", lambda *a, **k: calls.append((a, k)))
    source = served_source("http://127.0.0.1:8000", "smol", "env")
    window.load_model(source)
    (url, model, key_source), _ = calls[0]
    assert (url, model, key_source.kind) == ("http://127.0.0.1:8000", "smol", "env")
    window.picker.remember(source)
    assert window.picker.findText("Served: smol @ 127.0.0.1:8000") >= 0
    window.close()
    from pathlib import Path

    saved = Path(store.fileName()).read_text(encoding="utf-8")
    assert "127.0.0.1:8000" in saved and "sk-secret" not in saved


def test_nothing_listening_gives_a_clear_message(qtbot, window):
    with qtbot.waitSignal(window.runner.load_failed, timeout=60000) as failed:
        window.load_model(served_source("http://127.0.0.1:9", "any", "none"))
    qtbot.waitUntil(lambda: not window.runner.busy, timeout=10000)
    message = failed.args[0].lower()
    assert "127.0.0.1:9" in message or "reach" in message or "connect" in message


def test_method_panel_offers_stream_mode_only_for_a_served_model(qtbot, window):
    panel = window.method
    assert panel.method.findData(SERVED_STREAM) < 0
    panel.set_served(True)
    panel.set_current(SERVED_STREAM)
    assert panel.current() == SERVED_STREAM
    panel.set_served(False)
    assert panel.method.findData(SERVED_STREAM) < 0 and panel.current() == SAMPLING


def test_a_served_step_shows_the_mass_outside_its_candidates_as_one_bar(qtbot, window):
    from dataclasses import replace

    from test_classroom import synthetic_step

    from engine.records import RunStarted

    step = replace(synthetic_step(0, n=20), other_p=0.31, entropy_lower_bound=True)
    window.store.push(RunStarted(SAMPLING, "p", 3))
    window.store.push(step)
    window.drain()
    window.views.redraw(busy=False)
    rows = window.dist.rows
    assert rows[-1][1].text == "(all other tokens)" and rows[-1][1].raw_prob == 0.31
    assert "did not send" in window.dist.describe(len(rows) - 1)
    assert "lower bound" in window.plots.dist_box.info.text()
    clicked = []
    window.dist.bar_clicked.connect(lambda *a: clicked.append(a))
    assert window.dist.rows[-1][1].token_id == -1  # the "other" bar is not a token to choose


# -- issue 37: the server kind, its options, and bars that say what the server returned --------


def test_dialog_remembers_the_server_kind_and_its_options(qtbot):
    from gui.models.actions import served_run_options

    dialog = ServedDialog()
    qtbot.addWidget(dialog)
    dialog.url.setText("http://127.0.0.1:8080")
    dialog.kind.setCurrentIndex(dialog.kind.findData("llama-server"))
    dialog.tokenizer.setText("HuggingFaceTB/SmolLM2-135M-Instruct")
    dialog.server_sampler.setChecked(True)
    source = dialog.source()
    assert parse_served(source) == ("http://127.0.0.1:8080", "", "env")
    assert served_run_options(source) == {
        "kind": "llama-server", "tokenizer": "HuggingFaceTB/SmolLM2-135M-Instruct",
        "server_sampler": True, "raw_logprobs": False,
    }  # fmt: skip
    again = ServedDialog(last=source)
    qtbot.addWidget(again)
    assert again.kind.currentData() == "llama-server" and again.server_sampler.isChecked()
    assert again.tokenizer.text() == "HuggingFaceTB/SmolLM2-135M-Instruct"
    older = served_source("http://h:8000", "m", "none")  # before issue 37: asked of the server
    assert served_run_options(older)["kind"] == "auto"


def test_window_passes_the_kind_and_options_to_the_worker(qtbot, window, monkeypatch):
    calls = []
    monkeypatch.setattr(window.runner, "open_served", lambda *a, **k: calls.append((a, k)))
    source = served_source("http://127.0.0.1:8080", "", "none", "ollama", {"tokenizer": "t"})
    window.load_model(source)
    (_url, model, _key), options = calls[0]
    assert model is None and options["kind"] == "ollama" and options["tokenizer"] == "t"


def _served_step(**changes):
    from dataclasses import replace

    from test_classroom import synthetic_step

    return replace(synthetic_step(0, n=12), other_p=0.2, entropy_lower_bound=True, **changes)


def _show(window, step) -> None:
    from engine.records import RunStarted

    window.store.push(RunStarted(SAMPLING, "p", 3))
    window.store.push(step)
    window.drain()
    window.views.redraw(busy=False)


def test_llama_cpps_own_sampler_is_a_third_bar_named_in_the_key(qtbot, window):
    from dataclasses import replace

    step = _served_step(server_sampler="llama.cpp")
    cands = tuple(replace(c, server_prob=c.prob * 0.9) for c in step.candidates)
    _show(window, replace(step, candidates=cands))
    plot = window.dist
    widths = plot.server.opts["width"]
    assert len(widths) == len(cands) and max(widths) > 0
    assert "llama.cpp" in window.plots.dist_box.key.text()
    assert " | " in plot.shown_values()[0]  # its value after ours
    assert "llama.cpp's sampler" in plot.describe(0)
    window.show_capability(("the whole line", "llama-server · raw top-20 → our sampler"))
    label = window.plots.dist_box.capability
    assert label.isVisibleTo(window) and label.toolTip() == "the whole line"
    window.show_capability(())
    assert not label.isVisibleTo(window)


def test_a_raw_only_stream_draws_no_after_sampler_bars_or_entropy(qtbot, window):
    import math

    _show(window, _served_step(after_sampler=False, source="server"))
    plot = window.dist
    assert not plot.sampled and len(plot.processed.opts["width"]) == 0
    key = window.plots.dist_box.key.text()
    assert "model" in key and "sampler" not in key
    assert "not reported" in window.plots.dist_box.info.text()
    assert math.isnan(window.store.series["h"][-1])  # no "after sampler" entropy point
    # Nothing reads as cut where no sampler is shown: the server sampled from everything.
    assert len(plot.raw_cut.opts["width"]) == 0 and not any("✂" in v for v in plot.shown_values())
    other = len(plot.rows) - 1
    assert plot.rows[other][1].text == "(all other tokens)" and "may pick" in plot.describe(other)
    assert window.plots.entropy._title.startswith("≥ ") and window.plots.entropy._title.endswith(
        "+"
    )


# -- the dialog's server fields, and the recents remembering them -------------------------------

SERVER_FIELDS = {  # kind: (llama.cpp's sampler offered, SGLang's raw flag offered)
    "auto": (True, True), "vllm": (False, False), "llama-server": (True, False),
    "ollama": (False, False), "sglang": (False, True),
}  # fmt: skip


@pytest.mark.parametrize("kind", list(SERVER_FIELDS))
def test_dialog_offers_only_what_the_chosen_server_has_and_gives_back_every_field(qtbot, kind):
    from gui.models.actions import served_run_options

    dialog = ServedDialog()
    qtbot.addWidget(dialog)
    dialog.url.setText("http://lab-box:30000")
    dialog.model.setText("smol")
    dialog.tokenizer.setText("/models/smol-tokenizer")
    dialog.key.setCurrentIndex(dialog.key.findData("none"))
    dialog.server_sampler.setChecked(True)  # ticked before the server is chosen
    dialog.raw.setChecked(True)
    dialog.kind.setCurrentIndex(dialog.kind.findData(kind))
    sampler, raw = SERVER_FIELDS[kind]
    assert (dialog.server_sampler.isEnabled(), dialog.raw.isEnabled()) == (sampler, raw)
    source = dialog.source()
    assert parse_served(source) == ("http://lab-box:30000", "smol", "none")
    # A box the server lacks is not sent, though it was ticked.
    assert served_run_options(source) == {
        "kind": kind, "tokenizer": "/models/smol-tokenizer",
        "server_sampler": sampler, "raw_logprobs": raw,
    }  # fmt: skip
    again = ServedDialog(last=source)
    qtbot.addWidget(again)
    fields = (again.url.text(), again.model.text(), again.tokenizer.text(),
              again.key.currentData(), again.kind.currentData())  # fmt: skip
    assert fields == ("http://lab-box:30000", "smol", "/models/smol-tokenizer", "none", kind)
    assert (again.server_sampler.isChecked(), again.raw.isChecked()) == (sampler, raw)
    assert again.source() == source


def test_recents_of_one_address_with_other_choices_read_apart():
    plain = served_source("http://127.0.0.1:8080", "", "none", "llama-server")
    sampler = served_source(
        "http://127.0.0.1:8080", "", "none", "llama-server", {"server_sampler": "1"}
    )
    raw = served_source("http://gpu:30000", "m", "env", "sglang", {"raw_logprobs": "1"})
    titles = [served_title(s) for s in (plain, sampler, raw)]
    assert titles == [
        "Served: first model @ 127.0.0.1:8080 (llama-server)",
        "Served: first model @ 127.0.0.1:8080 (llama-server + llama.cpp's sampler)",
        "Served: m @ gpu:30000 (SGLang raw log-probabilities)",
    ]


def test_the_recents_keep_the_server_and_its_options_across_a_restart(
    qtbot, window, store, autosave, monkeypatch
):
    from gui.shell.window import MainWindow

    llama = served_source(
        "http://127.0.0.1:8080", "", "none", "llama-server",
        {"tokenizer": "/t/smol", "server_sampler": "1"},
    )  # fmt: skip
    sglang = served_source("http://gpu:30000", "m", "env", "sglang", {"raw_logprobs": "1"})
    window.picker.remember(llama)
    window.picker.remember(sglang)  # the newest first
    window.close()
    again = MainWindow(settings_store=store, autoload=False, autosave_path=autosave)
    qtbot.addWidget(again)
    assert again.picker.recents[:2] == [sglang, llama]
    calls, shown = [], []
    monkeypatch.setattr(again.runner, "open_served", lambda *a, **k: calls.append((a, k)))

    def accept(dialog) -> int:  # File > Open served model…, answered as it was filled in
        shown.append(dialog)
        return ServedDialog.DialogCode.Accepted

    monkeypatch.setattr(ServedDialog, "exec", accept)
    again.models.open_served_dialog()
    dialog = shown[0]
    assert dialog.kind.currentData() == "sglang" and dialog.raw.isChecked()
    assert dialog.url.text() == "http://gpu:30000" and dialog.model.text() == "m"
    (url, model, key), options = calls[0]
    assert (url, model, key.kind) == ("http://gpu:30000", "m", "env")
    assert options == {"kind": "sglang", "tokenizer": None, "server_sampler": False,
                       "raw_logprobs": True}  # fmt: skip
    again.picker._picked(again.picker.findData(llama))  # the older recent, from the list
    _, options = calls[1]
    assert options == {"kind": "llama-server", "tokenizer": "/t/smol", "server_sampler": True,
                       "raw_logprobs": False}  # fmt: skip
    again.close()
