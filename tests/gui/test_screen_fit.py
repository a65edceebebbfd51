"""The window a class sees fits a 1280x720 projector whatever a lesson opens: every bundled
lesson, in the normal and the presentation view, leaves the window no wider than the screen
(a lesson's dock opened as a column more and pushed it to 1431 px; the Sample N× page's key
made the presentation view's plots 740 px wide), and ending the lesson gives the width back."""

from __future__ import annotations

from engine.classroom.lessons import bundled_lessons

SCREEN = (1280, 720)


def settle(qtbot, window) -> None:
    qtbot.wait(50)


def test_every_lesson_fits_a_1280_screen_in_both_views(qtbot, window, monkeypatch):
    monkeypatch.setattr(window.models, "load_model", lambda *_a: None)  # no model loads here
    monkeypatch.setattr(window.models, "load_draft", lambda *_a: None)
    window.resize(*SCREEN)
    settle(qtbot, window)
    seen = {}
    for presenting in (False, True):
        window.set_presentation(presenting)
        for lesson in bundled_lessons():
            window.classroom.open_lesson(lesson)
            settle(qtbot, window)
            assert window.classroom.lesson_dock.isVisible()
            seen[(lesson.title, presenting)] = (window.width(), window.minimumSizeHint().width())
        window.classroom.close_lesson()
        settle(qtbot, window)
        assert window.width() <= SCREEN[0]
    window.set_presentation(False)
    too_wide = {k: v for k, v in seen.items() if max(v) > SCREEN[0]}
    assert len(seen) == 2 * len(bundled_lessons()) and not too_wide, too_wide


def test_a_lesson_is_a_tab_beside_the_controls(qtbot, window, monkeypatch):
    monkeypatch.setattr(window.models, "load_model", lambda *_a: None)
    window.classroom.open_lesson(bundled_lessons()[0])
    window.classroom.show_guess_round()
    settle(qtbot, window)
    tabbed = window.tabifiedDockWidgets(window.controls_dock)
    assert window.classroom.lesson_dock in tabbed and window.classroom.guess_dock in tabbed
