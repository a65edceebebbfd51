"""Lessons, the guess round and the shared web page, wired into the window."""

from conftest import load, run

from engine.classroom.lessons import (
    ACTION_SCORE,
    ACTION_TREE,
    FOCUS_BEAM_TREE,
    FOCUS_COMPARE,
    FOCUS_INSIDE,
    bundled_lessons,
)


def test_every_shipped_lesson_stage_sets_the_window_up(qtbot, window, monkeypatch):
    loaded = []
    monkeypatch.setattr(window.models, "load_model", loaded.append)  # no model loads in this test
    monkeypatch.setattr(window.models, "load_draft", loaded.append)
    menu = next(a.menu() for a in window.menuBar().actions() if a.text() == "&Lessons")
    titles = [a.text() for a in menu.actions()]
    lessons = bundled_lessons()
    assert len(lessons) >= 8 and all(lesson.title in titles for lesson in lessons)
    for lesson in lessons:
        window.classroom.open_lesson(lesson)
        assert window.classroom.lesson_dock.isVisible()
        for i, stage in enumerate(lesson.stages):
            window.classroom.panel.go_to(i)
            assert window.classroom.stage is stage
            assert window.prompt.toPlainText() == stage.prompt
            assert window.method.current() == stage.method
            request = window._request(new_seed=False)
            assert request.settings == stage.settings, (lesson.title, stage.title)
            expected = {
                FOCUS_BEAM_TREE: window.plots.beam_panel,
                FOCUS_COMPARE: window.compare_view,
                FOCUS_INSIDE: window.inside.view,
            }
            if stage.action in (ACTION_TREE, ACTION_SCORE):
                continue  # the tree or score view may bring its own tab to the front
            assert window.tabs.currentWidget() is expected.get(stage.focus, window.plots.dist_box)
    assert loaded and all(isinstance(m, str) for m in loaded)


def test_a_malformed_lesson_file_names_its_line_and_field(qtbot, window, tmp_path, monkeypatch):
    shown = []
    monkeypatch.setattr(window, "show_error", shown.append)
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "title: Broken\nmodel: smollm2-135m\nstages:\n  - title: One\n    text: Hi\n"
        "    prompt: Hello\n    settings:\n      temprature: 0.5\n",
        encoding="utf-8",
    )
    assert not window.classroom.open_file(str(bad))
    assert shown and "line 8" in shown[0] and "temprature" in shown[0]
    assert "temperature" in shown[0]  # the suggestion
    assert not window.classroom.lesson_dock.isVisible()


def test_guess_round_reveal_makes_the_step_and_marks_the_guesses(qtbot, window, tiny_dir):
    load(qtbot, window, tiny_dir)
    window.sampler.set_settings(window.sampler.settings().with_(temperature=0.0))
    window.prompt.setPlainText("guess")
    window.classroom.show_guess_round()
    # guess the two most likely next tokens, found by a throwaway step
    run(qtbot, window, window.step_once)
    first = window.steps[0]
    window.clear_output()
    plain = [(rank, c.text) for rank, c in enumerate(first.candidates, 1)
             if c.text.isalnum() and rank <= 10]  # fmt: skip
    picked = [plain[0], plain[-1]]
    assert len({t.lower() for _r, t in picked}) == 2
    window.classroom.guess.guesses.setPlainText("\n".join(t for _r, t in picked))
    with qtbot.waitSignal(window.classroom.guess.revealed, timeout=60000):
        window.classroom.guess.reveal_button.click()
    qtbot.waitUntil(lambda: not window.runner.busy)
    assert len(window.steps) == 1 and window.steps[0].token_id == first.token_id
    round_ = window.classroom.guess.last_round
    ranks = sorted(r.rank for r in round_.results if r.rank is not None)
    assert ranks == sorted(r for r, _t in picked)
    assert window.dist.step is window.steps[0]
    marked = [v for v in window.dist.shown_values() if "guessed" in v]
    assert len(marked) == 2
    assert window.classroom.guess.board.total > 0


def test_share_a_run_as_a_web_page_from_the_window(qtbot, window, tiny_dir, tmp_path):
    load(qtbot, window, tiny_dir)
    window.prompt.setPlainText("share me")
    window.sampler.set_settings(window.sampler.settings().with_(max_new_tokens=6))
    run(qtbot, window, window.generate)
    path = tmp_path / "run.html"
    assert window.export("html", str(path))
    page = path.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and "share me" in page
    assert "<script src" not in page  # self-contained
    assert window.acts.share in window.menuBar().actions()[0].menu().actions()


def test_ending_a_lesson_gives_the_teacher_their_settings_back(qtbot, window, monkeypatch):
    from engine.classroom.lessons import bundled_lessons

    monkeypatch.setattr(window.models, "load_model", lambda *_a: None)
    mine = window.sampler.settings().with_(temperature=0.9, top_k=50, top_p=0.95,
                                           max_new_tokens=64)  # fmt: skip
    window.sampler.set_settings(mine)
    window.method.set_current("sampling")
    lesson = bundled_lessons()[0]
    window.classroom.open_lesson(lesson)
    window.classroom.panel.go_to(len(lesson.stages) - 1)  # a stage's own settings on the panel
    assert window.sampler.settings() != mine
    window.classroom.close_lesson()
    assert window.sampler.settings() == mine and window.method.current() == "sampling"
