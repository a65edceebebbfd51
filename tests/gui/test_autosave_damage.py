"""Issue 24, items 1 and 2: a damaged autosave never stops the window from starting, is never
thrown away silently, and is never overwritten: it is moved aside and the status bar says so."""

import json

import pytest

from gui.shell.window import MainWindow

GOOD_STEP = {
    "index": 0, "token_id": 5, "text": "a", "token_str": "a", "raw_prob": 0.5, "prob": 0.5,
    "rank": 1, "survivors": 3, "entropy_raw": 1.0, "entropy": 1.0, "step_time": 0.01,
    "tokens_per_s": 10.0,
    "candidates": [{"token_id": 5, "text": "a", "raw_prob": 0.5, "prob": 0.5, "cut_by": ""}],
}  # fmt: skip


def _save(**change):
    data = {"format": "decoding-lab-autosave/1", "editor_prompt": "p", "settings": {},
            "method": "sampling", "prompt": "p", "steps": [dict(GOOD_STEP)]}  # fmt: skip
    data.update(change)
    return json.dumps(data)


def _bad_candidate():
    step = dict(GOOD_STEP, candidates=[dict(GOOD_STEP["candidates"][0], prob=None)])
    return _save(steps=[step])


DAMAGED = {
    "prompt is a number": _save(prompt=12, editor_prompt=13),
    "candidate probability null": _bad_candidate(),
    "rank is a string": _save(steps=[dict(GOOD_STEP, rank="first")]),
    "steps is an object": _save(steps={"0": GOOD_STEP}),
    "settings out of range": _save(settings={"temperature": -3}),
    "deep nesting": '{"format": "decoding-lab-autosave/1", "steps": '
    + "[" * 100_000
    + "]" * 100_000
    + "}",
    "truncated": _save()[:-40],
    "garbage": "\x00\xff garbage {{{",
    "not an object": "[1, 2, 3]",
}


@pytest.mark.parametrize("case", list(DAMAGED))
def test_damaged_autosave_is_moved_aside_and_the_window_starts(qtbot, store, autosave, case):
    autosave.write_text(DAMAGED[case], encoding="utf-8", errors="surrogateescape")
    original = autosave.read_bytes()
    w = MainWindow(settings_store=store, autoload=False, autosave_path=autosave)
    qtbot.addWidget(w)
    assert not w.restored_from_autosave and not w.store.steps
    copies = list(autosave.parent.glob("autosave.json.broken-*"))
    assert len(copies) == 1 and copies[0].read_bytes() == original  # kept, byte for byte
    status = w.status_text.text()
    assert "could not be read" in status and str(copies[0]) in status
    w.prompt.setPlainText("a new session")
    w.close()  # writes a fresh autosave; the broken copy stays as it was
    assert copies[0].read_bytes() == original
    assert json.loads(autosave.read_text())["editor_prompt"] == "a new session"


def test_unreadable_autosave_that_cannot_be_moved_is_never_overwritten(
    qtbot, store, autosave, monkeypatch
):
    from engine.validate import autosave as autosave_io

    autosave.write_text("{ truncated", encoding="utf-8")

    def refuse(path):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(autosave_io, "move_aside", refuse)
    w = MainWindow(settings_store=store, autoload=False, autosave_path=autosave)
    qtbot.addWidget(w)
    assert "left untouched" in w.status_text.text()
    w.prompt.setPlainText("typed")
    assert not w.autosave()
    w.close()
    assert autosave.read_text() == "{ truncated"


def test_good_autosave_still_restores(qtbot, store, autosave):
    autosave.write_text(_save(), encoding="utf-8")
    w = MainWindow(settings_store=store, autoload=False, autosave_path=autosave)
    qtbot.addWidget(w)
    assert w.restored_from_autosave and [s.token_id for s in w.store.steps] == [5]
    assert not list(autosave.parent.glob("autosave.json.broken-*"))
    w.close()


def test_opening_an_autosave_does_not_write_it_again(qtbot, store, autosave):
    """Restoring sets the prompt and settings, which schedule an autosave; the file already
    holds what the window shows, and rewriting a long run froze the window for seconds right
    after it opened. An edit still schedules one."""
    autosave.write_text(_save(), encoding="utf-8")
    w = MainWindow(settings_store=store, autoload=False, autosave_path=autosave)
    qtbot.addWidget(w)
    assert w.restored_from_autosave
    assert not w.persistence.timer.isActive()
    w.prompt.setPlainText("edited")
    assert w.persistence.timer.isActive()
    w.close()
