"""The experiment commands end to end through engine.cli.run, on saved tiny models."""

import json

import pytest
from transformers import ByT5Tokenizer

from engine.cli import run
from tiny_models import tiny_llama


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny")
    tiny_llama(0).save_pretrained(path)
    ByT5Tokenizer().save_pretrained(path)
    return str(path)


def cli_json(capsys, argv):
    code = run(argv)
    out = capsys.readouterr()
    assert code == 0, out.err
    return json.loads(out.out)


def test_sample_step(folder, capsys):
    data = cli_json(capsys, ["sample-step", "--model", folder, "--prompt", "abc",
                             "--no-chat-template", "--samples", "20000", "--top-k", "10",
                             "--preset", "Pure sampling"])  # fmt: skip
    assert data["n"] == 20000 and data["survivors"] == 10
    assert sum(r["count"] for r in data["rows"]) + data["other_count"] == 20000
    assert [c["n"] for c in data["checkpoints"]] == [10, 100, 1000, 10000, 20000]
    assert 0 <= data["p_value"] <= 1 and data["tv"] < 0.05


def test_sweep_and_runs(folder, capsys):
    rows = cli_json(capsys, ["sweep", "--model", folder, "--prompt", "abc", "--no-chat-template",
                             "--setting", "top_p", "--values", "0.1,0.9", "--max-new-tokens",
                             "4", "--temperature", "1.0"])  # fmt: skip
    assert [r["value"] for r in rows] == [0.1, 0.9]
    assert all(len(r["token_ids"]) <= 4 and len(r["distinct"]) == 3 for r in rows)
    var = cli_json(capsys, ["sweep", "--model", folder, "--prompt", "abc",
                            "--no-chat-template", "--runs", "5", "--max-new-tokens", "3",
                            "--temperature", "2"])  # fmt: skip
    assert var["runs"] == 5 and sum(c["count"] for c in var["continuations"]) == 5


def test_lockstep_fp32_vs_bf16_and_a_refusal(folder, tmp_path, capsys):
    data = cli_json(capsys, ["lockstep", "--model", folder, "--dtype", "float32", "--dtype-b",
                             "bfloat16", "--prompt", "abc", "--no-chat-template",
                             "--max-new-tokens", "5", "--temperature", "0"])  # fmt: skip
    assert data["summary"]["tokens"] == len(data["steps"]) == 5
    assert "bfloat16" in data["b"] and "float32" in data["a"]
    other = tmp_path / "other"
    tiny_llama(1).save_pretrained(other)
    ByT5Tokenizer(extra_ids=0).save_pretrained(other)
    code = run(["lockstep", "--model", folder, "--model-b", str(other), "--prompt", "abc",
                "--no-chat-template", "--max-new-tokens", "2"])  # fmt: skip
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == 2 and len(errors) == 1 and "different tokenizers" in errors[0]


def test_bad_values_are_one_line(folder, capsys):
    code = run(["sweep", "--model", folder, "--prompt", "abc", "--setting", "top_p",
                "--values", "2"])  # fmt: skip
    assert code == 2 and "top_p" in capsys.readouterr().err
    code = run(["generate", "--model", folder, "--prompt", "abc", "--grammar", "yaml:x"])
    assert code == 2 and "KIND:TEXT" in capsys.readouterr().err


@pytest.mark.slow
def test_generate_with_a_grammar(tmp_path, capsys):
    from engine.models.catalog import load_bundled

    smol = load_bundled("smollm2-135m", device="cpu")
    path = tmp_path / "tiny-smol-vocab"
    tiny_llama(2, vocab=len(smol.tokenizer)).save_pretrained(path)
    smol.tokenizer.save_pretrained(path)
    code = run(["generate", "--model", str(path), "--prompt", "Is it?", "--no-chat-template",
                "--grammar", "choice:yes|no|maybe", "--temperature", "1.0",
                "--max-new-tokens", "10", "--show-probs", "3"])  # fmt: skip
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "grammar" in out.out  # the stage's note on each step
