"""Issue 24, item 6: exports neutralise spreadsheet formulas, escape Markdown, write text that
cannot be encoded visibly, tolerate non-finite settings and use normal file permissions."""

import csv
import io
import json
import os
import stat

import pytest

from engine.classroom.export import run_to_csv, run_to_json, run_to_markdown, write_atomic
from engine.classroom.share import run_to_html, write_run_html
from engine.records import Candidate, Step

FORMULAS = ['=HYPERLINK("http://evil","x")', "+1+1", "-2+3", "@SUM(A1:A9)", "\tx", "\rx"]


def step(i: int, text: str) -> Step:
    return Step(
        index=i, token_id=i, text=text, token_str=text, raw_prob=0.5, prob=0.5, rank=1,
        candidates=(Candidate(i, text, 0.5, 0.5),), survivors=2, entropy_raw=1.0, entropy=1.0,
        step_time=0.01, tokens_per_s=100.0,
    )  # fmt: skip


def test_csv_cells_that_a_spreadsheet_would_run_get_a_quote():
    steps = [step(i, t) for i, t in enumerate(FORMULAS)]
    rows = list(csv.reader(io.StringIO(run_to_csv(steps), newline="")))
    header, body = rows[0], rows[1:]
    for row, text in zip(body, FORMULAS, strict=True):
        for column in ("token_str", "text"):
            assert row[header.index(column)] == "'" + text
    assert body[0][header.index("index")] == "0"  # numbers stay numbers


def test_markdown_escapes_html_and_markdown_from_tokens():
    hostile = '<img src=x onerror="alert(1)"> [click](javascript:alert(1)) **b**'
    md = run_to_markdown(hostile, "m<b>", {"t": 1}, [step(0, hostile)])
    assert "<img" not in md and "<b>" not in md and "[click](" not in md
    assert "&lt;img" in md and "\\*\\*b\\*\\*" in md


def test_a_lone_surrogate_is_written_visibly(tmp_path):
    steps = [step(0, "ok \ud800 here")]
    for name, text in {
        "run.json": run_to_json("p\udfff", "m", {}, steps),
        "run.csv": run_to_csv(steps),
        "run.md": run_to_markdown("p\udfff", "m", {}, steps),
        "run.html": run_to_html("p\udfff", "m", {}, steps),
    }.items():
        written = write_atomic(tmp_path / name, text).read_text(encoding="utf-8")
        assert "\ufffd" in written


def test_a_non_finite_setting_does_not_stop_the_shared_page(tmp_path):
    page = write_run_html(
        tmp_path / "page.html", "p", "m", {"temperature": float("nan"), "top_p": float("inf")},
        [step(0, "a")],
    )  # fmt: skip
    assert "nan" in page.read_text()


@pytest.mark.parametrize("umask", [0o022, 0o002])
def test_exports_get_the_permissions_of_any_new_file(tmp_path, umask):
    old = os.umask(umask)
    try:
        files = [
            write_atomic(tmp_path / "run.json", json.dumps({"a": 1})),
            write_run_html(tmp_path / "run.html", "p", "m", {}, [step(0, "a")]),
        ]
        private = write_atomic(tmp_path / "autosave.json", "{}", private=True)
    finally:
        os.umask(old)
    for f in files:
        assert stat.S_IMODE(f.stat().st_mode) == 0o666 & ~umask
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
