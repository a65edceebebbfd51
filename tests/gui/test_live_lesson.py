"""The lesson "Be the model" in the window: each stage opens the live round (once), asks its
question in its mode on its own prompt, and the students who joined stay joined; the last
stage's class is the sampler and its token is marked as the class's choice."""

from __future__ import annotations

from conftest import load
from live_clients import Students

from engine.classroom.lessons import LESSONS_DIR, load_lesson
from engine.records import CLASS


def test_be_the_model_runs_guess_vote_and_sampler_as_live_stages(qtbot, window, tiny_dir):
    load(qtbot, window, tiny_dir)
    window.models.load_model = lambda *_a: None  # the tiny model stands in for SmolLM2
    live = window.live
    live.panel.set_addresses(["127.0.0.1"])
    lesson = load_lesson(LESSONS_DIR / "15-be-the-model.yaml")
    window.classroom.open_lesson(lesson)
    qtbot.waitUntil(lambda: live.round is not None and live.round.question is not None
                    and not window.runner.busy, timeout=30000)  # fmt: skip
    assert live.dock.isVisible() and live.server is not None
    assert "live round: guess the word" in window.classroom.panel.setup.text()
    q = live.round.question
    assert q.mode == "guess" and q.context == lesson.stages[0].prompt
    students = Students(f"http://127.0.0.1:{live.server.port}", live.round.code)
    try:
        students.join(["a", "b", "c"])
        qtbot.waitUntil(lambda: len(live.round.students) == 3, timeout=10000)
        students.send([{"guess": "the"}] * 3)
        qtbot.waitUntil(lambda: live.round.answered() == 3, timeout=10000)
        live.panel.reveal_button.click()
        qtbot.waitUntil(lambda: len(live.round.reveals) == 1 and not window.runner.busy,
                        timeout=30000)  # fmt: skip
        assert window.store.run.prompt == lesson.stages[0].prompt

        server, code = live.server, live.round.code
        window.classroom.panel.go_next()  # vote, on the stage's own prompt: a new run
        qtbot.waitUntil(lambda: live.round.question is not None and not window.runner.busy,
                        timeout=30000)  # fmt: skip
        assert live.server is server and live.round.code == code  # the same round
        assert live.round.question.mode == "vote" and len(live.round.question.choices) == 5
        assert live.round.question.context == lesson.stages[1].prompt
        assert window.store.steps == []  # the first stage's run left the screen

        window.classroom.panel.go_next()  # be the sampler
        qtbot.waitUntil(lambda: live.round.question is not None and not window.runner.busy
                        and live.round.question.mode == "sampler", timeout=30000)  # fmt: skip
        students.send([{"choice": 1}] * 3)
        qtbot.waitUntil(lambda: live.round.answered() == 3, timeout=10000)
        live.panel.reveal_button.click()
        qtbot.waitUntil(lambda: len(live.round.reveals) == 2 and not window.runner.busy,
                        timeout=30000)  # fmt: skip
        step = window.store.steps[-1]
        assert window.store.run.prompt == lesson.stages[2].prompt
        assert step.source == CLASS and step.token_id == live.round.reveals[-1].class_choice
        assert len(live.round.students) == 3  # nobody had to join again
    finally:
        window.classroom.close_lesson()
        live.end()
        students.close()
