"""Writing a run to files: JSON (everything), CSV (one row per step), Markdown (the text).
Files are written atomically: to a temporary name first, then renamed."""

from __future__ import annotations

import csv
import io
import json
import os
import tempfile
from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

from engine.records import Step

CSV_COLUMNS = (
    "index", "token_id", "token_str", "text", "prob", "raw_prob", "rank", "survivors",
    "entropy", "entropy_raw", "step_time", "tokens_per_s", "forced", "source",
)  # fmt: skip


STEP_FIELDS = tuple(f.name for f in fields(Step) if f.name not in ("candidates", "stage_notes"))


def write_atomic(path: str | os.PathLike[str], data: str) -> Path:
    """Write text to ``path`` via a temporary file in the same folder and a rename."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def step_to_dict(step: Step) -> dict[str, Any]:
    """A record as plain JSON types (much faster than dataclasses.asdict on long runs)."""
    out = {f: getattr(step, f) for f in STEP_FIELDS}
    out["candidates"] = [
        {
            "token_id": c.token_id,
            "text": c.text,
            "raw_prob": c.raw_prob,
            "prob": c.prob,
            "cut_by": c.cut_by,
            # what a penalty did, only where one did (keeps long runs' files small)
            **(
                {"penalised_by": c.penalised_by, "before_p": c.before_p, "after_p": c.after_p}
                if c.penalised_by
                else {}
            ),
        }
        for c in step.candidates
    ]
    if step.stage_notes:
        out["stage_notes"] = [[n.stage, n.text] for n in step.stage_notes]
    return out


def run_to_dict(
    prompt: str, model: str, settings: dict[str, Any], steps: Sequence[Step]
) -> dict[str, Any]:
    return {
        "format": "decoding-lab-run/1",
        "prompt": prompt,
        "model": model,
        "settings": settings,
        "text": "".join(s.text for s in steps),
        "steps": [step_to_dict(s) for s in steps],
    }


def run_to_json(prompt: str, model: str, settings: dict[str, Any], steps: Sequence[Step]) -> str:
    return json.dumps(run_to_dict(prompt, model, settings, steps), indent=1, ensure_ascii=False)


def run_to_csv(steps: Sequence[Step]) -> str:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(CSV_COLUMNS)
    for s in steps:
        writer.writerow([getattr(s, c) for c in CSV_COLUMNS])
    return out.getvalue()


def run_to_markdown(
    prompt: str, model: str, settings: dict[str, Any], steps: Sequence[Step]
) -> str:
    changed = ", ".join(f"{k}={v}" for k, v in settings.items())
    text = "".join(s.text for s in steps)
    return (
        f"# Decoding Lab run\n\n**Model:** {model}  \n**Settings:** {changed}\n\n"
        f"## Prompt\n\n{prompt}\n\n## Output ({len(steps)} tokens)\n\n{text}\n"
    )


def steps_from_dict(data: dict[str, Any]) -> list[Step]:
    """Rebuild records from ``run_to_dict`` output (for restoring an autosaved run). Fields a
    newer or older version wrote and this one does not know are ignored."""
    from dataclasses import fields

    from engine.records import Candidate, StageNote

    step_fields = {f.name for f in fields(Step)}
    cand_fields = {f.name for f in fields(Candidate)}
    steps = []
    for raw in data.get("steps", []):
        raw = {k: v for k, v in raw.items() if k in step_fields}
        raw["candidates"] = tuple(
            Candidate(**{k: v for k, v in c.items() if k in cand_fields})
            for c in raw.get("candidates", ())
        )
        raw["stage_notes"] = tuple(StageNote(*n) for n in raw.get("stage_notes", ()))
        steps.append(Step(**raw))
    return steps
