"""The toolbar's weights choice (float32 ... int4): a model loads in it, changing it reloads
the current model in the new weights, and the window remembers it as it remembers the model."""

from conftest import load, run

from gui.shell.window import MainWindow


def test_weights_choice_loads_reloads_and_is_remembered(qtbot, window, tiny_dir, store, autosave):
    weights = window.picker.weights
    assert weights.dtype() == "auto"
    weights.select("int8")
    load(qtbot, window, tiny_dir)
    assert window.models.bundle.dtype_name == "int8"
    assert window.model_label.text().endswith("int8")
    with qtbot.waitSignal(window.runner.model_loaded, timeout=60000):
        weights.select("int4")
        weights.dtype_chosen.emit("int4")  # as the user's pick emits it
    qtbot.waitUntil(lambda: not window.runner.busy, timeout=5000)
    assert window.models.bundle.dtype_name == "int4"
    # the label's tooltip says where the integers came from and whose kernels run them
    assert window.model_label.toolTip() == window.models.bundle.extra["quant_summary"]
    assert "kernels" in window.model_label.toolTip()
    window.sampler.set_settings(window.sampler.settings().with_(max_new_tokens=6, seed=1))
    window.prompt.setPlainText("Hello there")
    run(qtbot, window, window.generate)  # a run on the int4 model
    assert len(window.steps) == 6
    window.close()
    again = MainWindow(settings_store=store, autoload=False, autosave_path=autosave)
    qtbot.addWidget(again)
    assert again.picker.weights.dtype() == "int4"
    again.picker.weights.select("no-such-dtype")  # a damaged setting reads as Auto
    assert again.picker.weights.dtype() == "auto"
    again.close()
