"""The Score view (issue 25): a scored text's colours by rank match the engine's TextScore, a
click on a token shows that token's top-N in the Distribution tab, "branch here" sets the
prompt to the text before the token and takes the clicked alternative, and File > Score a
text… reads files bounded."""

import math

import pytest
from conftest import load, run
from PySide6.QtCore import QPoint, Qt
from PySide6.QtGui import QTextCursor, QTextDocument

from engine.tree.score import score_text
from gui.common.theme import bucket_of
from gui.score.actions import MAX_SCORE_FILE_BYTES, SCORE_TOP_N, read_text_file

TEXT, CONTEXT = "The cat sat on the mat, quietly.", "Story: "


def scored(qtbot, window, text=TEXT, prompt=CONTEXT):
    with qtbot.waitSignal(window.runner.job_done, timeout=60000):
        window.show_score(text, prompt)
    qtbot.waitUntil(lambda: not window.runner.busy, timeout=5000)
    return window.score


def span_colour(pane, i):
    a, _b = pane._spans[i]
    cursor = QTextCursor(pane.document())
    cursor.setPosition(a + 1)  # the format of the character after ``a``
    return cursor.charFormat().background().color().name()


def click_token(qtbot, pane, i):
    a, _b = pane._spans[i]
    cursor = QTextCursor(pane.document())
    cursor.setPosition(a)
    rect = pane.cursorRect(cursor)
    pane.ensureCursorVisible()
    qtbot.mouseClick(pane.viewport(), Qt.MouseButton.LeftButton, pos=rect.center() + QPoint(3, 0))


def test_colours_follow_the_engines_ranks(qtbot, window, tiny_dir):
    load(qtbot, window, tiny_dir)
    scoring = scored(qtbot, window)
    want = score_text(window.bundle, TEXT, prompt=CONTEXT)  # the engine's own reading
    assert scoring.view.isVisible() and not window.output.isVisible()
    # the most surprising token is picked and stays in the plot after the job's last redraw
    worst = max(range(len(want.tokens)), key=lambda i: want.tokens[i].surprisal)
    assert scoring.selected == worst and window.dist.step.token_id == want.tokens[worst].token_id
    window.set_presentation(True)
    qtbot.waitUntil(lambda: window.dist.step is not None and window.dist.step.source == "score")
    window.set_presentation(False)
    pane = scoring.view.pane
    assert len(pane._spans) == len(want.tokens)
    theme = window.theme
    got = [span_colour(pane, i) for i in range(len(want.tokens))]
    assert got == [theme.buckets[bucket_of(t.rank)].lower() for t in want.tokens]
    assert len({bucket_of(t.rank) for t in want.tokens}) > 1  # a random model: ranks vary
    plot = scoring.view.plot
    assert list(plot.values) == pytest.approx([t.surprisal for t in want.tokens], abs=1e-4)
    totals = scoring.view.totals.text()
    assert f"{want.total_logprob:.2f}" in totals and f"{want.perplexity:.2f}" in totals


def test_click_shows_that_tokens_top_n_and_branch_here(qtbot, window, tiny_dir):
    load(qtbot, window, tiny_dir)
    scoring = scored(qtbot, window)
    want = score_text(window.bundle, TEXT, prompt=CONTEXT, top_n=SCORE_TOP_N)
    k = max(range(len(want.tokens)), key=lambda i: want.tokens[i].rank)  # an unlikely token
    assert math.exp(want.tokens[k].logprob) < 0.001  # shown as "<0.1%" (escaped, or lost)
    click_token(qtbot, scoring.view.pane, k)
    assert scoring.view.pane.selected == k
    step = window.dist.step
    assert window.tabs.currentWidget() is window.plots.dist_box
    assert step.token_id == want.tokens[k].token_id and step.rank == want.tokens[k].rank
    assert [c.token_id for c in step.candidates] == [c[0] for c in want.tokens[k].top]
    assert [c.raw_prob for c in step.candidates] == pytest.approx(
        [c[2] for c in want.tokens[k].top], abs=1e-6
    )
    assert math.log(step.raw_prob) == pytest.approx(want.tokens[k].logprob, abs=1e-6)
    info = QTextDocument()  # the line above the plot, as drawn: "<0.1%" must not eat the rest
    info.setHtml(window.plots.dist_box.info.text())
    assert f"rank {want.tokens[k].rank}, surprisal {want.tokens[k].surprisal:.2f} bits" in (
        info.toPlainText()
    )
    shown = [r[1].token_id for r in window.dist.rows]
    assert shown[: window.dist.shown_n] == [c[0] for c in want.tokens[k].top][: window.dist.shown_n]
    # no sampler ran: the model's bars only, and the key says nothing of a sampler
    key = window.plots.dist_box.key
    assert "model" in key.text() and "sampler" not in key.text()
    assert len(window.dist.processed.opts["width"]) == 0 and len(window.dist.raw_kept.opts["width"])
    # branch here: the second-ranked alternative at token k
    alt = next(c[0] for c in want.tokens[k].top if c[0] != want.tokens[k].token_id)
    with qtbot.waitSignal(
        window.runner.job_done, timeout=60000, check_params_cb=lambda n: n == "branch"
    ):
        window.dist.bar_clicked.emit(k, alt)
    qtbot.waitUntil(lambda: not window.runner.busy, timeout=5000)
    window.drain()
    ids = window.bundle.tokenizer(TEXT, add_special_tokens=False)["input_ids"]
    assert window.prompt.toPlainText() == CONTEXT + window.bundle.tokenizer.decode(ids[:k])
    assert window.store.steps[0].token_id == alt and window.store.steps[0].forced
    assert not scoring.view.isVisible() and window.output.isVisible()
    window.select_step(0)  # a run's step again: its bars after the sampler, and their key
    assert "sampler" in key.text() and len(window.dist.processed.opts["width"]) > 0


def test_bar_click_on_a_run_still_takes_the_token(qtbot, window, tiny_dir):
    """The router gives run steps to the window's choose path, as before."""
    load(qtbot, window, tiny_dir)
    window.prompt.setPlainText("Hello")
    run(qtbot, window, window.generate)
    step = window.store.steps[2]
    alt = next(c.token_id for c in step.candidates if c.token_id != step.token_id)
    window.select_step(2)
    run(qtbot, window, lambda: window.dist.bar_clicked.emit(2, alt))
    assert window.store.steps[2].token_id == alt and window.store.steps[2].forced


def test_t5_scores_and_branches_only_at_the_first_token(qtbot, window, tiny_t5_dir):
    load(qtbot, window, tiny_t5_dir)
    scoring = scored(qtbot, window, "Guten Tag", "translate English to German: Good day")
    want = score_text(window.bundle, "Guten Tag", prompt="translate English to German: Good day")
    assert [s.token_id for s in scoring.steps] == [t.token_id for t in want.tokens]
    scoring.select(3)
    window.dist.bar_clicked.emit(3, want.tokens[3].top[1][0])
    assert "first token" in (window.last_error or "")
    assert not window.runner.busy and not window.store.steps


def test_files_are_read_bounded(tmp_path):
    ok = tmp_path / "ok.txt"
    ok.write_bytes(b"caf\xc3\xa9 \xff")  # UTF-8 with one stray byte
    assert read_text_file(ok) == "caf\u00e9 \ufffd"
    big = tmp_path / "big.txt"
    big.write_bytes(b"a" * (MAX_SCORE_FILE_BYTES + 1))
    with pytest.raises(ValueError, match="over"):
        read_text_file(big)


def test_nothing_to_score_is_refused(qtbot, window, tiny_dir):
    load(qtbot, window, tiny_dir)
    window.show_score("   ")
    assert not window.runner.busy and "Nothing to score" in window.last_error


def test_file_menu_has_score_a_text(window):
    file_menu = next(a.menu() for a in window.menuBar().actions() if a.text() == "&File")
    assert window.acts.score_text in file_menu.actions()


def test_a_long_title_wraps_instead_of_widening_the_column(qtbot):
    """At 1280x720 in the presentation view the title "Scored text by <model>" beside "Back to
    the run" made the middle column so wide that the window ran off the screen."""
    from PySide6.QtGui import QFont

    from gui.score.view import ScoreView

    view = ScoreView()
    qtbot.addWidget(view)
    font = QFont(view.font())
    font.setPointSize(22)  # the presentation view's size
    view.setFont(font)
    view.title.setText("<b>Scored text</b> by SmolLM2 135M Instruct (a long model name)")
    whole = view.title.fontMetrics().horizontalAdvance(view.title.text())
    assert view.minimumSizeHint().width() < min(420, whole)


@pytest.fixture(scope="module")
def chat_bos_dir(tmp_path_factory):
    """A tiny model whose tokenizer's BOS opens a chat turn, as SmolLM2-Instruct's does."""
    from word_models import save_word_model

    return save_word_model(tmp_path_factory.mktemp("models") / "chat-bos")


def test_no_context_marks_the_first_token_and_numbers_agree(qtbot, window, chat_bos_dir):
    """Issue 34, item 4: with no context the first token is marked and left out of the
    most-surprising pick; the header, the text's tooltip and the plot give a token the same
    number."""
    from gui.score.view import token_tooltip

    load(qtbot, window, chat_bos_dir)
    text = "the cat sat on a mat and the dog ran far"
    scoring = scored(qtbot, window, text, "")
    score = scoring.score
    assert score.no_context and score.unscored == 0
    surprise = [t.surprisal for t in score.tokens]
    assert scoring.selected == max(range(1, len(surprise)), key=surprise.__getitem__)
    info = QTextDocument()
    for k in (0, scoring.selected, len(surprise) - 1):
        scoring.select(k)
        info.setHtml(window.plots.dist_box.info.text())
        number = score.tokens[k].index + 1
        assert info.toPlainText().startswith(f"Scored token {number}:")
        assert scoring.view.plot.marker.value() == number  # the plot's axis: the same number
        assert f"Token {number}</b>" in token_tooltip(score.tokens[k])
        assert ("no context" in info.toPlainText()) == (k == 0)
    assert "no context" in scoring.view.totals.text()
    ctx = scored(qtbot, window, text, "a mat and")
    assert not ctx.score.no_context
    assert ctx.selected == max(
        range(len(ctx.score.tokens)), key=lambda i: ctx.score.tokens[i].surprisal
    )


def test_the_context_field_explains_itself(qtbot):
    from PySide6.QtWidgets import QLabel

    from gui.score.actions import ScoreDialog

    dialog = ScoreDialog(None)
    qtbot.addWidget(dialog)
    hint = dialog.findChild(QLabel, "score_context_hint")
    assert hint is not None and "start of a document" in hint.text()
    assert "no context" in hint.text() and "T5" in hint.text()


def test_a_rank_past_a_served_top_n_reads_as_a_bound():
    """SGLang lists only its top-N: a token outside them ranks at least N + 1, and says so."""
    from engine.tree.scored import ScoredToken
    from gui.score.view import describe_token, token_tooltip

    bound = ScoredToken(0, 7, " cat", -6.0, 21, 8.66, rank_bound=True)
    exact = ScoredToken(1, 8, " sat", -0.1, 1, 0.14)
    for said in (describe_token(bound), describe_token(bound, compact=True), token_tooltip(bound)):
        assert "rank ≥21" in said
    assert "rank 1," in describe_token(exact) and "≥" not in token_tooltip(exact)
