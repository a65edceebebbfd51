"""The CLI on each new served backend without a running server (replayed in the documented
shapes, tests/served_fakes.py): the capability line comes before anything else, `score --server`
scores on SGLang (prompt log-probabilities; a rank past its top-N printed as a bound) and is
refused in one line on llama-server and Ollama, which return none. The real llama-server's CLI
is tested in tests/remote/test_llama_server.py."""

from __future__ import annotations

import pytest
import torch
from served_fakes import PieceTokenizer, TinyModel, fake_bundle

from tiny_models import VOCAB, tiny_llama

URL = "http://lab-box:8080"
TOK = PieceTokenizer(VOCAB)
CONTEXT = [2, 40]


@pytest.fixture(scope="module")
def model() -> torch.nn.Module:
    return tiny_llama(seed=11)


def served(kind: str, model: torch.nn.Module):
    return fake_bundle(kind, model, URL)


def text_ids(model: torch.nn.Module) -> list[int]:
    """The context, three tokens the model ranks first, then two it does not: exact ranks and
    bounds."""
    tiny, ids = TinyModel(model), list(CONTEXT)
    for _ in range(3):
        ids.append(int(tiny.logprobs(ids).argmax()))
    return [*ids, 7, 250]


def score(kind, model, monkeypatch, capsys) -> tuple[int, str, str]:
    from main import cli

    monkeypatch.setattr(
        "engine.serve.remote_session.open_served", lambda *a, **k: served(kind, model)
    )
    full = text_ids(model)
    text, context = TOK.decode(full[len(CONTEXT) :]), TOK.decode(CONTEXT)
    argv = ["score", "--server", URL, "--server-kind", kind, "--text", text, "--prompt", context]
    rc = cli([*argv, "--top-n", "3"])
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.mark.parametrize(
    ("kind", "title"), [("llama-server", "llama.cpp llama-server"), ("ollama", "Ollama")]
)
def test_score_is_refused_in_one_line_where_no_prompt_logprobs_come_back(
    kind, title, model, monkeypatch, capsys
):
    rc, out, err = score(kind, model, monkeypatch, capsys)
    assert rc == 2 and out == "" and "Traceback" not in err
    lines = err.strip().splitlines()
    assert lines[-2].startswith(f"[{title} · bars: the server's raw top-20")  # the capability
    assert "scoring a text: no" in lines[-2]
    assert lines[-1].startswith(f"error: {title} returns no prompt log-probabilities, so a text")


def test_score_on_sglang_prints_its_log_probabilities_and_bounded_ranks(model, monkeypatch, capsys):
    rc, out, err = score("sglang", model, monkeypatch, capsys)
    assert rc == 0 and err.strip().splitlines()[-1].startswith("[SGLang · bars:")
    rows = [line.split() for line in out.splitlines() if " logp " in line]
    full = text_ids(model)
    expect = TinyModel(model).prompt_logprobs(full)
    assert len(rows) == len(full) - len(CONTEXT)
    for k, row in enumerate(rows):
        token, lp = full[k + 2], expect[k + 1]
        assert row[0] == f"'[{token}]'"
        assert float(row[2]) == pytest.approx(float(lp[token]), abs=5e-4)  # printed to 3 places
        true_rank = int((lp > lp[token]).sum()) + 1
        assert row[4] == (str(true_rank) if true_rank <= 3 else "≥4")  # SGLang listed 3
    assert [r[4] for r in rows][:3] == ["1", "1", "1"] and "≥4" in [r[4] for r in rows]
