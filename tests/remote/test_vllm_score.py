"""Scoring a text on a real vLLM server (issue 25): vLLM's prompt_logprobs against one local
transformers forward of the same model (the bundled SmolLM2, float32 on both sides), through the
library and through `main.py score --server`. Run with `make test-remote`."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

from engine.cli import run
from engine.models.catalog import open_model
from engine.tree.score import context_and_text, score_text

pytestmark = [pytest.mark.remote, pytest.mark.timeout(1500)]

TEXT = " Rayleigh scattering makes the sky blue, and sunsets glow a deep, bruised orange."
CONTEXT = "Why is the sky blue?"
# float32 on both sides, different kernels (vLLM's CPU attention and GEMMs vs PyTorch's):
# tests/remote/test_vllm.py measured ~1e-4 on the top-20 log-probabilities; 1e-3 leaves room.
LOGPROB_TOL = 1e-3


@pytest.fixture(scope="module")
def rows(served):
    """log_softmax of ONE local forward over context + text, the rows predicting the text."""
    local = open_model("smollm2-135m", device="cpu", dtype="float32")
    head, ids = context_and_text(local.tokenizer, TEXT, CONTEXT)
    with torch.no_grad():
        logits = local.model(input_ids=torch.tensor([[*head, *ids]])).logits[0]
    return ids, F.log_softmax(logits[len(head) - 1 : -1].float(), dim=-1)


def test_served_score_equals_the_local_forward(served, rows):
    ids, logp = rows
    res = score_text(served, TEXT, prompt=CONTEXT, top_n=10)
    assert [t.token_id for t in res.tokens] == ids
    diffs = []
    for t, row in zip(res.tokens, logp, strict=True):
        own = float(row[t.token_id])
        diffs.append(abs(t.logprob - own))
        # the server's rank over the whole vocabulary, up to ties within the tolerance
        surely_better = int((row > own + LOGPROB_TOL).sum())
        maybe_better = int((row > own - LOGPROB_TOL).sum())
        assert surely_better < t.rank <= maybe_better + 1
        top = torch.topk(row, 10)
        gaps = (top.values[:-1] - top.values[1:]).tolist()
        k = next((i for i, g in enumerate(gaps) if g <= LOGPROB_TOL), 10)  # the first near-tie
        assert [c[0] for c in t.top][:k] == top.indices[:k].tolist()  # same order before it
    assert max(diffs) <= LOGPROB_TOL
    want_total = float(logp[torch.arange(len(ids)), torch.tensor(ids)].sum())
    assert res.total_logprob == pytest.approx(want_total, abs=LOGPROB_TOL * len(ids))
    assert {t.rank for t in res.tokens} != {1}  # a real text: not every token the model's top-1
    print(
        f"\n[served score: {len(ids)} tokens, max |logprob diff| {max(diffs):.2e}, "
        f"total {res.total_logprob:.3f} vs local {want_total:.3f}]"
    )


def test_cli_score_server(vllm_server, hf_folder, rows, tmp_path, monkeypatch):
    if vllm_server.api_key:
        monkeypatch.setenv("DECODING_LAB_API_KEY", vllm_server.api_key)
    out = tmp_path / "score.json"
    argv = ["score", "--server", vllm_server.url, "--model", str(hf_folder), "--text", TEXT,
            "--prompt", CONTEXT, "--top-n", "5", "--json", str(out)]  # fmt: skip
    assert run(argv) == 0
    data = json.loads(out.read_text())
    ids, logp = rows
    assert data["format"] == "decoding-lab-score/1"
    assert [t["token_id"] for t in data["tokens"]] == ids
    want = logp[torch.arange(len(ids)), torch.tensor(ids)].tolist()
    assert [t["logprob"] for t in data["tokens"]] == pytest.approx(want, abs=LOGPROB_TOL)
