"""Lesson stages that open a prepared tree or score a text, in the window
(``window.tree.open_tree(tree)``, ``window.score.show(text, prompt)``): most tests put recorders in
their place; one opens the shipped tree in the window's own tree view."""

import pytest

from engine.classroom.lessons import ACTION_SCORE, ACTION_TREE, bundled_lessons, load_stage_tree
from engine.tree import RunTree


def _multiverse_stages():
    for lesson in bundled_lessons():
        for i, stage in enumerate(lesson.stages):
            if stage.action in (ACTION_TREE, ACTION_SCORE):
                yield lesson, i, stage


@pytest.fixture
def quiet(window, monkeypatch):
    """No model loads, and errors are recorded instead of shown."""
    errors: list[str] = []
    monkeypatch.setattr(window.models, "load_model", lambda *_a, **_k: None)
    monkeypatch.setattr(window, "show_error", errors.append)
    return errors


def test_tree_and_score_stages_call_the_windows_views(qtbot, window, monkeypatch, quiet):
    trees, scores = [], []
    monkeypatch.setattr(window.tree, "open_tree", trees.append)
    monkeypatch.setattr(window.score, "show", lambda t, p="": scores.append((t, p)))
    seen = {ACTION_TREE: 0, ACTION_SCORE: 0}
    for lesson in {id(les): les for les, _i, _s in _multiverse_stages()}.values():
        calls = len(trees) + len(scores)
        window.classroom.open_lesson(lesson)  # applies the first stage
        for i, stage in enumerate(lesson.stages):
            if i:
                calls = len(trees) + len(scores)
                window.classroom.panel.go_to(i)
            assert window.classroom.stage is stage
            assert window.prompt.toPlainText() == stage.prompt
            if stage.action not in seen:  # a stage of another kind opens nothing
                assert len(trees) + len(scores) == calls
                continue
            seen[stage.action] += 1
            if stage.action == ACTION_TREE:
                tree = trees[-1]
                assert isinstance(tree, RunTree) and tree.nodes[0].text == stage.prompt
                assert len(tree.nodes) == len(load_stage_tree(stage).nodes)
                assert "Click a node" in window.status_text.text()
            else:
                assert scores[-1] == (stage.score_text, stage.prompt)
                assert "Click a token" in window.status_text.text()
            assert len(trees) + len(scores) == calls + 1
    assert seen[ACTION_TREE] == len(trees) >= 1 and seen[ACTION_SCORE] == len(scores) >= 1
    assert len({id(t) for t in trees}) == len(trees)  # a fresh copy for every opening
    assert not quiet


def test_a_tree_file_broken_after_loading_is_one_error_message(
    qtbot, window, monkeypatch, quiet, tmp_path
):
    from engine.classroom import lesson_files

    opened = []
    monkeypatch.setattr(window.tree, "open_tree", opened.append)
    lesson, i, stage = next(s for s in _multiverse_stages() if s[2].action == ACTION_TREE)
    (tmp_path / "trees").mkdir()
    (tmp_path / stage.tree_file).write_text('{"format": "something else"}', encoding="utf-8")
    monkeypatch.setattr(lesson_files, "RESOURCES_DIR", tmp_path)
    window.classroom.open_lesson(lesson)
    window.classroom.panel.go_to(i)
    assert not opened and len(quiet) >= 1
    assert stage.tree_file in quiet[-1] and "format" in quiet[-1]
    assert str(lesson.path) in quiet[-1] and "options.tree_file" in quiet[-1]


def test_the_windows_own_tree_view_opens_the_shipped_tree(qtbot, window, quiet):
    lesson, i, stage = next(s for s in _multiverse_stages() if s[2].action == ACTION_TREE)
    window.classroom.open_lesson(lesson)
    window.classroom.panel.go_to(i)
    qtbot.waitUntil(lambda: window.store.tree is not None and len(window.store.tree.nodes) > 1)
    shipped = load_stage_tree(stage)
    assert len(window.store.tree.nodes) == len(shipped.nodes)
    assert window.store.tree.nodes[0].text == stage.prompt
    assert "Click a node" in window.status_text.text() and not quiet


def test_a_stage_that_loads_its_model_scores_once_the_load_is_done(qtbot, window, monkeypatch):
    """The score view refuses while a job runs, so the stage waits for its model's load."""
    state = {"busy": False}
    monkeypatch.setattr(type(window.runner), "busy", property(lambda _r: state["busy"]))
    monkeypatch.setattr(window.models, "load_model", lambda *_a: state.update(busy=True))
    monkeypatch.setattr(window, "show_error", lambda m: pytest.fail(m))
    scores, trees = [], []
    monkeypatch.setattr(window.score, "show", lambda t, p="": scores.append((t, p)))
    monkeypatch.setattr(window.tree, "open_tree", trees.append)
    for action, calls in ((ACTION_SCORE, scores), (ACTION_TREE, trees)):
        lesson, i, stage = next(s for s in _multiverse_stages() if s[2].action == action)
        assert i == 0 and window.bundle is None  # so applying it starts loading the model
        window.classroom.open_lesson(lesson)
        assert state["busy"] and not calls
        state["busy"] = False
        window.jobs.on_busy(False)  # the load job ended
        if action == ACTION_SCORE:
            assert calls == [(stage.score_text, stage.prompt)]
        else:
            assert len(calls) == 1 and isinstance(calls[0], RunTree)
