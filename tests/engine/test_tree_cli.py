"""`main.py tree` and `main.py score` through the CLI entry, on the bundled SmolLM2, checked
against one full forward of the same model (slow: real weights)."""

import json

import pytest
import torch
import torch.nn.functional as F

from engine.cli import run
from engine.models.catalog import load_bundled

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def bundle():
    return load_bundled("smollm2-135m", device="cpu", dtype="float32")


def forward_logprob(bundle, prompt, path):
    with torch.no_grad():
        logits = bundle.model(input_ids=torch.tensor([[*prompt, *path]])).logits[0]
    logp = F.log_softmax(logits[len(prompt) - 1 : -1].float(), dim=-1)
    return float(logp[torch.arange(len(path)), torch.tensor(path)].sum())


def test_tree_cli(bundle, tmp_path):
    out = tmp_path / "t.json"
    argv = ["tree", "--prompt", "The capital of France is", "--depth", "2",
            "--max-children", "2", "--min-prob", "0.01", "--no-chat-template",
            "--model", "smollm2-135m", "--device", "cpu", "--dtype", "float32",
            "--json", str(out)]  # fmt: skip
    assert run(argv) == 0
    data = json.loads(out.read_text())
    assert data["format"] == "decoding-lab-tree/1" and data["forwards"] == 2
    nodes = {n["id"]: n for n in data["nodes"]}
    assert 2 < len(nodes) <= 7
    for n in nodes.values():
        path, cur = [], n
        while cur["parent"] is not None:
            path.append(cur["token_id"])
            cur = nodes[cur["parent"]]
        if path:
            want = forward_logprob(bundle, data["prompt_ids"], path[::-1])
            assert n["path_logprob"] == pytest.approx(want, abs=1e-4)
            assert n["raw_prob"] >= 0.01


def test_score_cli(bundle, tmp_path):
    out = tmp_path / "s.json"
    text = "Paris is the capital of France."
    argv = ["score", "--text", text, "--prompt", "Fact:", "--model", "smollm2-135m",
            "--device", "cpu", "--dtype", "float32", "--json", str(out)]  # fmt: skip
    assert run(argv) == 0
    data = json.loads(out.read_text())
    tok = bundle.tokenizer
    # read as the words after "Fact:": with the space SmolLM2 writes a word with (" Paris")
    ids = tok(" " + text, add_special_tokens=False)["input_ids"]
    want = forward_logprob(bundle, tok("Fact:", add_special_tokens=False)["input_ids"], ids)
    assert [t["token_id"] for t in data["tokens"]] == ids
    assert data["total_logprob"] == pytest.approx(want, abs=1e-4)
    assert data["perplexity"] == pytest.approx(torch.tensor(-want / len(ids)).exp().item(), 1e-5)
    assert run(["score", "--text", "", "--model", "smollm2-135m", "--device", "cpu"]) == 2
