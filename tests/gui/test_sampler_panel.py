"""The sampler panel shows and returns every field of SamplerSettings, reorders the stages
(buttons and presets), and has a tooltip from the help table on every control; the method
panel shows only the current method's fields."""

import math
import os

import pytest
from PySide6.QtWidgets import QAbstractSpinBox, QComboBox, QLineEdit, QListWidget, QWidget

from engine.records import BEAM, CONTRASTIVE, GROUP_BEAM, SAMPLING
from engine.sampling.help import HELP
from engine.sampling.settings import (
    LLAMA_CPP_ORDER,
    TRANSFORMERS_ORDER,
    SamplerSettings,
    stage_order,
)
from gui.controls.method_panel import MethodPanel
from gui.controls.sampler_panel import SamplerPanel, parse_bias

EVERYTHING = SamplerSettings(
    temperature=0.8, top_k=33, top_p=0.9, min_p=0.05, typical_p=0.95, repetition_penalty=1.15,
    no_repeat_ngram_size=3, min_new_tokens=4, max_new_tokens=77, order="temperature_last",
    seed=1234, penalty_last_n=64, frequency_penalty=0.4, presence_penalty=-0.3,
    dry_multiplier=0.8, dry_base=2.0, dry_allowed_length=3, dry_penalty_last_n=256,
    dry_sequence_breakers=("\n", "."), logit_bias=(("hello", 2.5), ("#13", -math.inf)),
    banned_strings=("bad word", "#7"), suppress_tokens=(0, 42), top_n_sigma=1.5,
    epsilon_cutoff=0.0003, eta_cutoff=0.002, xtc_threshold=0.15, xtc_probability=0.5,
    top_a=0.2, dynatemp_range=0.5, dynatemp_exponent=1.5, smoothing_factor=0.3,
    smoothing_curve=2.0, mirostat=2, mirostat_tau=4.0, mirostat_eta=0.2,
    grammar="choice:yes|no", adaptive_p_target=0.5, adaptive_p_decay=0.8,
    stage_order=("xtc", "temperature"),
)  # fmt: skip


def test_every_field_round_trips(qtbot):
    panel = SamplerPanel()
    qtbot.addWidget(panel)
    defaults = SamplerSettings()
    for field in EVERYTHING.to_dict():  # the test itself must cover every field
        assert getattr(EVERYTHING, field) != getattr(defaults, field), field
    with qtbot.waitSignal(panel.settings_changed) as sig:
        panel.set_settings(EVERYTHING)
    assert sig.args[0] == EVERYTHING
    assert panel.settings() == EVERYTHING
    panel.set_settings(SamplerSettings())
    assert panel.settings() == SamplerSettings()


def test_stage_order_buttons_and_presets(qtbot):
    panel = SamplerPanel()
    qtbot.addWidget(panel)
    panel.set_settings(SamplerSettings(temperature=2.0, top_p=0.6))
    assert panel.settings().stage_order == ()  # the preset order is not stored as custom
    names = [panel.stage_list.item(i).text() for i in range(panel.stage_list.count())]
    assert len(names) == len(TRANSFORMERS_ORDER)
    top_p = TRANSFORMERS_ORDER.index("top_p")
    temperature = TRANSFORMERS_ORDER.index("temperature")
    panel.stage_list.setCurrentRow(top_p)
    with qtbot.waitSignal(panel.settings_changed):
        for _ in range(top_p - temperature):
            panel.move_stage(-1)
    s = panel.settings()
    assert s.stage_order[-1] == "top_p"  # the shortest order that says it
    order = stage_order(s)
    assert order.index("top_p") == temperature and order.index("temperature") == temperature + 1
    assert panel.settings() == SamplerSettings.from_dict(s.to_dict())
    panel.advanced.click()  # open the Advanced group
    panel.findChild(QWidget, "order_llama_cpp").click()
    s = panel.settings()
    assert s.order == "temperature_last" and s.stage_order == ()
    listed = tuple(panel.stage_list.item(i).data(0x0100) for i in range(panel.stage_list.count()))
    assert listed == LLAMA_CPP_ORDER
    panel.findChild(QWidget, "order_transformers").click()
    assert panel.settings().order == "temperature_first"


def test_text_fields_parse_and_keep_the_last_valid_value(qtbot):
    panel = SamplerPanel()
    qtbot.addWidget(panel)
    edit = panel.texts["logit_bias"]
    edit.setText("cat: 3; #5: -inf")
    edit.editingFinished.emit()
    assert panel.settings().logit_bias == (("cat", 3.0), ("#5", -math.inf))
    edit.setText("no bias here")
    edit.editingFinished.emit()
    assert panel.settings().logit_bias == (("cat", 3.0), ("#5", -math.inf))
    with pytest.raises(ValueError):
        parse_bias("cat")


def test_every_control_has_a_help_tooltip(qtbot, tmp_path):
    panel = SamplerPanel()
    qtbot.addWidget(panel)
    panel.advanced.click()
    panel.resize(380, 1500)
    panel.show()
    controls = [
        w
        for kind in (QAbstractSpinBox, QComboBox, QLineEdit, QListWidget)
        for w in panel.findChildren(kind)
        if w.objectName() and not w.objectName().startswith("qt_")
    ]
    assert len(controls) > 30
    for w in controls:
        assert w.toolTip(), w.objectName()
    for name, w in panel.numbers.items():
        assert w.toolTip() == HELP[name]
    out = os.environ.get("DECODING_LAB_SHOTS", str(tmp_path))
    panel.grab().save(os.path.join(out, "sampler-panel-advanced.png"))


def test_method_panel_shows_only_the_methods_fields(qtbot):
    panel = MethodPanel()
    qtbot.addWidget(panel)
    panel.show()
    for method, shown in (
        (SAMPLING, set()),
        (BEAM, {"num_beams"}),
        (GROUP_BEAM, {"num_beams", "num_beam_groups", "diversity_penalty"}),
        (CONTRASTIVE, {"penalty_alpha", "contrastive_k"}),
    ):
        panel.set_current(method)
        for w in (panel.beams, panel.groups, panel.diversity, panel.alpha, panel.contrastive_k):
            assert w.isVisible() == (w.objectName() in shown), (method, w.objectName())
    panel.alpha.setValue(0.4)
    assert panel.request_options()["penalty_alpha"] == pytest.approx(0.4)
