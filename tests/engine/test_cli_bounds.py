"""Issue 35, items 4 to 6 on the command line: every tree and experiment command bounded before
it starts, with the limit named; every bad option one line and a non-zero exit, no traceback
and no model loaded for nothing; nothing lost. Runs in process on a saved tiny model (the
refusals must come before the model would load: ``open_model`` is watched)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from transformers import ByT5Tokenizer

import engine.models.catalog as catalog
from engine.cli import run
from tiny_models import tiny_llama

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny")
    tiny_llama(0).save_pretrained(path)
    tok = ByT5Tokenizer()
    tok.chat_template = "{% for m in messages %}[{{ m['content'] }}]{% endfor %}"
    tok.save_pretrained(path)
    return str(path)


@pytest.fixture
def opened(monkeypatch):
    """Every model the command opens (it still opens it)."""
    seen: list = []
    real = catalog.open_model
    monkeypatch.setattr(catalog, "open_model", lambda *a, **k: seen.append(a) or real(*a, **k))
    return seen


def cli(capsys, argv):
    try:
        code = run(argv)
    except SystemExit as exc:  # argparse's own refusal
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err


def refused(capsys, opened, argv, words, code=2):
    got, _out, err = cli(capsys, argv)
    assert got == code, err[-2000:]
    assert words in err and "Traceback" not in err
    assert opened == []  # refused before any model work


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["sweep", "--values", ",".join(["0.5"] * 5000)], "at most 1,000 values"),
        (["sweep", "--setting", "top_k", "--values", "1,inf"], "not a finite number"),
        (["sweep", "--setting", "top_k", "--values", "1e400"], "not a finite number"),
        (["sweep", "--setting", "top_k", "--values", "2.5"], "whole numbers"),
        (["lockstep", "--top-n", "100000000"], "from 1 to 1000 (the bound)"),
        (["lockstep", "--top-n", "-1"], "from 1 to 1000 (the bound)"),
        (["sample-step", "--top", "-1"], "from 1 to 1000 (the bound)"),
        (["score", "--text", "x", "--top-n", "-1"], "from 1 to 1000 (the bound)"),
        (["tree", "--prompt", "x", "--depth", "6", "--max-nodes", "10000000"], "20000 (the bound)"),
        (["tree", "--prompt", "x", "--top-p", "nan"], "probability in [0, 1]"),
    ],
)
def test_bounds_are_checked_before_the_model_loads(capsys, opened, folder, argv, words):
    refused(capsys, opened, [*argv[:1], "--model", folder, *argv[1:]], words)


@pytest.mark.parametrize("command", [["tree", "--prompt", "x"], ["score", "--text", "x"]])
def test_json_into_a_missing_folder_or_onto_a_folder_is_refused_first(
    capsys, opened, folder, tmp_path, command
):
    """The error used to come after the work was done (and the result was lost)."""
    missing = str(tmp_path / "no such folder" / "out.json")
    refused(capsys, opened, [*command, "--model", folder, "--json", missing], "does not exist")
    refused(capsys, opened, [*command, "--model", folder, "--json", str(tmp_path)], "is a folder")


def test_a_tree_records_its_chat_template_and_model(capsys, folder, tmp_path):
    """A tree from `main.py tree`, expanded in the window, grew children in another context:
    the file did not say whether the chat template was used."""
    from engine.tree import RunTree

    for flag, want in (([], True), (["--no-chat-template"], False)):
        out = tmp_path / f"tree{want}.json"
        code, _o, err = cli(capsys, ["tree", "--model", folder, "--prompt", "Hi", "--depth",
                                     "2", "--json", str(out), *flag])  # fmt: skip
        assert code == 0, err
        data = json.loads(out.read_text())
        assert data["chat_template"] is want and data["model"] == folder
        tree = RunTree.from_json(data)
        assert tree.uses_chat_template() is want
        assert "level 2 of 2" in err  # progress on stderr


def test_a_tree_with_no_nodes_is_an_error(capsys, folder):
    code, _out, err = cli(capsys, ["tree", "--model", folder, "--prompt", "Hi", "--min-prob",
                                   "1.0", "--no-chat-template"])  # fmt: skip
    assert code == 1 and "no continuation passed the cutoffs" in err


def test_the_node_budget_stops_a_tree_and_says_so(capsys, folder, tmp_path):
    out = tmp_path / "t.json"
    code, _o, err = cli(capsys, ["tree", "--model", folder, "--prompt", "Hi", "--depth", "6",
                                 "--max-children", "50", "--max-nodes", "300", "--json",
                                 str(out), "--no-chat-template"])  # fmt: skip
    assert code == 0 and "stopped at the node budget of 300" in err
    assert len(json.loads(out.read_text())["nodes"]) == 301


def test_lockstep_between_two_output_widths(capsys, tmp_path):
    """49,160 wide against 49,152 wide (a padded vocabulary) raised IndexError when A took an
    id past B's width: B now scores it 0, and the comparison stops there with a note."""
    from engine import GenerationSession, SamplerSettings
    from engine.experiments.lockstep import Lockstep

    wide, narrow = tiny_llama(0, vocab=392), tiny_llama(1, vocab=384)
    settings = SamplerSettings(temperature=0.0, max_new_tokens=3, logit_bias=(("#390", 50.0),))
    session = GenerationSession(wide, [5, 6, 7], settings, eos_token_ids=[1], top_n=1)
    lock = Lockstep(session, narrow, top_n=5)
    steps = list(lock.stream())
    assert [s.token_id for s in steps] == [390]
    assert steps[0].b_prob == 0.0 and 0 < steps[0].a_prob <= 1
    assert lock.summary().tokens == 1 and "past model B's vocabulary" in lock.summary().note
    even = tiny_llama(0, vocab=384)  # the same widths: every step compared, as before
    session = GenerationSession(even, [5, 6, 7], settings.with_(logit_bias=()), top_n=1)
    assert len(list(Lockstep(session, narrow, top_n=5).stream())) == 3


def _subprocess(*args: bytes | str) -> subprocess.CompletedProcess:
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, str(ROOT / "main.py"), *args], capture_output=True, env=env,
        timeout=120, cwd=ROOT,
    )  # fmt: skip


@pytest.mark.parametrize(
    "args",
    [
        ["score", "--text", b"caf\xff!"],
        ["score", "--text", "ok", "--prompt", b"\xfe"],
        ["tree", "--prompt", b"caf\xff!"],
        ["sample-step", "--prompt", b"caf\xff!"],
        ["sweep", "--prompt", b"caf\xff!"],
        ["lockstep", "--prompt", b"caf\xff!"],
    ],
)
def test_invalid_utf8_in_a_text_option_is_one_line_and_exit_2(args):
    """An undecodable byte in argv raised TypeError deep in the tokenizer."""
    done = _subprocess(*args)
    assert done.returncode == 2, done.stderr[-2000:]
    assert b"Traceback" not in done.stderr and b"not valid UTF-8" in done.stderr
