import pytest
from transformers import ByT5Tokenizer

from engine import SamplerSettings
from engine.decode.speculative import DrafterMismatchError
from engine.drivers.compare import compare_methods, format_table
from engine.models.loading import make_bundle
from engine.records import (
    COMPARE_ROWS,
    ROW_BEAM,
    ROW_PLAIN,
    ROW_PLAIN_NO_CACHE,
    ROW_SPEC_DRAFT,
    ROW_SPEC_NGRAM,
)
from tiny_models import tiny_llama


def test_compare_all_methods_on_a_tiny_model():
    bundle = make_bundle(tiny_llama(0), ByT5Tokenizer(), name="tiny")
    drafter = make_bundle(tiny_llama(1), ByT5Tokenizer(), name="tiny-draft")
    ids = [5, 17, 33, 90, 41, 7] * 3
    results = compare_methods(
        bundle,
        ids,
        SamplerSettings(temperature=0),
        COMPARE_ROWS,
        max_new_tokens=20,
        num_beams=3,
        gamma=3,
        drafter=drafter,
    )
    by = {r.method.split(" (")[0]: r for r in results}
    assert set(by) == set(COMPARE_ROWS)
    for name in (ROW_PLAIN, ROW_PLAIN_NO_CACHE, ROW_SPEC_DRAFT, ROW_SPEC_NGRAM):
        assert by[name].identical_to_greedy and by[name].tokens == 20
    assert by[ROW_PLAIN].forward_passes == 20 == by[ROW_PLAIN_NO_CACHE].forward_passes
    assert by[ROW_SPEC_DRAFT].acceptance is not None
    assert by[ROW_BEAM].acceptance is None
    table = format_table(results)
    assert "tokens/s" in table and len(table.splitlines()) == 2 + len(COMPARE_ROWS)


def test_compare_refuses_a_mismatched_draft_model():
    from tokenizers import Tokenizer, models
    from transformers import GPT2TokenizerFast

    other = GPT2TokenizerFast(
        tokenizer_object=Tokenizer(models.BPE(vocab={"a": 0, "b": 1}, merges=[]))
    )
    bundle = make_bundle(tiny_llama(0), ByT5Tokenizer())
    drafter = make_bundle(tiny_llama(1), other)
    with pytest.raises(DrafterMismatchError):
        compare_methods(
            bundle,
            [5, 6, 7],
            SamplerSettings(temperature=0),
            [ROW_SPEC_DRAFT],
            max_new_tokens=4,
            drafter=drafter,
        )


def test_cli_compare_runs_and_prints_progress(tmp_path, capsys):
    """`main.py compare` end to end on a saved tiny model (it once passed an argument the
    comparison did not take)."""
    import main

    folder = tmp_path / "tiny"
    tiny_llama(0).save_pretrained(folder)
    ByT5Tokenizer().save_pretrained(folder)
    code = main.cli(["compare", "--model", str(folder), "--prompt", "compare me",
                     "--max-new-tokens", "6", "--methods", f"{ROW_PLAIN},{ROW_BEAM}",
                     "--no-chat-template"])  # fmt: skip
    out = capsys.readouterr()
    assert code == 0, out.err
    assert ROW_PLAIN in out.out and ROW_BEAM in out.out
    assert "Running" in out.err


def test_compare_applies_settings_written_as_words():
    """Logit bias and banned strings name words; every row resolves them with the model's
    tokenizer, as a run from the window does (the comparison refused them: "'x' needs a
    tokenizer")."""
    bundle = make_bundle(tiny_llama(0), ByT5Tokenizer(), name="tiny")
    drafter = make_bundle(tiny_llama(1), ByT5Tokenizer(), name="tiny-draft")
    ids = [5, 17, 33, 90, 41, 7] * 3
    settings = SamplerSettings(temperature=0, logit_bias=(("x", 40.0),), banned_strings=("xxx",))
    results = compare_methods(
        bundle, ids, settings, COMPARE_ROWS, max_new_tokens=8, num_beams=2, gamma=3,
        drafter=drafter,
    )  # fmt: skip
    assert len(results) == len(COMPARE_ROWS)
    x = bundle.tokenizer.convert_tokens_to_ids("x")
    for r in results:
        assert r.token_ids.count(x) > 2, r.method  # the bias pulls towards 'x'
        triples = {r.token_ids[i : i + 3] for i in range(len(r.token_ids) - 2)}
        assert (x, x, x) not in triples, r.method  # and the ban holds


def test_compare_has_a_fast_path_row_for_t5():
    """A T5 takes the fast path (engine.step.fast_t5), so its comparison has that row too."""
    from engine.records import ROW_PLAIN_FAST
    from tiny_models import tiny_t5

    bundle = make_bundle(tiny_t5(0), ByT5Tokenizer(), name="tiny-t5")
    results = compare_methods(
        bundle, [5, 17, 33, 90, 41, 7], SamplerSettings(temperature=0), [ROW_PLAIN_FAST],
        max_new_tokens=10,
    )  # fmt: skip
    assert [r.method for r in results] == [ROW_PLAIN_FAST]
    assert results[0].identical_to_greedy and results[0].tokens == 10
