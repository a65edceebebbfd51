"""Comparing sampler presets: the scores by hand, a run on a tiny model, and the CLI's help
listing every sampler option with its default."""

import subprocess
import sys
from dataclasses import fields

import pytest
from transformers import ByT5Tokenizer

from engine.drivers.compare import compare_presets, distinct_n, format_preset_table, repetition
from engine.models.loading import make_bundle
from engine.sampling.settings import PRESETS, SamplerSettings
from tiny_models import tiny_llama


def test_distinct_and_repetition_by_hand():
    ids = [1, 2, 1, 2, 1, 2]
    assert distinct_n(ids, 1) == pytest.approx(2 / 6)
    assert distinct_n(ids, 2) == pytest.approx(2 / 5)  # (1,2) (2,1) (1,2) (2,1) (1,2)
    assert repetition(ids, 4) == pytest.approx(1 - 2 / 3)  # 3 four-grams, 2 distinct
    assert distinct_n([1, 2, 3], 2) == 1.0 and repetition([1, 2, 3, 4, 5], 4) == 0.0
    assert distinct_n([1], 2) == 0.0 and repetition([1, 2], 4) == 0.0


def test_compare_presets_same_seed_and_scores():
    bundle = make_bundle(tiny_llama(0), ByT5Tokenizer(), name="tiny")
    ids = [5, 17, 33, 90, 41, 7]
    presets = {n: PRESETS[n] for n in ("Greedy", "Creative", "Mirostat 2", "XTC")}
    first = compare_presets(bundle, ids, presets, max_new_tokens=24, seed=7)
    again = compare_presets(bundle, ids, presets, max_new_tokens=24, seed=7)
    assert [r.token_ids for r in first] == [r.token_ids for r in again]  # same seed, same text
    for r in first:
        assert r.distinct_1 == pytest.approx(distinct_n(r.token_ids, 1))
        assert r.rep_4 == pytest.approx(repetition(r.token_ids, 4))
        assert r.seconds > 0
    table = format_preset_table(first)
    assert table.splitlines()[0].split()[-3:] == ["distinct-1", "distinct-2", "rep-4"]
    assert len(table.splitlines()) == 2 + len(presets)


def test_generate_help_lists_every_sampler_option_with_its_default():
    out = subprocess.run(
        [sys.executable, "main.py", "generate", "--help"], capture_output=True, text=True,
        check=True, env={"COLUMNS": "200", "PATH": ""},
    ).stdout  # fmt: skip
    flat = " ".join(out.split())
    for f in fields(SamplerSettings):
        if f.name in ("order",):
            continue
        option = {"logit_bias": "--logit-bias", "banned_strings": "--ban",
                  "dry_sequence_breakers": "--dry-sequence-breaker"}.get(
            f.name, "--" + f.name.replace("_", "-"))  # fmt: skip
        assert option in flat, option
    for name in ("--dry-multiplier", "--mirostat-tau", "--xtc-probability"):
        default = getattr(SamplerSettings(), name[2:].replace("-", "_"))
        help_text = flat.rsplit(name, 1)[1]  # its help, after the usage line
        assert help_text.split("(default: ", 1)[1].startswith(f"{default})")
    assert "--method" in flat and "contrastive" in flat
