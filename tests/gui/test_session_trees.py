"""Issue 34, item 1 (a prepared tree is lost): the chat-template tick survives a restart and a
model load; a run with another prompt or template choice starts a new tree and keeps the old
one (the next run on the old key takes it back); the session's trees are listed, bounded, kept
in the autosave and openable; Clear can be undone."""

import pytest
from conftest import load, run
from word_models import save_word_model

from engine.records import Candidate, RunStarted, Step
from gui.shell.window import MainWindow


@pytest.fixture(scope="module")
def chat_dir(tmp_path_factory):
    return save_word_model(tmp_path_factory.mktemp("models") / "chat")


def _window(qtbot, store, autosave):
    w = MainWindow(settings_store=store, autoload=False, autosave_path=autosave)
    qtbot.addWidget(w)
    w.show()
    return w


def shape(tree):
    return {tuple(tree.path_ids(n)) for n in tree.nodes if n}


def step(i: int, token: int) -> Step:
    cands = tuple(Candidate(token + j, f"t{token + j}", 0.3, 0.3) for j in range(3))
    return Step(i, token, f"<{token}>", f"t{token}", 0.3, 0.3, 1, cands, 3, 1.0, 1.0, 0.01, 10.0)


def fake_run(window, prompt: str, tokens: list[int], chat: bool = False) -> None:
    window.store.push(RunStarted("sampling", prompt, 2, chat_template=chat))
    window.store.inbox.extend(step(i, t) for i, t in enumerate(tokens))
    window.drain()


def test_the_tick_and_the_tree_survive_a_restart_and_a_model_load(qtbot, store, autosave, chat_dir):
    first = _window(qtbot, store, autosave)
    load(qtbot, first, chat_dir)
    assert first.prompt_box.chat_template.isChecked()  # a model with a template ticks it
    first.prompt_box.chat_template.click()  # the teacher unticks it: a plain continuation
    first.prompt.setPlainText("once upon a time")
    first.sampler.set_settings(first.sampler.settings().with_(temperature=0.0, max_new_tokens=4))
    run(qtbot, first, first.generate)
    tree = first.store.tree
    nodes, path = shape(tree), tree.path_ids()
    first.close()

    second = _window(qtbot, store, autosave)
    load(qtbot, second, chat_dir)  # loading the model does not tick the template again
    assert not second.prompt_box.chat_template.isChecked()
    assert shape(second.store.tree) == nodes and second.store.tree.path_ids() == path
    restored = second.store.tree
    run(qtbot, second, second.generate)  # the same prompt and choice: the same tree
    assert second.store.tree is restored and shape(restored) == nodes
    assert not second.store.track.shelf.kept
    second.prompt_box.chat_template.click()  # ticked: another prompt the model reads
    run(qtbot, second, second.generate)
    assert second.store.tree is not restored and second.store.track.key[1]
    kept = second.store.track.shelf.kept
    assert [shape(k.tree) for k in kept] == [nodes]  # the old tree is kept, not replaced
    second.prompt_box.chat_template.click()  # unticked again: its tree comes back
    run(qtbot, second, second.generate)
    assert second.store.tree is restored and len(second.store.track.shelf.kept) == 1
    second.close()

    third = _window(qtbot, store, autosave)  # the kept tree is in the autosave too
    assert shape(third.store.tree) == nodes
    assert [k.chat_template for k in third.store.track.shelf.kept] == [True]
    rows = third.tree.trees.rows()
    assert [r.chat_template for r in rows] == [False, True] and rows[0].used_at is None
    third.tree.trees.open(third.store.track.shelf.kept[0])
    assert third.store.track.key == ("once upon a time", True)
    assert third.prompt_box.chat_choice is True and third.prompt.toPlainText() == "once upon a time"
    assert [shape(k.tree) for k in third.store.track.shelf.kept] == [nodes]
    third.close()


def test_the_list_keeps_the_last_twenty_and_says_which_it_dropped(qtbot, window):
    from engine.validate.limits import MAX_SESSION_TREES

    for n in range(MAX_SESSION_TREES + 2):
        fake_run(window, f"prompt {n}", [10 + n, 20])
    track = window.store.track
    rows = window.tree.trees.rows()
    assert len(rows) == MAX_SESSION_TREES
    assert [r.prompt for r in rows] == [f"prompt {n}" for n in range(21, 1, -1)]
    window.tree.trees.report()  # on the display clock
    said = window.status_text.text()
    assert "last 20" in said and "prompt 0" in said and "prompt 1" in said
    assert not track.shelf.dropped


def test_clear_is_undone(qtbot, window):
    fake_run(window, "p", [1, 2, 3])
    tree, text = window.store.tree, window.store.text
    window.clear_output()
    assert window.store.tree is None and window.acts.undo.isEnabled()
    assert "Undo" in window.status_text.text()
    window.undo()
    assert window.store.tree is tree and window.store.text == text
    assert not window.store.track.shelf.kept  # back on screen, not listed twice
    fake_run(window, "p", [1, 5])  # a new run after Clear: a fresh tree (Clear meant it)
    window.clear_output()
    fake_run(window, "p", [7])
    assert len(window.store.tree.nodes) == 2


def test_the_autosave_reads_the_kept_trees_back_and_names_a_damaged_one(tmp_path):
    import json

    from engine.validate import InputError
    from engine.validate.autosave import parse_autosave
    from gui.core.store import RunStore

    store = RunStore()
    for prompt, chat in (("a", False), ("b", True), ("c", False)):
        store.push(RunStarted("sampling", prompt, 2, chat_template=chat))
        store.inbox.extend([step(0, 1), step(1, 2)])
        store.drain()
    text = store.autosave_text({"editor_prompt": "c"})
    saved = parse_autosave(text)
    assert [(s.tree.nodes[0].text, s.chat_template) for s in saved.trees] == [
        ("a", False),
        ("b", True),
    ]
    assert all(shape(s.tree) == {(1,), (1, 2)} for s in saved.trees)
    again = RunStore()
    again.restore_saved(saved)
    assert [k.key for k in again.track.shelf.kept] == [("a", False), ("b", True)]
    data = json.loads(text)
    data["trees"][1]["tree"]["nodes"][1]["parent"] = 7
    with pytest.raises(InputError, match=r"trees\[1\]"):
        parse_autosave(json.dumps(data))


def test_the_trees_dialog_lists_and_opens_a_kept_tree(qtbot, window):
    from PySide6.QtCore import QTimer

    fake_run(window, "first prompt", [1, 2, 3])
    first = window.store.tree
    fake_run(window, "second prompt", [4, 5], chat=True)
    seen = []

    def pick() -> None:
        dialog = window.tree.trees.dialog
        if dialog is None or not dialog.isVisible():
            QTimer.singleShot(20, pick)
            return
        table = dialog.table
        seen.extend([table.item(r, c).text() for c in range(4)] for r in range(table.rowCount()))
        table.selectRow(1)
        dialog.accept()

    QTimer.singleShot(20, pick)
    window.tree.trees.ask()
    assert seen == [["second prompt", "yes", "2", "1"], ["first prompt", "no", "3", "1"]]
    assert window.store.tree is first and window.prompt.toPlainText() == "first prompt"
    assert [k.key for k in window.store.track.shelf.kept] == [("second prompt", True)]


def test_file_export_carries_the_tree_even_from_the_prompt(qtbot, window, tmp_path):
    """File > Export run as JSON / as web page: every branch, also when the node stood on is
    the prompt (a tree expanded from it, no run shown)."""
    import json

    from engine.tree import RunTree

    fake_run(window, "p", [1, 2, 3])
    fake_run(window, "p", [1, 7])
    window.tree.goto(0)
    assert window.store.steps == []
    assert window.export("json", str(tmp_path / "run.json"))
    data = json.loads((tmp_path / "run.json").read_text())
    assert shape(RunTree.from_json(data["tree"])) == shape(window.store.tree)
    assert window.export("html", str(tmp_path / "run.html"))
    page = (tmp_path / "run.html").read_text()
    assert 'class="tree-root"' in page and "&lt;7&gt;" in page and "&lt;3&gt;" in page
