"""Issue 34, item 6: a temperature sweep kept top-k 40 and top-p 0.9 on without saying so.
The sweep dialog names the other stages that stay on at every value and offers "only this
setting" (the others off for the sweep's runs; the sampler panel's settings untouched)."""

from conftest import load, run
from PySide6.QtWidgets import QCheckBox, QLabel

from engine import GenerationSession
from engine.experiments.sweep import sweep
from gui.experiments.dialogs import SweepDialog

PROMPT = "Once upon a time"
BALANCED = dict(temperature=1.0, top_k=40, top_p=0.9, max_new_tokens=5, seed=7)


def test_the_dialog_names_what_stays_on(qtbot, window):
    settings = window.sampler.settings().with_(**BALANCED)
    dialog = SweepDialog(window, current=settings)
    qtbot.addWidget(dialog)
    said = dialog.findChild(QLabel, "sweep_also_on")
    only = dialog.findChild(QCheckBox, "sweep_only")
    assert said is not None and only is not None
    assert dialog.chosen()[0] == "temperature"
    assert "top-k 40" in said.text() and "top-p 0.9" in said.text()
    assert "temperature" not in said.text()  # the swept setting is not "also on"
    dialog.setting.setCurrentIndex(dialog.setting.findData("top_p"))
    assert "top-k 40" in said.text() and "top-p" not in said.text()
    only.setChecked(True)
    assert dialog.only_this() and "Off for the sweep" in said.text()
    plain = dialog
    plain.current = settings.with_(top_k=0, top_p=1.0)
    plain.setting.setCurrentIndex(plain.setting.findData("temperature"))
    assert "Nothing else is on" in said.text() and not plain.only_this()


def test_only_this_setting_turns_the_others_off_for_the_sweep_alone(qtbot, window, tiny_dir):
    load(qtbot, window, tiny_dir)
    window.prompt.setPlainText(PROMPT)
    window.prompt_box.chat_template.setChecked(False)
    window.sampler.random_seed.setChecked(False)
    window.sampler.set_settings(window.sampler.settings().with_(**BALANCED))
    before = window.sampler.settings()
    view = window.plots.experiments.sweep
    bundle = window.bundle

    def session(s):
        ids = bundle.encode_prompt(PROMPT, False)
        return GenerationSession.over(bundle, ids, s, top_n=1)

    for only in (False, True):
        run(qtbot, window, lambda o=only: window.experiments.sweep("temperature", [2.0], only=o))
        said = "Nothing else on" if only else "Also on"
        qtbot.waitUntil(lambda s=said: s in view.info.text(), timeout=5000)
        base = before.with_(top_k=0, top_p=1.0) if only else before
        want = sweep(session, base, "temperature", [2.0])[0]
        assert view.rows[0].token_ids == want.token_ids
        assert ("top-k 40" in view.info.text()) == (not only)
        assert window.sampler.settings() == before  # the panel's settings are not touched
