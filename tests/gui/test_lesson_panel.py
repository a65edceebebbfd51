"""The lesson panel walks every shipped lesson; each stage's settings reach the real sampler
and method panels."""

import os
import shutil
from pathlib import Path

import pytest
from PySide6.QtWidgets import QApplication

from engine.classroom.lessons import bundled_lessons, parse_lesson
from engine.sampling.settings import SamplerSettings
from gui.classroom.lesson_panel import LessonPanel, apply_to_panels, setup_line
from gui.controls.method_panel import MethodPanel
from gui.controls.sampler_panel import SamplerPanel


@pytest.fixture(scope="module")
def lessons():
    return bundled_lessons()


def _keep(widget, name: str, tmp_path: Path) -> Path:
    shot = tmp_path / name
    QApplication.processEvents()  # let the wrapped labels take their new heights
    assert widget.grab().save(str(shot))
    keep = os.environ.get("DECODING_LAB_SCREENSHOTS")
    if keep:
        shutil.copy(shot, Path(keep) / name)
    return shot


def test_lesson_panel_walks_every_shipped_lesson(qtbot, lessons):
    panel = LessonPanel()
    qtbot.addWidget(panel)
    panel.resize(420, 640)
    panel.show()
    assert not panel.next.isEnabled() and not panel.back.isEnabled()
    for lesson in lessons:
        seen = []
        panel.stage_selected.connect(seen.append)
        with qtbot.waitSignal(panel.stage_selected) as blocker:
            panel.set_lesson(lesson)
        assert blocker.args == [lesson.stages[0]]
        for i, stage in enumerate(lesson.stages):
            assert panel.stage is stage
            shown = panel.text_plain()
            assert f"Stage {i + 1} of {len(lesson.stages)}" in shown
            assert lesson.title in shown and stage.title in shown
            first_words = " ".join(stage.text.split()[:6])
            assert first_words in " ".join(shown.split())
            assert panel.point_at.isVisible() == bool(stage.point_at)
            if stage.point_at:
                assert "Point at:" in panel.point_at.text()
            if stage.question:
                assert stage.question in shown
            assert panel.back.isEnabled() == (i > 0)
            assert panel.next.isEnabled() == (i < len(lesson.stages) - 1)
            if panel.next.isEnabled():
                qtbot.mouseClick(panel.next, qtbot_button())
        assert seen == list(lesson.stages)
        qtbot.mouseClick(panel.back, qtbot_button())
        assert seen[-1] is lesson.stages[-2] and panel.index == len(lesson.stages) - 2
        panel.stage_selected.disconnect(seen.append)


def qtbot_button():
    from PySide6.QtCore import Qt

    return Qt.MouseButton.LeftButton


def test_every_lesson_stage_applies_to_the_sampler_and_method_panels(qtbot, lessons):
    sampler, method = SamplerPanel(), MethodPanel()
    qtbot.addWidget(sampler)
    qtbot.addWidget(method)
    lost_somewhere = set()
    for lesson in lessons:
        for stage in lesson.stages:
            with qtbot.waitSignal(sampler.settings_changed) as blocker:
                lost = apply_to_panels(stage, sampler, method)
            lost_somewhere |= set(lost)
            shown = sampler.settings()
            assert blocker.args == [shown]
            assert shown == stage.settings, (lesson.title, stage.title)
            assert method.current() == stage.method
            assert method.beams.value() == stage.num_beams
            assert method.gamma.value() == stage.gamma
    # The sampler panel holds every SamplerSettings field now: no stage loses a setting.
    assert lost_somewhere == set()


def test_lesson_panel_resets_a_stage_and_scales_its_text(qtbot, lessons):
    panel = LessonPanel(text_pt=12)
    qtbot.addWidget(panel)
    panel.set_lesson(lessons[0], index=2)
    assert panel.index == 2
    with qtbot.waitSignal(panel.stage_selected) as blocker:
        panel.go_to(2)  # asking again re-applies the stage
    assert blocker.args == [lessons[0].stages[2]]
    panel.go_to(99)
    assert panel.index == len(lessons[0].stages) - 1
    panel.set_font_size(20)
    assert panel.text.font().pointSizeF() == 20 and panel.stage_title.font().bold()
    with qtbot.waitSignal(panel.closed):
        panel.close_button.click()


def test_lesson_setup_line_names_the_stage_settings():
    lesson = parse_lesson(
        "title: t\nmodel: tiny-t5\nstages:\n"
        "  - {title: a, text: b, prompt: 'number: 7', action: step, guess: true,\n"
        "     settings: {temperature: 0.7, top_p: 0.9, repetition_penalty: 1.2}}\n"
    )
    line = setup_line(lesson.stages[0])
    assert line == (
        "Set: Sampling, token by token, temperature 0.7, top-p 0.9, repetition penalty 1.2, "
        "guess round. Press Step."
    )
    assert lesson.stages[0].settings == SamplerSettings(
        temperature=0.7, top_p=0.9, repetition_penalty=1.2
    )


def test_lesson_panel_screenshots(qtbot, lessons, tmp_path):
    panel = LessonPanel()
    qtbot.addWidget(panel)
    panel.resize(460, 680)
    panel.show()
    panel.set_lesson(lessons[6], index=1)  # speculative decoding, drafts from the text
    shot = _keep(panel, "lesson-panel-speculative.png", tmp_path)
    assert shot.stat().st_size > 5_000
    panel.set_lesson(lessons[0], index=2)  # the guess round
    _keep(panel, "lesson-panel-guess.png", tmp_path)
