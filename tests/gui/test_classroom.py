"""The classroom issue, item by item: zoom and the presentation view, undo, the comparison
table, restored runs, long prompts, beam search live, the distribution's labels, colours,
speed figures, and the smaller edges (shortcuts, method fields, special tokens)."""

import math
import time

import numpy as np
import pytest
from conftest import load, run
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QKeySequence, QTextFormat
from PySide6.QtWidgets import QApplication, QWidget

from engine import GenerationSession, SamplerSettings
from engine.records import BEAM, SAMPLING, SPEC_DRAFT, SPEC_NGRAM, Candidate, RunStarted, Step
from gui.common.theme import CUT_MARK, THEMES
from gui.shell.menus import shortcuts_html
from gui.shell.window import MainWindow


def set_settings(window, **changes):
    window.sampler.set_settings(window.sampler.settings().with_(**changes))


def settle(window, rounds: int = 10):
    for _ in range(rounds):
        QApplication.processEvents()
        time.sleep(0.01)
    window.drain()


def synthetic_step(i=0, n=30, chosen_rank=1, cut_from=None, cut_by="", special=False):
    """A step with ``n`` candidates; those ranked ``cut_from`` and below cut by ``cut_by``."""
    raw = np.linspace(1.0, 0.1, n)
    raw = raw / raw.sum()
    cands = []
    for r in range(1, n + 1):
        cut = cut_from is not None and r >= cut_from
        prob = 0.0 if cut else float(raw[r - 1]) * 1.2
        cands.append(Candidate(100 + r, f"tok{r}", float(raw[r - 1]), prob, cut_by if cut else ""))
    chosen = cands[chosen_rank - 1]
    survivors = (cut_from - 1) if cut_from else n
    return Step(
        i, chosen.token_id, chosen.text, chosen.text, chosen.raw_prob, chosen.prob, chosen_rank,
        tuple(cands), survivors, 4.0, 3.0, 0.02, 50.0, special=special,
    )  # fmt: skip


def show_steps(window, steps, method=SAMPLING):
    window.store.push(RunStarted(method, "p", 3))
    for s in steps:
        window.store.push(s)
    window.drain()
    window.views.redraw(busy=False)
    settle(window, 3)


# -- 1. zoom and the presentation view -------------------------------------------------------


def test_zoom_keys_work_on_every_keyboard_and_scale_the_plots(qtbot, window):
    start = window.font_pt
    qtbot.keyClick(window, Qt.Key.Key_Equal, Qt.KeyboardModifier.ControlModifier)  # US: Ctrl+=
    assert window.font_pt == start + 1
    qtbot.keyClick(window, Qt.Key.Key_Plus, Qt.KeyboardModifier.ControlModifier)
    keypad = Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.KeypadModifier
    qtbot.keyClick(window, Qt.Key.Key_Plus, keypad)
    assert window.font_pt == start + 3
    for plot in (window.dist, window.plots.speed, window.plots.entropy):
        tick = plot.getPlotItem().getAxis("bottom").style["tickFont"]
        assert tick.pointSize() == window.font_pt - 1
    assert window.plots.speed.getPlotItem().getAxis("left").label.font().pointSize() == (
        window.font_pt - 1
    )
    qtbot.keyClick(window, Qt.Key.Key_Minus, Qt.KeyboardModifier.ControlModifier)
    assert window.font_pt == start + 2
    qtbot.keyClick(window, Qt.Key.Key_0, Qt.KeyboardModifier.ControlModifier)
    assert window.font_pt == start


def test_presentation_view_text_is_at_least_20pt_at_1280x720(qtbot, window):
    window.resize(1280, 720)
    show_steps(window, [synthetic_step(i, chosen_rank=2, cut_from=6, cut_by="top-p 0.90")
                        for i in range(3)])  # fmt: skip
    qtbot.keyClick(window, Qt.Key.Key_F5)
    settle(window)
    assert window.presenting and window.strip.isVisible()
    assert not window.left.isVisible() and not window.prompt_box.isVisible()
    assert not window.plots.curves.isVisible()
    shown = [w for w in window.findChildren(QWidget) if w.isVisible()]
    small = [(type(w).__name__, w.objectName(), w.font().pointSizeF()) for w in shown
             if 0 < w.font().pointSizeF() < 20]  # fmt: skip
    assert not small, small
    dist = window.dist
    fonts = [dist.getPlotItem().getAxis(a).style["tickFont"] for a in ("left", "bottom")]
    fonts += [dist.getPlotItem().getAxis("bottom").label.font(), dist.cut_label.textItem.font()]
    fonts += [label.textItem.font() for label in dist.value_labels if label.isVisible()]
    assert min(f.pointSizeF() for f in fonts) >= 20
    # the cut is named in the plot, or beside the step's summary when the plot has no room
    said = dist.cut_label.toPlainText() + window.plots.dist_box.info.text()
    assert "top-p 0.90 cut here" in said
    window.set_zoom(window.font_pt + 4)  # the view grows with the zoom
    assert dist.getPlotItem().getAxis("left").style["tickFont"].pointSize() >= 24
    settle(window)
    bar = window.tabs.tabBar()  # every tab in the bar (its name shortened if it must be)
    rects = [bar.tabRect(i) for i in range(bar.count())]
    assert all(r.left() >= 0 and r.right() <= bar.width() for r in rects), rects
    qtbot.keyClick(window, Qt.Key.Key_F5)
    settle(window)
    assert not window.presenting and window.left.isVisible() and window.plots.curves.isVisible()
    assert window.tabs.usesScrollButtons()  # the normal view's bar is as it was


@pytest.mark.parametrize("size", [(1280, 720), (1366, 768)])
def test_normal_view_shows_every_tab_and_toolbar_button(qtbot, window, size):
    window.resize(*size)
    settle(window)
    bar = window.tabs.tabBar()
    for i in range(bar.count()):
        rect = bar.tabRect(i)
        assert rect.right() <= bar.width() and rect.width() >= bar.fontMetrics().horizontalAdvance(
            bar.tabText(i)
        ), bar.tabText(i)
    toolbar = window.findChild(QWidget, "main_toolbar")
    for action in (window.acts.generate, window.acts.stop, window.acts.step,
                   window.acts.continue_, window.acts.undo, window.acts.presentation):  # fmt: skip
        button = toolbar.widgetForAction(action)
        assert button is not None and button.isVisible(), action.text()
        assert button.geometry().right() <= toolbar.width()
    assert window.plots.width() >= 0.4 * window.width()  # the plots are not squeezed


def test_top_50_shows_fewer_rows_all_labelled_so_they_never_pile_up(qtbot, window):
    # issue 27: rather than bare bars between thinned labels, only the rows that can all be
    # labelled are shown (the likely tokens' labels are never hidden)
    window.resize(1280, 720)
    window.plots.dist_box.top_n.setValue(50)
    show_steps(window, [synthetic_step(0, n=50)])
    axis = window.dist.getPlotItem().getAxis("left")
    ticks = axis._tickLevels[0]
    labelled = [y for y, text in ticks if text]
    assert 5 <= len(labelled) < 50
    assert len(labelled) == len(ticks)  # every row shown is labelled
    view = window.dist.getPlotItem().getViewBox()
    rows_in_view = view.viewRange()[1][1] - view.viewRange()[1][0]
    pitch = view.height() / rows_in_view * (labelled[1] - labelled[0])
    assert pitch >= window.dist._tick_font.pointSizeF()  # at least a line apart


# -- 2. undo --------------------------------------------------------------------------------


def test_undo_puts_back_the_exact_records_without_a_stopped_message(qtbot, window, tiny_dir):
    load(qtbot, window, tiny_dir)
    set_settings(window, temperature=1.0, top_k=40, top_p=1.0, max_new_tokens=12, seed=3)
    window.prompt.setPlainText("undo me")
    run(qtbot, window, window.generate)
    original = list(window.steps)
    k = 4
    alt = next(c.token_id for c in original[k].candidates if c.token_id != original[k].token_id)
    run(qtbot, window, lambda: window.dist.bar_clicked.emit(k, alt))
    assert window.steps[k].forced
    set_settings(window, top_k=3)  # changed in between: must not recompute the old steps
    run(qtbot, window, window.undo)
    assert window.steps == original  # the same records: tokens, probabilities, sources, cuts
    assert not any(s.forced for s in window.steps)
    assert "stopped" not in window.status_text.text()
    assert window.store.choices.can_redo
    run(qtbot, window, window.redo)
    assert window.steps[k].token_id == alt and window.steps[k].forced


# -- 3. compare -----------------------------------------------------------------------------


def test_compare_rows_come_one_by_one_on_one_line_with_a_detail_pane(qtbot, window, tiny_dir):
    load(qtbot, window, tiny_dir)
    set_settings(window, temperature=0.0, max_new_tokens=24)
    window.prompt.setPlainText("compare these")
    seen_while_busy = []

    def watch():
        window.drain()
        if window.runner.busy:
            seen_while_busy.append(window.compare_view.table.rowCount())

    timer_probe = [0]
    with qtbot.waitSignal(window.runner.job_done, timeout=180000):
        window.run_comparison()
        while window.runner.busy and timer_probe[0] < 20000:
            watch()
            qtbot.wait(5)
            timer_probe[0] += 1
    qtbot.waitUntil(lambda: not window.runner.busy)
    window.drain()
    view = window.compare_view
    assert view.table.rowCount() >= 4
    assert any(0 < n < view.table.rowCount() for n in seen_while_busy)  # rows before the end
    line = view.table.fontMetrics().height()
    assert all(view.table.rowHeight(r) < 2.5 * line for r in range(view.table.rowCount()))
    out_col = view.table.columnCount() - 1
    assert view.table.columnWidth(out_col) > 100
    assert "\n" not in view.table.item(0, out_col).text()
    view.table.selectRow(1)
    assert view.results[1].text in view.detail.toPlainText()
    assert "compared" in view.status.text()


# -- 4. restored sessions -------------------------------------------------------------------


def test_restored_run_continues_and_steps(qtbot, store, autosave, tiny_dir):
    first = MainWindow(settings_store=store, autoload=False, autosave_path=autosave)
    qtbot.addWidget(first)
    first.show()
    load(qtbot, first, tiny_dir)
    set_settings(first, temperature=0.0, max_new_tokens=8)
    first.prompt_box.chat_template.setChecked(False)
    first.prompt.setPlainText("restore me")
    run(qtbot, first, first.generate)
    saved = list(first.steps)
    first.close()

    second = MainWindow(settings_store=store, autoload=False, autosave_path=autosave)
    qtbot.addWidget(second)
    second.show()
    assert second.store.restored and second.steps == saved
    assert len(saved[0].candidates) >= 20  # the full top-N, not the 5 of a lightened step
    assert all(len(s.candidates) == len(saved[0].candidates) for s in second.steps)
    load(qtbot, second, tiny_dir)
    assert second.acts.continue_.isEnabled() and second.acts.step.isEnabled()
    set_settings(second, max_new_tokens=4)
    run(qtbot, second, second.continue_run)
    assert len(second.steps) == 12 and second.steps[:8] == saved
    # what an uninterrupted greedy run would have written
    bundle = second.bundle
    ids = bundle.encode_prompt("restore me", use_chat_template=False)
    ref = GenerationSession(bundle.model, ids, SamplerSettings(temperature=0.0, max_new_tokens=12),
                            eos_token_ids=bundle.eos_token_ids)  # fmt: skip
    assert [s.token_id for s in second.steps] == [s.token_id for s in ref.stream()][:12]
    assert not second.store.restored
    run(qtbot, second, second.step_once)
    assert len(second.steps) == 13 and second.steps[:12] == second.pane.steps[:12]
    second.close()


# -- 5. long prompts ------------------------------------------------------------------------


def test_long_prompt_fills_a_progress_bar_and_close_is_quick(qtbot, window, tiny_dir, monkeypatch):
    import engine.step.stepper

    monkeypatch.setattr(engine.step.stepper, "PREFILL_CHUNK", 16)
    load(qtbot, window, tiny_dir)
    set_settings(window, temperature=0.0, max_new_tokens=3)
    window.prompt_box.chat_template.setChecked(False)
    window.prompt.setPlainText("a long prompt, " * 13)  # ~200 byte tokens: a dozen chunks
    fractions, messages, bar = [], [], []
    window.runner.fraction.connect(fractions.append)
    window.runner.fraction.connect(lambda _f: bar.append(window.busy_bar.maximum()))
    window.runner.progress.connect(messages.append)
    run(qtbot, window, window.generate)
    assert len(fractions) >= 10 and fractions == sorted(fractions) and fractions[-1] < 1.0
    assert any(m.startswith("Reading the prompt") for m in messages)
    assert bar and set(bar) == {1000}  # the bar was determinate while the prompt was read
    # closing in the middle of a long job returns within 2 s
    set_settings(window, max_new_tokens=100000)
    window.sampler.pacing.setValue(20)
    window.generate()
    qtbot.waitUntil(lambda: len(fractions) > 12 or bool(window.store.inbox), timeout=30000)
    began = time.perf_counter()
    window.close()
    assert time.perf_counter() - began < 2.0
    assert not window.runner.thread_running()


def test_stop_acts_between_prompt_chunks():
    """Closing the stream after the first chunk's progress record: no token is generated."""
    import engine.step.stepper
    from engine.records import Progress
    from tiny_models import tiny_llama

    old = engine.step.stepper.PREFILL_CHUNK
    engine.step.stepper.PREFILL_CHUNK = 16
    try:
        session = GenerationSession(tiny_llama(), list(range(3, 200)),
                                    SamplerSettings(temperature=0.0), eos_token_ids=[])  # fmt: skip
        stream = session.stream(5)
        assert isinstance(next(stream), Progress)
        stream.close()
    finally:
        engine.step.stepper.PREFILL_CHUNK = old
    assert session.history == [] and session.stop_reason == "stopped"


# -- 6. beam search live --------------------------------------------------------------------


def test_beam_search_streams_its_best_beam_and_draws_a_readable_tree(qtbot, window, tiny_dir):
    load(qtbot, window, tiny_dir)
    window.method.set_current(BEAM)
    set_settings(window, temperature=0.0, max_new_tokens=8)
    window.prompt.setPlainText("beam me")
    steps_before_result = []
    push = window.store.push

    def noting(record):
        from engine.records import BeamResult

        if isinstance(record, BeamResult):
            steps_before_result.append(sum(1 for r in window.store.inbox if isinstance(r, Step)))
        push(record)

    window.store.push = noting
    run(qtbot, window, window.generate)
    assert steps_before_result and (steps_before_result[0] > 0 or window.steps)
    assert window.steps and window.pane.steps == window.steps  # the output pane shows it
    x, _y = window.plots.entropy.curves["model"].getData()
    assert len(x) == len(window.steps)
    tree = window.beam_tree
    texts = [i.text() for i in tree.scene().items() if hasattr(i, "text")]
    assert "step 1" in texts and "step 2" in texts
    assert "log-probability" in window.plots.beam_panel.key.text()
    before = tree.transform().m11()
    tree.zoom(1.25)
    assert tree.transform().m11() == pytest.approx(before * 1.25)
    tree.fit()
    assert tree.follow


# -- 7. the distribution plot ---------------------------------------------------------------


def test_cut_marker_names_the_filter_and_bars_are_labelled(qtbot, window):
    window.resize(1600, 900)
    show_steps(window, [synthetic_step(0, n=30, chosen_rank=2, cut_from=8, cut_by="top-k 7")])
    dist = window.dist
    said = dist.cut_label.toPlainText() or window.plots.dist_box.info.text()
    assert "top-k 7 cut here: 7 kept" in said  # in the plot, or beside the summary
    values = dist.shown_values()
    assert values and all("%" in v for v in values) and any("✂" in v for v in values)
    hover = dist.describe(9)  # the 10th bar: cut
    assert "tok10" in hover and "id 110" in hover and "rank 10" in hover
    assert "removed by <b>top-k 7</b>" in hover
    assert "kept by every filter" in dist.describe(0)


def test_a_chosen_token_outside_the_top_n_gets_its_own_bar(qtbot, window):
    window.plots.dist_box.top_n.setValue(10)
    show_steps(window, [synthetic_step(0, n=30, chosen_rank=25)])
    rows = window.dist.rows
    assert len(rows) == 11 and rows[-1][2] == 25 and rows[-1][0] > 10  # below a gap
    assert window.dist.gap_line.isVisible()
    assert window.dist.chosen.opts["y"][0] == rows[-1][0]


def test_engine_names_the_first_filter_that_cut(tiny_dir):
    from tiny_models import tiny_llama

    model = tiny_llama()
    for settings, expected in (
        (SamplerSettings(temperature=1.0, top_k=7, top_p=1.0), "top-k 7"),
        (SamplerSettings(temperature=1.0, top_k=7, top_p=0.2), "top-p 0.20"),
    ):
        session = GenerationSession(model, [5, 6, 7], settings, eos_token_ids=[])
        step = session.step()
        first_cut = next(c for c in step.candidates if c.prob == 0)
        assert first_cut.cut_by == expected


# -- 8. colours -----------------------------------------------------------------------------


def _hue(color: str) -> float:
    return QColor(color).hsvHueF() * 360


def _contrast(a: str, b: str) -> float:
    def lum(c: str) -> float:
        q = QColor(c)
        ch = [x / 255 for x in (q.red(), q.green(), q.blue())]
        ch = [x / 12.92 if x <= 0.03928 else ((x + 0.055) / 1.055) ** 2.4 for x in ch]
        return 0.2126 * ch[0] + 0.7152 * ch[1] + 0.0722 * ch[2]

    hi, lo = sorted((lum(a), lum(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


@pytest.mark.parametrize("name", ["light", "dark"])
def test_palette_has_no_red_green_pair_and_cut_bars_stand_out(name):
    t = THEMES[name]
    colours = [*t.buckets, t.prob_low, t.prob_high, t.raw_bar, t.kept_bar, t.forced]

    def reddish(c):
        return QColor(c).hsvSaturationF() > 0.15 and (_hue(c) < 15 or _hue(c) > 345)

    def greenish(c):
        return QColor(c).hsvSaturationF() > 0.15 and 75 < _hue(c) < 150

    assert not (any(map(reddish, colours)) and any(map(greenish, colours)))
    assert _contrast(t.cut_bar, t.plot_bg) >= 3.0  # grey cut bars visible in both themes
    assert _contrast(t.chosen, t.plot_bg) >= 4.5
    assert _contrast(CUT_MARK, t.plot_bg) >= 2.5


def test_legends_sit_outside_the_data(qtbot, window):
    import pyqtgraph as pg

    for plot in (window.dist, window.plots.speed, window.plots.entropy):
        assert not [i for i in plot.scene().items() if isinstance(i, pg.LegendItem)]
    key = window.plots.dist_box.key  # one line, shortened to fit; the whole key as its tooltip
    assert "after sampler" in key.toolTip() and "model" in key.text()
    speed = window.plots.speed  # the key in the title, or (cut to the plot) whole on hover
    assert "running" in speed.title_text() or "running" in speed.toolTip()


# -- 9. speed -------------------------------------------------------------------------------


def test_speed_counts_decode_steps_and_status_agrees_with_the_plot(qtbot, window, tiny_dir):
    load(qtbot, window, tiny_dir)
    set_settings(window, temperature=0.0, max_new_tokens=10)
    window.prompt.setPlainText("speed")
    run(qtbot, window, window.generate)
    steps = window.steps
    assert steps[0].prefill and not any(s.prefill for s in steps[1:])
    _x, running = window.plots.speed.curves["running"].getData()
    assert math.isnan(running[0]) and np.isfinite(running[1:]).all()
    decode = [s.step_time for s in steps[1:]]
    assert steps[-1].tokens_per_s == pytest.approx(len(decode) / sum(decode))
    title = window.plots.speed.title_text()
    rate = f"{steps[-1].tokens_per_s:.1f} tok/s"
    assert rate in title + window.plots.speed.toolTip() and rate in window.rate_label.text()
    assert "first token" in window.rate_label.text()
    assert "2 to the power" in window.plots.entropy.toolTip()
    # with pacing on, the plot shows the paced rate and says so
    window.sampler.pacing.setValue(40)
    run(qtbot, window, window.generate)
    whole = window.plots.speed.title_text() + window.plots.speed.toolTip()
    assert "paced" in whole and "paced to 40" in window.rate_label.text()


# -- 10. smaller edges ----------------------------------------------------------------------


def test_help_lists_every_shortcut(qtbot, window):
    text = shortcuts_html(window.acts)
    for action in (window.acts.generate, window.acts.stop, window.acts.step, window.acts.undo,
                   window.acts.redo, window.acts.presentation, window.acts.zoom_in):  # fmt: skip
        for key in action.shortcuts():
            assert key.toString(QKeySequence.SequenceFormat.NativeText) in text
    assert "F5" in text and "Ctrl+=" in text


def test_method_panel_shows_only_the_fields_the_method_uses(qtbot, window):
    panel = window.method
    expected = {SAMPLING: (False, False, False), BEAM: (True, False, False),
                SPEC_NGRAM: (False, True, False), SPEC_DRAFT: (False, True, True)}  # fmt: skip
    for method, (beams, gamma, draft) in expected.items():
        panel.set_current(method)
        form = panel.form
        assert (form.isRowVisible(panel.beams), form.isRowVisible(panel.gamma),
                form.isRowVisible(panel.draft_row)) == (beams, gamma, draft), method  # fmt: skip


def test_a_chip_drawn_in_the_presentation_view_shrinks_back_with_the_text(qtbot, window):
    """A special token drawn while presenting kept the presentation's 16 pt in the normal view
    (its size was fixed when it was drawn)."""
    window.set_presentation(True)
    special = synthetic_step(1, special=True)
    special = Step(**{**special.__dict__, "token_str": "<|im_end|>", "text": "<|im_end|>"})
    show_steps(window, [synthetic_step(0), special])
    window.set_presentation(False)
    pane = window.pane
    cursor = pane.textCursor()
    cursor.setPosition(pane._spans[1][0] + 2)
    fmt = cursor.charFormat()
    assert fmt.background().color() == QColor(window.theme.muted)
    assert fmt.fontPointSize() == 0.0  # no size of its own: the pane's, two steps smaller


def test_special_tokens_are_grey_chips_that_can_be_hidden(qtbot, window):
    plain = synthetic_step(0)
    special = synthetic_step(1, special=True)
    special = Step(**{**special.__dict__, "token_str": "<|im_end|>", "text": "<|im_end|>"})
    show_steps(window, [plain, special])
    pane = window.pane
    assert "<|im_end|>" in pane.toPlainText()
    cursor = pane.textCursor()
    cursor.setPosition(pane._spans[1][0] + 2)
    fmt = cursor.charFormat()
    assert fmt.background().color() == QColor(window.theme.muted)
    # smaller than the pane's type, relative to it (no size of its own to outlive a change)
    assert fmt.property(QTextFormat.Property.FontSizeAdjustment) < 0 and not fmt.fontPointSize()
    window.output.special.setChecked(False)
    assert "<|im_end|>" not in pane.toPlainText() and pane.steps == window.steps
    window.output.special.setChecked(True)
    assert "<|im_end|>" in pane.toPlainText()
