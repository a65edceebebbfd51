"""Issue 35 in the window: the status says when the grammar stopped a run or left its output
incomplete (and the JSON export carries it); a tree file continues in the context it records
(the chat template); a tree too large for the autosave is never dropped in silence."""

import json

import pytest
from conftest import load, run

from engine.records import RunStarted, Step
from engine.tree import RunTree
from gui.shell.window import MainWindow
from tiny_models import tiny_fast_tokenizer, tiny_llama


@pytest.fixture(scope="module")
def fast_dir(tmp_path_factory):
    """A tiny model with a fast (Rust) tokenizer: what the grammar stage needs."""
    path = tmp_path_factory.mktemp("models") / "tiny-fast"
    tiny_llama().save_pretrained(path)
    tiny_fast_tokenizer().save_pretrained(path)
    return path


def generate_with(qtbot, window, **changes):
    window.prompt.setPlainText("Answer:")
    window.sampler.set_settings(window.sampler.settings().with_(temperature=0.0, **changes))
    run(qtbot, window, window.generate)


def test_the_status_says_the_grammar_stopped_the_run(qtbot, window, fast_dir):
    load(qtbot, window, fast_dir)
    generate_with(qtbot, window, grammar='json:{"type": "boolean"}', min_new_tokens=8,
                  max_new_tokens=20)  # fmt: skip
    status = window.status_text.text()
    assert "stopped by the grammar" in status and "removed" in status, status
    assert window.store.summary.stop_reason == "grammar"
    assert "".join(s.text for s in window.store.steps) in ("true", "false")
    exported = json.loads(window.store.export("json", "tiny", {}))
    assert exported["ending"].startswith("stopped by the grammar")


def test_the_status_says_an_output_is_incomplete(qtbot, window, fast_dir):
    load(qtbot, window, fast_dir)
    generate_with(qtbot, window, grammar="regex:[a-z]{30}", max_new_tokens=3)
    assert "incomplete" in window.status_text.text()
    assert "incomplete" in window.store.export("md", "tiny", {})


def test_an_opened_tree_continues_with_the_chat_template_it_records(qtbot, window, tmp_path):
    tree = RunTree([5, 6], "Tell me a story")
    tree.add_child(0, 40, "a", 0.5, 0.5, -0.6931471805599453)
    data = tree.to_json()
    data["chat_template"] = True  # what `main.py tree` now writes for an instruct model
    path = tmp_path / "tree.json"
    path.write_text(json.dumps(data))
    assert window.tree.open_tree_file(str(path))
    assert window.store.track.key == ("Tell me a story", True)  # the window assumed False
    assert window.store.run.chat_template is True


def test_a_tree_too_large_for_the_autosave_is_told(qtbot, store, autosave, monkeypatch):
    """A tree over the tree file's bound was left out of the autosave without a word (one node
    after a restart). It still cannot be kept, but the user is told, now and at the restart."""
    import engine.tree.node as node

    monkeypatch.setattr(node, "MAX_NODES", 5)
    w = MainWindow(settings_store=store, autoload=False, autosave_path=autosave)
    qtbot.addWidget(w)
    w.store.push(RunStarted("sampling", "p", 2))
    for i in range(8):
        w.store.push(Step(i, 10 + i, f"t{i}", f"t{i}", 0.4, 0.5, 1, (), 6, 2.0, 1.0, 0.01, 9.0))
    w.store.drain()
    assert w.persistence.write_autosave()
    assert "8 nodes, more than a tree file holds (5)" in w.status_text.text()
    w.close()
    again = MainWindow(settings_store=store, autoload=False, autosave_path=autosave)
    qtbot.addWidget(again)
    assert len(again.store.steps) == 8
    assert "Its tree (8 nodes) was too large to keep" in again.status_text.text()
    again.close()
