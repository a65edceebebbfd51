"""The run store writes each step's autosave JSON with pydantic-core's writer (faster on long
runs); it must write what Python's json module writes of the same record, read back."""

from __future__ import annotations

import json
import math

from engine.classroom.export import step_to_dict
from engine.records import Candidate, StageNote, Step
from engine.validate.steps import read_steps
from gui.core.store import _dumps


def step(text: str, entropy: float = 1.5, notes: tuple[StageNote, ...] = ()) -> Step:
    cands = (
        Candidate(7, text, 0.5, 0.6),
        Candidate(8, "<b>\u2028\t", 0.25, 0.0, cut_by="top-k 1"),
        Candidate(9, "x", 0.1, 0.05, penalised_by="repetition 1.3", before_p=0.2, after_p=0.1),
    )
    return Step(
        index=3, token_id=7, text=text, token_str=text, raw_prob=0.5, prob=0.6, rank=1,
        candidates=cands, survivors=2, entropy_raw=2.25, entropy=entropy, step_time=1e-7,
        tokens_per_s=123456.789, other_p=None, stage_notes=notes, mu=None,
    )  # fmt: skip


def same(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return a == b and type(a) is type(b)


def test_written_as_pythons_json_writes_it():
    records = [
        step(" Paris"),
        step('日本 🙂 "q" \\ \n'),
        step("nan", entropy=math.nan),
        step("inf", entropy=math.inf),
        step("notes", notes=(StageNote("mirostat", "mu 4.8"), StageNote("xtc", "kept 3"))),
        step("lone \ud800 surrogate"),
    ]
    for record in records:
        ours = json.loads(_dumps(record))
        theirs = json.loads(json.dumps(step_to_dict(record), ensure_ascii=False))
        assert same(ours, theirs), record.text


def test_read_back_into_the_same_record():
    record = step("back", notes=(StageNote("mirostat", "mu 4.8"),))
    (back,) = read_steps([json.loads(_dumps(record))])
    assert back == record
