"""Beam search, speculative decoding and the comparison view in the window."""

import numpy as np
import pytest
from conftest import load, run
from tokenizers import Tokenizer, models
from transformers import GPT2TokenizerFast

from engine import GenerationSession
from engine.decode.beam import beam_search
from gui.controls.method_panel import BEAM, SPEC_DRAFT, SPEC_NGRAM
from tiny_models import tiny_llama


def set_settings(window, **changes):
    window.sampler.set_settings(window.sampler.settings().with_(**changes))


def greedy_ids(window, prompt, n):
    b = window.bundle
    ids = b.encode_prompt(prompt, use_chat_template=False)
    s = GenerationSession(
        b.model,
        ids,
        window.sampler.settings().with_(temperature=0, max_new_tokens=n),
        eos_token_ids=b.eos_token_ids,
    )
    return [x.token_id for x in s.stream()]


def test_beam_search_draws_a_tree_and_shows_the_best(qtbot, window, tiny_dir):
    load(qtbot, window, tiny_dir)
    window.method.set_current(BEAM)
    window.method.beams.setValue(3)
    set_settings(window, max_new_tokens=10)
    window.prompt.setPlainText("beams")
    run(qtbot, window, window.generate)
    result = window.store.beam_result
    b = window.bundle
    ref = beam_search(
        b.model,
        b.encode_prompt("beams", use_chat_template=False),
        num_beams=3,
        max_new_tokens=10,
        eos_token_ids=b.eos_token_ids,
    )
    assert result.token_ids == ref.token_ids
    assert window.beam_tree.best_path() == ref.token_ids
    assert [s.token_id for s in window.pane.steps] == ref.token_ids
    assert len(window.beam_tree.events) == ref.steps
    assert window.tabs.currentWidget() is window.plots.beam_panel
    # each shown token has its own distribution (from its beam), so the plots work for beams
    assert all(s.source == "beam" and len(s.candidates) == 50 for s in window.steps)
    _, h = window.plots.entropy.curves["model"].getData()
    np.testing.assert_allclose(h, [s.entropy_raw for s in window.steps])
    assert all(s.step_time > 0 for s in window.steps)
    with qtbot.waitSignal(window.runner.failed, timeout=10000):
        window.dist.bar_clicked.emit(0, 5)
    qtbot.waitUntil(lambda: not window.runner.busy)
    assert "Sampling method" in window.last_error


@pytest.mark.parametrize("method", [SPEC_NGRAM, SPEC_DRAFT])
def test_speculative_equals_greedy_with_sources_and_stats(qtbot, window, tiny_dir, method):
    load(qtbot, window, tiny_dir)
    if method == SPEC_DRAFT:
        with qtbot.waitSignal(window.runner.draft_loaded, timeout=60000):
            window.load_draft(str(tiny_dir))  # the target drafting for itself: all accepted
        qtbot.waitUntil(lambda: not window.runner.busy)
        assert window.method.draft_label.text() == "tiny-llama"
    window.method.set_current(method)
    window.method.gamma.setValue(4)
    set_settings(window, temperature=0, max_new_tokens=20)
    window.prompt.setPlainText("ab ab ab ab ab")
    run(qtbot, window, window.generate)
    assert [s.token_id for s in window.steps] == greedy_ids(window, "ab ab ab ab ab", 20)
    sources = {s.source for s in window.steps}
    assert sources <= {"draft", "target"} and "target" in sources
    assert window.method.stats.text().startswith("Accepted")
    assert "draft accepted" in window.output.legend.text()
    if method == SPEC_DRAFT:
        assert "draft" in sources and "(100%)" in window.method.stats.text()
        assert window.pane.color_for(window.steps[0]).name() == window.theme.draft


def test_mismatched_draft_model_is_refused(qtbot, window, tiny_dir, tmp_path):
    load(qtbot, window, tiny_dir)
    other = tmp_path / "other"
    tiny_llama(1, vocab=384).save_pretrained(other)
    vocab = {chr(97 + i): i for i in range(26)}
    GPT2TokenizerFast(
        tokenizer_object=Tokenizer(models.BPE(vocab=vocab, merges=[]))
    ).save_pretrained(other)
    with qtbot.waitSignal(window.runner.load_failed, timeout=60000):
        window.load_draft(str(other))
    qtbot.waitUntil(lambda: not window.runner.busy)
    assert "different tokenizer" in window.last_error
    assert window.runner.workbench.draft is None


def test_compare_view_fills_the_table(qtbot, window, tiny_dir):
    load(qtbot, window, tiny_dir)
    set_settings(window, temperature=0, max_new_tokens=12)
    window.prompt.setPlainText("compare compare compare")
    run(qtbot, window, window.compare_view.run.click, timeout=120000)
    results = window.store.results
    table = window.compare_view.table
    # no draft model loaded: five methods (the fast path applies to this Llama model)
    assert table.rowCount() == len(results) == 5
    methods = [table.item(r, 0).text() for r in range(table.rowCount())]
    assert methods[:3] == ["plain, no cache", "plain, KV cache", "plain, fast path"]
    assert all(table.item(r, 5).text() == "yes" for r in (0, 1, 2, 4))
    assert window.tabs.currentWidget() is window.compare_view
