"""`main.py inspect` (issue 33): the JSON it writes for a run and for a given text, and its
refusals (one line, exit 2, before any work)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def inspect(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "main.py"), "inspect", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)  # fmt: skip


def test_a_run_of_the_tiny_t5_inside(tmp_path) -> None:
    out = tmp_path / "inside.json"
    page = tmp_path / "run.html"
    proc = inspect("--model", "tiny-t5", "--prompt", "date: 2024-03-05", "--temperature", "0",
                   "--max-new-tokens", "6", "--step", "1", "--step", "3", "--attribution",
                   "--json", str(out), "--html", str(page))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())
    assert data["tokens"] == "generated" and len(data["token_ids"]) == 6
    assert [s["step"] for s in data["steps"]] == [0, 2]
    step = data["steps"][0]
    assert len(step["lens"]) == data["layers"] + 1 and len(step["lens"][0]["top"]) == 5
    assert step["decision_layer"] == data["decision_strip"][0]
    dla = step["dla"]
    parts = sum(sum(row) for row in dla["per_layer"]) + dla["embedding"] + dla["bias"]
    assert parts == pytest.approx(dla["total"], abs=1e-3)
    assert len(dla["per_layer"][0]) == 3  # T5: self-attention, cross-attention, MLP
    ig = step["attribution"]
    assert sum(s["score"] for s in ig["scores"]) - (ig["value"] - ig["baseline_value"]) == (
        pytest.approx(ig["delta"], abs=1e-3))  # fmt: skip
    assert 'id="decided"' in page.read_text() and proc.stdout.count("decided:") == 2


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--attribution"], "--attribution needs --step"),
        (["--json", "/nonexistent-folder/x.json"], "does not exist"),
        (["--json", "."], "is a folder"),
        (["--step", "99"], "--step 99: the path has 4 tokens"),
    ],
)
def test_refusals_are_one_line_and_exit_2(args: list[str], says: str) -> None:
    proc = inspect("--model", "tiny-t5", "--prompt", "date: 2024-03-05", "--temperature", "0",
                   "--max-new-tokens", "4", *args)  # fmt: skip
    assert proc.returncode == 2 and says in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
