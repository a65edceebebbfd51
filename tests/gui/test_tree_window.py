"""The run tree in the window (issue 25): the store builds it from the record stream, going to
a node shows its path, a restored run branches (no modal, the whole budget from the branch
point), the expansion job grows the same tree as the engine's expand, the autosave keeps the
tree, and the keys move the cursor."""

from dataclasses import replace

from conftest import load, run
from PySide6.QtCore import Qt

from engine.records import Candidate, Rewind, RunStarted, Step
from engine.tree import RunTree
from engine.tree.expand import ExpandOptions, expand
from gui.core.store import RunStore
from gui.shell.window import MainWindow


def step(i: int, token: int) -> Step:
    cands = tuple(Candidate(token + j, f"t{token + j}", 0.4 / (j + 1), 0.4 / (j + 1))
                  for j in range(6))  # fmt: skip
    return Step(i, token, f"<{token}>", f"t{token}", 0.4, 0.5, 1, cands, 6, 2.0, 1.0, 0.01, 10.0)


def shape(tree: RunTree) -> set[tuple[int, ...]]:
    """Every node as the token ids of its path: two trees with the same branches agree."""
    return {tuple(tree.path_ids(n)) for n in tree.nodes if n}


def set_settings(window, **changes):
    window.sampler.set_settings(window.sampler.settings().with_(**changes))


def test_store_builds_the_tree_and_keeps_every_branch():
    store = RunStore()
    store.push(RunStarted("sampling", "p", 2))
    store.inbox.extend(step(i, 10 + i) for i in range(4))
    store.drain()
    first_end = store.tree.cursor
    store.push(Rewind(2))  # a choice at step 2: the old steps 2, 3 stay in the tree
    store.inbox.extend([step(2, 99), step(3, 98)])
    store.drain()
    tree = store.tree
    assert shape(tree) >= {(10, 11, 12, 13), (10, 11, 99, 98)}
    assert len(tree.nodes) == 1 + 6
    assert tree.path_ids() == [s.token_id for s in store.steps] == [10, 11, 99, 98]
    assert tree.nodes[first_end].step.token_id == 13  # each node keeps its whole record
    assert tree.nodes[tree.cursor].step.candidates == step(3, 98).candidates
    store.push(RunStarted("sampling", "p", 2))  # the same prompt: a new branch, same tree
    store.inbox.extend([step(0, 10), step(1, 50)])
    store.drain()
    assert store.tree is tree and len(tree.nodes) == 8 and len(tree.nodes[1].children) == 2
    store.push(RunStarted("sampling", "another prompt", 2))
    store.push(step(0, 10))
    store.drain()
    assert store.tree is not tree and len(store.tree.nodes) == 2


def test_goto_shows_the_path_and_the_json_keeps_the_records():
    store = RunStore()
    store.push(RunStarted("sampling", "p", 2))
    store.inbox.extend([step(0, 1), step(1, 2), step(2, 3), Rewind(1), step(1, 7), step(2, 8)])
    store.drain()
    tree = store.tree
    old = next(n for n in tree.nodes if tree.path_ids(n) == [1, 2, 3])
    change = store.goto(old)
    assert store.text == tree.path_text(old) == "<1><2><3>"
    assert change.truncated and change.start == 1 and store.restored
    back = RunTree.from_json(tree.to_json())
    assert shape(back) == shape(tree) and back.nodes[old].step == tree.nodes[old].step
    assert back.nodes[0].text == "p"
    # the autosave's cached writer and to_json agree (the path's records are not repeated)
    import json

    cached = json.loads(store.track.json_text())
    assert cached == json.loads(json.dumps(tree.to_json(skip=set(store.track.path))))
    assert sum("step" in n for n in cached["nodes"]) == len(tree.nodes) - 1 - len(store.steps)


def _window(qtbot, store, autosave):
    w = MainWindow(settings_store=store, autoload=False, autosave_path=autosave)
    qtbot.addWidget(w)
    w.show()
    return w


def test_restored_run_branches_with_the_whole_budget(qtbot, store, autosave, tiny_dir):
    first = _window(qtbot, store, autosave)
    load(qtbot, first, tiny_dir)
    set_settings(first, temperature=0.0, max_new_tokens=6)
    first.prompt_box.chat_template.setChecked(False)
    first.prompt.setPlainText("branch me")
    run(qtbot, first, first.generate)
    saved = list(first.steps)
    assert len(saved) == 6
    first.close()

    second = _window(qtbot, store, autosave)
    load(qtbot, second, tiny_dir)
    assert second.store.restored and second.steps == saved
    other = next(c.token_id for c in saved[-1].candidates if c.token_id != saved[-1].token_id)
    run(qtbot, second, lambda: second.tree.choose_token(5, other))  # the last step of a full run
    assert second.last_error is None  # no "Generate first" modal
    steps = second.steps
    assert steps[:5] == saved[:5] and steps[5].token_id == other and steps[5].forced
    # the budget counts from the branch point: 6 new tokens, unless the model ended first
    assert len(steps) == 5 + 6 or steps[-1].is_eos
    assert shape(second.store.tree) >= {tuple(s.token_id for s in saved)}  # the old one stays
    assert not second.store.restored
    second.close()


def test_expand_job_equals_engine_expand_and_autosave_keeps_it(qtbot, store, autosave, tiny_dir):
    w = _window(qtbot, store, autosave)
    load(qtbot, w, tiny_dir)
    set_settings(w, temperature=0.0, max_new_tokens=3)
    w.prompt_box.chat_template.setChecked(False)
    w.prompt.setPlainText("grow")
    run(qtbot, w, w.generate)
    saved = list(w.steps)
    start = w.store.tree.path()[0]
    w.tree.goto(start)  # expand from the first token, beside the generated path
    opts = ExpandOptions(depth=2, max_children=3)
    run(qtbot, w, lambda: w.tree.expand(opts))
    # the engine's expand from the same node of a tree holding only that token
    first = w.store.tree.nodes[start]
    ref = RunTree(w.bundle.encode_prompt("grow", False), "grow")
    at = ref.add_child(0, first.token_id, first.text, first.raw_prob, first.prob, first.logprob)
    expand(w.bundle, ref, at, opts, w.sampler.settings())
    tree = w.store.tree
    generated = tuple(s.token_id for s in saved)
    along = {generated[:k] for k in range(1, len(generated) + 1)}
    assert shape(tree) == shape(ref) | along  # the generated tokens' nodes were reused
    probs = {tuple(tree.path_ids(n)): tree.nodes[n].raw_prob for n in tree.nodes if n}
    for n in ref.nodes:
        key = tuple(ref.path_ids(n))
        if n and key not in along:
            assert abs(probs[key] - ref.nodes[n].raw_prob) < 1e-6
    assert w.autosave()
    w.close()
    again = _window(qtbot, store, autosave)
    assert shape(again.store.tree) == shape(tree) and len(again.store.tree.nodes) == len(tree.nodes)
    assert again.store.tree.path_ids() == [s.token_id for s in again.steps]
    again.close()


def test_keys_move_the_cursor(qtbot, window):
    store = window.store
    store.push(RunStarted("sampling", "p", 2))
    store.inbox.extend([step(0, 1), step(1, 2), Rewind(1), step(1, 3)])
    window.drain()
    window.tabs.setCurrentWidget(window.plots.tree_view)
    window.tree.redraw(force=True)
    tree = store.tree
    outline = window.plots.tree_view.outline
    end = tree.cursor
    qtbot.keyClick(outline, Qt.Key.Key_Left)
    assert tree.cursor == tree.nodes[end].parent and store.text == "<1>"
    qtbot.keyClick(outline, Qt.Key.Key_Right)  # back down to where it came from
    assert tree.cursor == end and store.text == "<1><3>"
    qtbot.keyClick(outline, Qt.Key.Key_Up)  # the sibling made first
    assert store.text == "<1><2>" and tree.cursor != end
    qtbot.keyClick(outline, Qt.Key.Key_Down)
    assert tree.cursor == end
    assert window.plots.tree_view.outline.currentItem().text(0) == "<3>"


def test_the_live_session_follows_the_node_gone_to(qtbot, window, tiny_dir):
    load(qtbot, window, tiny_dir)
    set_settings(window, temperature=0.0, max_new_tokens=6)
    window.prompt_box.chat_template.setChecked(False)
    window.prompt.setPlainText("follow me")
    run(qtbot, window, window.generate)
    original = [s.token_id for s in window.steps]
    session = window.runner.workbench.session
    window.tree.goto(window.store.tree.path()[2])  # back to 3 tokens
    assert [s.token_id for s in window.steps] == original[:3]
    assert window.acts.continue_.isEnabled()
    set_settings(window, max_new_tokens=2)
    run(qtbot, window, window.continue_run)
    # the same session, cropped to 3 tokens, went on by 2 (greedy: the same tokens again)
    assert window.runner.workbench.session is session
    assert [s.token_id for s in session.history] == [s.token_id for s in window.steps]
    assert [s.token_id for s in window.steps] == original[:5]
    assert len(window.store.tree.nodes) == 1 + 6  # the nodes were reused, nothing added


def test_forks_select_the_steps_below_the_threshold(qtbot, window):
    store = window.store
    store.push(RunStarted("sampling", "p", 2))
    probs = [0.9, 0.2, 0.95, 0.1, 0.8]
    store.inbox.extend(
        replace(step(i, 10 + i), raw_prob=p, entropy_raw=0.5) for i, p in enumerate(probs)
    )
    window.drain()
    window.tree.set_thresholds(0.3, 5.0)
    window.tree.fork(True)
    assert window.views.selected == 1 and window.dist.step.index == 1
    window.tree.fork(True)
    assert window.views.selected == 3
    window.tree.fork(True)  # none after: stays
    assert window.views.selected == 3 and "No next fork" in window.status_text.text()
    window.tree.fork(False)
    assert window.views.selected == 1
    window.tree.set_thresholds(0.0, 0.4)  # every step's entropy passes 0.4 bits
    window.tree.fork(False)
    assert window.views.selected == 0


def test_tree_files_round_trip_and_a_bad_one_is_one_message(qtbot, window, tmp_path):
    store = window.store
    store.push(RunStarted("sampling", "a prompt", 2))
    store.inbox.extend([step(0, 1), step(1, 2), Rewind(1), step(1, 3)])
    window.drain()
    path = tmp_path / "tree.json"
    assert window.tree.save_tree(str(path))
    before = shape(store.tree)
    window.clear_output()
    assert store.tree is None
    assert window.tree.open_tree_file(str(path))
    assert shape(store.tree) == before and store.text == "<1><3>" and store.restored
    assert window.prompt.toPlainText() == "a prompt"
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "decoding-lab-tree/1", "prompt_ids": [], "nodes": [{"id": 5}]}')
    assert not window.tree.open_tree_file(str(bad))
    assert window.last_error.startswith("Could not open the tree") and "nodes" in window.last_error
    assert bad.read_text().startswith('{"format"')  # left as it was
    assert shape(store.tree) == before  # the tree shown stays


def test_the_tree_tab_draws_rows_colours_the_path_and_folds(qtbot, window):
    from gui.tree.view import NODE, prob_colour

    store = window.store
    store.push(RunStarted("sampling", "p", 2))
    chain = [replace(step(i, 10 + i), raw_prob=0.9) for i in range(4)]
    store.inbox.extend([*chain, Rewind(2), replace(step(2, 77), raw_prob=0.03)])
    window.drain()
    window.tabs.setCurrentWidget(window.plots.tree_view)
    window.tree.redraw(force=True)
    outline = window.plots.tree_view.outline
    # the prompt's row; under it one row for the stretch that does not fork, then the two
    # branches under that
    assert outline.topLevelItemCount() == 1 and outline.topLevelItem(0).childCount() == 1
    top = outline.topLevelItem(0).child(0)
    assert top.text(0) == "<10><11>" and "2 tokens (steps 1–2)" in top.toolTip(0)
    kids = [top.child(i) for i in range(top.childCount())]
    assert [k.text(0) for k in kids] == ["<12><13>", "<77>"]
    assert kids[1].background(1).color().name() == prob_colour(0.03) != prob_colour(0.9)
    assert kids[1].text(2) and kids[1].text(3) and kids[1].text(4)  # per token, path, log p
    assert top.font(0).bold() and kids[1].font(0).bold() and not kids[0].font(0).bold()
    assert outline.currentItem() is kids[1] and kids[1].data(0, NODE) == store.tree.cursor
    outline.collapseItem(top)  # fold: the branches hide, the tree is unchanged
    assert not top.isExpanded() and len(store.tree.nodes) == 6
    window.plots.tree_view.node_clicked.emit(kids[0].data(0, NODE))  # a click goes there
    assert store.text == "<10><11><12><13>"


def test_a_damaged_tree_in_the_autosave_is_set_aside_and_a_long_prompt_fits(qtbot, store, autosave):
    import json

    first = _window(qtbot, store, autosave)
    long_prompt = "word " * 4000  # 20,000 characters: more than a node's text may hold
    first.store.push(RunStarted("sampling", long_prompt, 2))
    first.store.inbox.extend([step(0, 1), step(1, 2), Rewind(1), step(1, 3)])
    first.drain()
    assert first.autosave()
    first.close()
    again = _window(qtbot, store, autosave)
    assert len(again.store.tree.nodes) == 4 and again.store.tree.nodes[0].text == long_prompt
    again.close()
    data = json.loads(autosave.read_text())
    data["tree"]["nodes"][1]["parent"] = 99
    autosave.write_text(json.dumps(data))
    third = _window(qtbot, store, autosave)
    assert third.store.tree is None and "tree" in third.status_text.text()
    assert list(autosave.parent.glob("autosave.json.broken-*"))  # kept for the user
    third.close()


def test_undo_and_redo_are_moves_on_a_path_the_engine_does_not_hold(qtbot, window):
    store = window.store
    store.push(RunStarted("sampling", "p", 2))
    store.inbox.extend([step(0, 1), step(1, 2), Rewind(1), step(1, 3)])
    window.drain()
    tree = store.tree
    end = tree.cursor
    first = tree.path()[0]
    window.tree.goto(first)
    window.tree.goto(tree.nodes[first].children[0])  # the first branch: <1><2>
    assert store.text == "<1><2>" and window.acts.undo.isEnabled()
    window.undo()
    assert tree.cursor == first and store.text == "<1>"
    window.undo()
    assert tree.cursor == end and not window.acts.undo.isEnabled()
    assert window.acts.redo.isEnabled()
    window.redo()
    window.redo()
    assert store.text == "<1><2>" and not window.acts.redo.isEnabled()


def test_expanding_from_the_prompt_reports_progress_and_stops(qtbot, window, tiny_dir):
    load(qtbot, window, tiny_dir)
    window.prompt_box.chat_template.setChecked(False)
    window.prompt.setPlainText("stop me")
    said = []
    window.runner.progress.connect(said.append)
    with qtbot.waitSignal(window.runner.busy_changed, timeout=10000):
        assert window.tree.expand(ExpandOptions(depth=8, max_children=6))
    qtbot.waitUntil(lambda: any("level 2" in s for s in said), timeout=60000)
    window.stop()
    qtbot.waitUntil(lambda: not window.runner.busy, timeout=60000)
    window.drain()
    nodes = len(window.store.tree.nodes) - 1
    assert "Expanded (stopped)" in window.status_text.text()
    assert 6 + 36 <= nodes < sum(6**d for d in range(1, 9))  # two levels at least, not all
    assert window.tabs.currentWidget() is window.plots.tree_view


def test_exports_carry_the_branches_of_the_tree():
    """File > Export: the JSON holds the tree (it reads back with both branches) and the web
    page draws it."""
    import json

    store = RunStore()
    store.push(RunStarted("sampling", "p", 2))
    store.inbox.extend([step(0, 1), step(1, 2), step(2, 3)])
    store.drain()
    settings = {"temperature": 1.0}
    store.inbox.extend([Rewind(1), step(1, 7), step(2, 8)])
    store.drain()
    data = json.loads(store.export("json", "m", settings))
    back = RunTree.from_json(data["tree"])
    assert shape(back) == shape(store.tree) and {(1, 2, 3), (1, 7, 8)} <= shape(back)
    page = store.export("html", "m", settings)
    assert 'class="tree-root"' in page and "t7" in page and "t2" in page
