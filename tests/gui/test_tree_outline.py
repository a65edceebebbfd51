"""Issue 54, item 5: the Tree tab at 1280x720. Its text column was ~215-241 px, so one branch
of a 120-token story wrapped into a column taller than the screen: the rows are one line each
now (the outline; "Whole text" wraps them), so the tree's shape shows. No divider of the plots
drags a pane to nothing. A row says nothing of "(+124 tokens)" (read as "124 tokens hidden");
its hover counts its tokens. Branches compare by their probability per token (by the total the
shortest always won), and a token the class chose in a live round is named in the hover."""

from dataclasses import replace

from PySide6.QtWidgets import QApplication

from engine.records import Candidate, Rewind, RunStarted, Step

STORY = ("the old dragon slept under the hill while the village waited for the spring rain "
         "and the children told stories of fire and gold")  # fmt: skip
WORDS = STORY.split()


def step(i: int, token: int, p: float = 0.8, **changes) -> Step:
    word = f" {WORDS[token % len(WORDS)]}"
    cands = tuple(Candidate(token + j, f"t{token + j}", p / (j + 1), p / (j + 1)) for j in range(3))
    return replace(Step(i, token, word, word, p, p, 1, cands, 3, 1.0, 1.0, 0.01, 10.0), **changes)


def story(window, tokens: int = 120):
    """A 120-token run on one prompt, then choices at steps 6, 31 and 81 (four leaves)."""
    store = window.store
    store.push(RunStarted("sampling", "Once upon a time, a dragon", 2))
    store.inbox.extend(step(i, 100 + i) for i in range(tokens))
    for at in (80, 30, 5):
        store.inbox.extend([Rewind(at), *(step(at + i, 500 + at + i, 0.6) for i in range(20))])
    window.drain()
    window.tabs.setCurrentWidget(window.plots.tree_view)
    window.tree.redraw(force=True)
    return store.tree, window.plots.tree_view


def rows(outline):
    out, item = [], outline.topLevelItem(0)
    while item is not None:
        out.append(item)
        item = outline.itemBelow(item)
    return out


def test_each_row_is_one_line_so_the_shape_fits_at_1280x720(qtbot, window):
    window.resize(1280, 720)
    tree, view = story(window)
    outline = view.outline
    QApplication.processEvents()
    line = outline.fontMetrics().lineSpacing()
    shown = rows(outline)
    assert len(shown) == 1 + 7  # the prompt; a stretch, then 3 forks of two rows each
    heights = [outline.visualItemRect(item).height() for item in shown]
    assert max(heights) <= 2 * line, heights  # one line each (wrapped: 24 lines and more)
    # the whole tree in the tab's height, nothing to scroll to see its shape
    last = outline.visualItemRect(shown[-1])
    assert last.bottom() <= outline.viewport().height(), (last.bottom(), outline.viewport())
    long_row = max(shown[1:], key=lambda i: len(i.text(0)))
    assert len(long_row.text(0)) > 200  # the whole text is the row's: on hover and wrapped
    view.whole_text.setChecked(True)  # the whole text, wrapped: the rows grow tall
    QApplication.processEvents()
    assert outline.visualItemRect(long_row).height() > 4 * line


def test_a_row_names_no_hidden_tokens_and_its_hover_counts_them(qtbot, window):
    tree, view = story(window)
    shown = rows(view.outline)[1:]
    assert not [i.text(0) for i in shown if "(+" in i.text(0) or "tokens)" in i.text(0)]
    first = shown[0]  # steps 1-5, the stretch before the first fork
    assert "5 tokens (steps 1–5)" in first.toolTip(0)
    assert "25 tokens (steps 6–30)" in first.child(0).toolTip(0)


def test_most_likely_compares_branches_per_token_and_says_so(qtbot, window):
    """A short branch of 50% tokens against a long one of 90% tokens: the short one has the
    larger total (25% against 9%), the long one is the likelier per token."""
    store = window.store
    store.push(RunStarted("sampling", "p", 2))
    store.inbox.extend([step(0, 1, 0.9), step(1, 2, 0.5)])  # short: 0.9 x 0.5
    store.inbox.extend([Rewind(1), *(step(1 + i, 10 + i, 0.9) for i in range(22))])  # long
    window.drain()
    window.tabs.setCurrentWidget(window.plots.tree_view)
    window.tree.redraw(force=True)
    tree, view = store.tree, window.plots.tree_view
    short = next(n for n in tree.leaves() if tree.nodes[n].depth == 2)
    long = next(n for n in tree.leaves() if tree.nodes[n].depth == 23)
    assert tree.nodes[short].path_logprob > tree.nodes[long].path_logprob
    view.most_likely.click()
    assert tree.cursor == long
    view.least_likely.click()
    assert tree.cursor == short
    assert "per token" in view.most_likely.toolTip() and "per token" in view.least_likely.toolTip()
    header = view.outline.headerItem()
    assert header.text(2) == "per token" and "geometric mean" in header.toolTip(2)
    assert "falls with every token" in header.toolTip(3)
    row = view.outline.currentItem()  # the short leaf's row: 50% per token... of its path
    assert row.text(2) == "67%" and row.text(3) == "45%"  # sqrt(0.45), and the total
    assert "per token" in view.info.text()


def test_the_class_s_choice_and_yours_are_named_in_the_row_hover(qtbot, window):
    store = window.store
    store.push(RunStarted("sampling", "p", 2))
    store.inbox.extend([step(0, 1), step(1, 2, forced=True, source="class"), step(2, 3)])
    store.inbox.extend([Rewind(1), step(1, 7, forced=True, source="forced"), step(2, 8)])
    window.drain()
    window.tree.redraw(force=True)
    first = window.plots.tree_view.outline.topLevelItem(0).child(0)
    class_row, own_row = first.child(0), first.child(1)
    assert "step 2: the class's choice" in class_row.toolTip(0)
    assert "step 2: chosen by you" in own_row.toolTip(0)
    assert "class" not in first.toolTip(0) and "chosen by" not in first.toolTip(0)
    assert class_row.toolTip(3) == class_row.toolTip(0)  # any cell of the row answers


def test_no_divider_of_the_plots_drags_a_pane_to_nothing(qtbot, window):
    window.resize(1280, 720)
    QApplication.processEvents()
    for split in (window.plots, window.plots.curves):
        assert not split.childrenCollapsible()
        total = sum(split.sizes())
        split.moveSplitter(0, 1)  # the handle dragged as far as it goes, each way
        QApplication.processEvents()
        assert min(split.sizes()) >= 40, split.sizes()
        split.moveSplitter(total + split.handleWidth(), 1)
        QApplication.processEvents()
        assert min(split.sizes()) >= 40, split.sizes()
    assert window.splitter.sizes()[0] > 200  # the prompt-and-output column (window.py's)
