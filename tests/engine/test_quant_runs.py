"""Everything that runs on a model runs on an int8 / int4 one: loading with the dtype, and the
CLI's sampling, beam, speculative decoding with a quantised draft, tree, score, the
experiments and inspect, on a small saved Llama whose shapes the int4 step fuses."""

import json

import pytest
import torch
from transformers import ByT5Tokenizer, LlamaConfig, LlamaForCausalLM

from engine.cli import run
from engine.errors import ModelLoadError
from engine.models.loading import load_model
from engine.quant.linear import QuantLinear
from engine.step.fastpath import fast_stepper_or_none


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    path = tmp_path_factory.mktemp("quant-llama")
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=384, hidden_size=128, intermediate_size=256,
                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=256, bos_token_id=2, eos_token_id=1,
                      pad_token_id=0, initializer_range=0.1)  # fmt: skip
    LlamaForCausalLM(cfg).save_pretrained(path)
    ByT5Tokenizer().save_pretrained(path)
    return str(path)


@pytest.mark.parametrize("kind", ["int8", "int4"])
def test_load_with_a_quantised_dtype(folder, kind):
    bundle = load_model(folder, device="cpu", dtype=kind)
    assert bundle.dtype_name == kind and bundle.describe().endswith(kind)
    assert bundle.dtype == torch.bfloat16  # what the rest of the model runs in
    layers = [m for m in bundle.model.modules() if isinstance(m, QuantLinear)]
    assert len(layers) == 2 * 7 + 1 and {m.kind for m in layers[:-1]} == {kind}
    assert layers[-1].kind == "int8"  # the output head stays 8-bit in both
    assert fast_stepper_or_none(bundle.model) is not None


def test_unknown_dtype_and_another_device_are_refused(folder):
    with pytest.raises(ModelLoadError, match="int8, int4"):
        load_model(folder, device="cpu", dtype="int3")
    with pytest.raises(ModelLoadError, match="CPU kernels only"):
        load_model(folder, device="meta", dtype="int4")


def cli(capsys, argv):
    code = run(argv)
    out = capsys.readouterr()
    assert code == 0, out.err
    return out


COMMON = ["--no-chat-template", "--device", "cpu"]


def test_generate_sampling_on_int4_is_seeded(folder, capsys):
    argv = ["generate", "--model", folder, "--prompt", "abc", "--dtype", "int4", "--seed", "3",
            "--temperature", "1.0", "--max-new-tokens", "6", *COMMON]  # fmt: skip
    assert cli(capsys, argv).out == cli(capsys, argv).out


def test_compare_beam_and_a_quantised_draft(folder, capsys):
    out = cli(capsys, ["compare", "--model", folder, "--prompt", "abc", "--dtype", "float32",
                       "--draft-model", folder, "--draft-dtype", "int4", "--max-new-tokens", "8",
                       "--methods", "plain, KV cache,beam search,speculative, draft model",
                       "--num-beams", "2", *COMMON])  # fmt: skip
    assert "beam" in out.out and "draft" in out.out


def test_tree_and_score_on_int8(folder, tmp_path, capsys):
    tree, score = tmp_path / "t.json", tmp_path / "s.json"
    cli(capsys, ["tree", "--model", folder, "--prompt", "abc", "--depth", "2", "--dtype",
                 "int8", "--json", str(tree), *COMMON])  # fmt: skip
    assert json.loads(tree.read_text())["forwards"] == 2
    cli(capsys, ["score", "--model", folder, "--text", "hello", "--dtype", "int8",
                 "--json", str(score), "--device", "cpu"])  # fmt: skip
    assert json.loads(score.read_text())


def test_experiments_on_int4(folder, capsys):
    argv = ["sample-step", "--model", folder, "--prompt", "abc", "--dtype", "int4",
            "--samples", "200", *COMMON]  # fmt: skip
    step = json.loads(cli(capsys, argv).out)
    assert step["n"] == 200
    lock = json.loads(cli(capsys, ["lockstep", "--model", folder, "--dtype", "float32",
                                   "--dtype-b", "int4", "--prompt", "abc", "--max-new-tokens",
                                   "5", "--temperature", "0", *COMMON]).out)  # fmt: skip
    assert "int4" in lock["b"] and "float32" in lock["a"] and len(lock["steps"]) == 5


def test_inspect_on_int8(folder, tmp_path, capsys):
    out = tmp_path / "inside.json"
    cli(capsys, ["inspect", "--model", folder, "--prompt", "abc", "--dtype", "int8",
                 "--temperature", "0", "--max-new-tokens", "3", "--step", "1",
                 "--json", str(out), *COMMON])  # fmt: skip
    data = json.loads(out.read_text())
    assert len(data["steps"]) == 1 and data["steps"][0]["lens"]
