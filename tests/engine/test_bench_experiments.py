"""The experiments' bench sections run and report their figures (no timing asserted: speed
targets are checked by `main.py bench`)."""

from transformers import ByT5Tokenizer

from engine.drivers.bench_experiments import lockstep_section, step_sampler_section
from engine.models.loading import make_bundle
from tiny_models import tiny_llama


def test_sections_report_their_figures():
    bundle = make_bundle(tiny_llama(0), ByT5Tokenizer(), name="tiny")
    lines: list[str] = []
    step = step_sampler_section(bundle, lines.append)
    assert step["n"] == 100_000 and 0 <= step["p_value"] <= 1 and step["tv"] < 0.05
    lock = lockstep_section(bundle, lines.append, n=6)
    assert lock["tokens"] == 6 and 0 <= lock["mean_kl"] < 0.05
    assert lines[0].startswith("E1. step sampler") and lines[1].startswith("E3. lockstep")
