"""The Experiments tab end to end on tiny models: what the views show is what the engine
computes on its own (the step sample, the sweep, the variation), sweep rows reach the Compare
tab, and a lockstep against a model with another tokenizer is one message, nothing lost."""

from dataclasses import replace
from pathlib import Path

import pytest
from conftest import load, run
from PySide6.QtGui import QFontMetrics
from transformers import ByT5Tokenizer

from engine import GenerationSession
from engine.classroom.lessons import load_lesson
from engine.experiments.lesson import run_stage
from engine.experiments.step_sample import sample_step
from engine.experiments.sweep import sweep, variation
from tiny_models import tiny_llama

PROMPT = "Hello there"
LESSONS = Path(__file__).resolve().parents[2] / "resources" / "lessons"


def set_settings(window, **changes):
    window.sampler.set_settings(window.sampler.settings().with_(**changes))


def engine_session(window, settings, prefix=()):
    """A session built here, not by the window's code: the prompt and the tokens so far."""
    bundle = window.bundle
    ids = bundle.encode_prompt(PROMPT, False)
    return GenerationSession(
        bundle.model, [*ids, *prefix], settings, tokenizer=bundle.tokenizer,
        eos_token_ids=bundle.eos_token_ids, top_n=1,
    )  # fmt: skip


def wait_drawn(qtbot, condition):
    qtbot.waitUntil(condition, timeout=5000)  # the controller's redraw timer


@pytest.fixture
def ready(qtbot, window, tiny_dir):
    load(qtbot, window, tiny_dir)
    window.prompt.setPlainText(PROMPT)
    window.prompt_box.chat_template.setChecked(False)
    window.sampler.random_seed.setChecked(False)
    set_settings(window, temperature=1.0, top_k=30, max_new_tokens=6, seed=3)
    return window


def test_the_histogram_shows_the_jobs_counts_and_draw_more_adds_up(qtbot, ready):
    w = ready
    run(qtbot, w, w.generate)
    steps = list(w.store.steps)
    view = w.plots.experiments.histogram
    run(qtbot, w, lambda: w.experiments.sample(1000))
    wait_drawn(qtbot, lambda: view.sample is not None)
    # The engine on its own: the last step's context, the same settings and seed.
    settings = w.sampler.settings()
    prefix = [s.token_id for s in steps[:-1]]
    expected = sample_step(engine_session(w, settings, prefix), 1000, seed=settings.seed)
    assert view.sample.n == 1000
    shown = view.shown()
    by_token = {r.token_id: (r.prob, r.count) for r in expected.rows}
    assert len(shown) > 3
    for token_id, prob, count in shown:
        if token_id is not None:  # None: the "(all others)" row
            assert by_token[token_id] == (pytest.approx(prob, abs=1e-5), count)
    assert sum(c for _t, _p, c in shown) == 1000
    # The bars are the run's own after-sampler probabilities of that step.
    last = {c.token_id: c.prob for c in steps[-1].candidates}
    for row in view.sample.rows:
        if row.token_id in last:
            assert row.prob == pytest.approx(last[row.token_id], abs=1e-5)
    assert f"{view.sample.tv:.3f}" in view.info.text() and "p-value" in view.info.text()
    before = {r.token_id: r.count for r in view.sample.rows}
    run(qtbot, w, lambda: w.experiments.draw_more(1000))
    wait_drawn(qtbot, lambda: view.sample.n == 2000)
    after = {r.token_id: r.count for r in view.sample.rows}
    assert all(after.get(t, 0) >= c for t, c in before.items())
    assert [c.n for c in view.sample.checkpoints] == [10, 100, 1000, 2000]
    assert len(w.store.steps) == len(steps)  # the run is untouched
    # Another step in view: "draw more" starts a fresh histogram of that step.
    w.select_step(1)
    run(qtbot, w, lambda: w.experiments.draw_more(1000))
    wait_drawn(qtbot, lambda: view.sample.n == 1000)
    assert "at step 2" in view.info.text()


def test_sweep_rows_reach_the_compare_tab(qtbot, ready):
    w = ready
    values = [0.0, 0.7, 1.5]
    run(qtbot, w, lambda: w.experiments.sweep("temperature", values))
    wait_drawn(qtbot, lambda: len(w.plots.experiments.sweep.rows) == 3)
    settings = w.sampler.settings()
    expected = sweep(lambda s: engine_session(w, s), settings, "temperature", values)
    table = w.compare_view.table
    assert table.rowCount() == 3
    for r, row in enumerate(expected):
        assert table.item(r, 0).text() == f"temp {row.value:g}"
        assert table.item(r, table.columnCount() - 1).text() == " ".join(row.text.split())
    shown = w.plots.experiments.sweep.rows
    assert [x.token_ids for x in shown] == [x.token_ids for x in expected]
    assert w.plots.experiments.sweep.table.item(1, 1).text() == f"{expected[1].logprob:.1f}"
    pane = w.plots.experiments.sweep.outputs.toPlainText()  # each output whole, in order
    at = [pane.index(" ".join(row.text.split())) for row in expected]
    assert at == sorted(at)


def test_variation_groups_equal_the_engines(qtbot, ready):
    w = ready
    run(qtbot, w, lambda: w.experiments.variation(10))
    view = w.plots.experiments.variation
    wait_drawn(qtbot, lambda: view.result is not None)
    settings = w.sampler.settings()
    expected = variation(lambda s: engine_session(w, s), settings, 10)
    assert view.groups() == [(c.count, c.diverges_at, c.text) for c in expected.continuations]
    assert view.table.rowCount() == expected.distinct
    assert f"{expected.distinct}</b> different" in view.info.text()


def test_lockstep_mismatch_is_one_message_and_nothing_is_lost(qtbot, ready, tmp_path):
    w = ready
    run(qtbot, w, w.generate)
    steps = list(w.store.steps)
    view = w.plots.experiments.lockstep
    run(qtbot, w, lambda: w.experiments.lockstep("same-bf16", 5))
    wait_drawn(qtbot, lambda: len(view.steps) == 6)
    assert view.table.rowCount() == 6 and "mean KL" in view.info.text()
    other = tmp_path / "other-tokenizer"
    tiny_llama(seed=9).save_pretrained(other)
    ByT5Tokenizer(extra_ids=0).save_pretrained(other)
    run(qtbot, w, lambda: w.experiments.lockstep(str(other), 5))
    wait_drawn(qtbot, lambda: view.message.isVisible())
    assert "different tokenizers" in view.message.text()
    assert w.last_error is None  # one message, in the view: no dialog
    assert len(view.steps) == 6 and view.table.rowCount() == 6  # the earlier result stays
    assert [s.token_id for s in w.store.steps] == [s.token_id for s in steps]


def test_float32_vs_int8_vs_int4_is_one_lockstep_choice(qtbot, ready, tiny_dir):
    """A's own weights in int8 and in int4 score the text A writes: the table and the solid
    curves are int8's, the dashed ones int4's; each equals the engine's own lockstep."""
    from engine.experiments.lockstep import Lockstep
    from engine.models.loading import load_model

    w = ready
    view = w.plots.experiments.lockstep
    run(qtbot, w, lambda: w.experiments.lockstep("same-quant", 5))
    wait_drawn(qtbot, lambda: len(view.steps) == 6 and len(view.extra) == 1)
    name, int4_steps, int4_summary = view.extra[0]
    assert "int4" in name and "int8" in view.info.text() and "int4" in view.info.text()
    assert len(int4_steps) == 6 and len(view.kl.more[0].getData()[1]) == 6
    settings = w.sampler.settings()
    for kind, shown in (("int8", view.steps), ("int4", int4_steps)):
        b = load_model(str(tiny_dir), device="cpu", dtype=kind)
        lock = Lockstep(engine_session(w, settings), b.model, b.tokenizer, top_n=5)
        want = list(lock.stream())
        assert [s.token_id for s in shown] == [s.token_id for s in want]
        assert [round(s.kl, 5) for s in shown] == [round(s.kl, 5) for s in want]
    assert int4_summary.mean_kl > view.summary[0].mean_kl  # 4 bits move it further than 8
    view.set_compact(True)  # the presentation view: one short line per B, each named
    lines = view.info.text().split("<br>")
    assert len(lines) == 2
    assert lines[0].startswith("<b>int8</b>: ") and lines[1].startswith("<b>int4</b>: ")
    view.set_compact(False)


def test_a_lesson_sample_stage_runs_as_the_engine_runs_it(qtbot, ready):
    """Lesson 09's first stage on the tiny model: the window sets N and the page, says what the
    class will see, and the histogram equals engine.experiments.lesson.run_stage's."""
    w = ready
    lesson = load_lesson(LESSONS / "09-sampling-follows-the-bars.yaml")
    stage = replace(lesson.stages[1], model="", prompt=PROMPT, use_chat_template=False)
    w.classroom.apply_stage(stage)
    view = w.plots.experiments.histogram
    assert view.n() == stage.samples == 1000
    assert w.plots.experiments.currentWidget() is view
    assert "drawn N times" in w.status_text.text() and "Sample_step" not in w.status_text.text()
    run(qtbot, w, lambda: w.experiments.sample(view.n()))
    wait_drawn(qtbot, lambda: view.sample is not None)
    expected = run_stage(stage, w.bundle)
    assert view.sample.rows == expected.rows and view.sample.tv == expected.tv


def test_the_lockstep_lesson_stage_opens_its_page_and_chooses_model_b(qtbot, ready, monkeypatch):
    """Lesson 14 on the tiny model: the stage opens the lockstep page, says what to press,
    and the dialog comes up with the stage's model B chosen (float32 vs int8 vs int4)."""
    from gui.experiments.dialogs import SAME_QUANT, LockstepDialog

    w = ready
    lesson = load_lesson(LESSONS / "14-smaller-numbers.yaml")
    stage = replace(lesson.stages[0], model="", prompt=PROMPT, use_chat_template=False)
    w.classroom.apply_stage(stage)
    assert w.plots.experiments.currentWidget() is w.plots.experiments.lockstep
    assert "int4" in w.status_text.text()
    chosen = []

    def accept(dialog):
        chosen.append(dialog.model.currentData())
        return LockstepDialog.DialogCode.Rejected

    monkeypatch.setattr(LockstepDialog, "exec", accept)
    w.experiments.ask_lockstep()
    assert chosen == [SAME_QUANT]


def test_the_presentation_view_keeps_what_a_back_row_reads(qtbot, ready):
    w = ready
    t = w.plots.experiments
    run(qtbot, w, lambda: w.experiments.sample(100))
    wait_drawn(qtbot, lambda: t.histogram.sample is not None)
    normal_rows = len(t.histogram.shown())
    w.set_presentation(True)
    wait_drawn(qtbot, lambda: t.sweep.compact and t.lockstep.compact and t.histogram.compact)
    assert t.sweep.plot.isHidden() and t.lockstep.plots.isHidden()
    assert t.sweep.table.isHidden() and not t.sweep.outputs.isHidden()  # the outputs, whole
    assert "distance" in t.histogram.info.text() and "degrees" not in t.histogram.info.text()
    # the rows shown fit the plot at the bigger font: fewer (or as many) as before
    line = QFontMetrics(t.histogram._tick_font).lineSpacing()
    shown = len(t.histogram.shown())
    assert shown <= normal_rows
    assert shown <= 4 or (shown + 2) * line <= t.histogram.plot.height() * 1.05
    w.set_presentation(False)
    wait_drawn(qtbot, lambda: not t.sweep.compact)
    assert not t.sweep.plot.isHidden() and not t.sweep.table.isHidden()
