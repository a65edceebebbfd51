"""Writing a run to files: JSON (everything), CSV (one row per step), Markdown (the text).
Files are written atomically: to a temporary name first, then renamed, with the permissions
any new file gets (0666 less the umask; the autosave keeps 0600, it is the user's own).

Token text is untrusted: in CSV a cell that starts with ``=``, ``+``, ``-``, ``@``, a tab or a
carriage return gets a leading ``'`` (OWASP's advice against formula injection: a spreadsheet
would run it); in Markdown, HTML and Markdown syntax are escaped; text that cannot be encoded
(a lone surrogate) is written as U+FFFD, visibly, instead of failing the export."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.records import Step
from engine.words import count

if TYPE_CHECKING:
    from engine.tree import RunTree

CSV_COLUMNS = (
    "index", "token_id", "token_str", "text", "prob", "raw_prob", "rank", "survivors",
    "entropy", "entropy_raw", "step_time", "tokens_per_s", "forced", "source",
)  # fmt: skip


# A served model's fields are written only where they say something (a local run's files keep
# their shape; a reader restores the defaults).
SERVED_FIELDS = ("after_sampler", "server_sampler")
STEP_FIELDS = tuple(
    f.name for f in fields(Step) if f.name not in ("candidates", "stage_notes", *SERVED_FIELDS)
)


_SURROGATE = re.compile("[\ud800-\udfff]")
_umask_lock = threading.Lock()
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_MARKDOWN = re.compile(r"([\\`*_\[\]<>|~#!])")


def encodable(text: str) -> str:
    """``text`` with lone surrogates (which UTF-8 cannot hold) replaced by U+FFFD."""
    return _SURROGATE.sub("\ufffd", text)


def _new_file_mode() -> int:
    """0666 less the process umask: what ``open()`` would give a new file."""
    with _umask_lock:  # reading the umask means setting it: no other thread in between
        mask = os.umask(0o077)
        os.umask(mask)
    return 0o666 & ~mask


def write_atomic(path: str | os.PathLike[str], data: str, private: bool = False) -> Path:
    """Write text to ``path`` via a temporary file in the same folder and a rename. The file
    gets a new file's usual permissions, or 0600 when ``private``."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(encodable(data))
        if not private:
            os.chmod(tmp, _new_file_mode())  # mkstemp makes 0600: an export is to be shared
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
            # a served model's own sampler beside ours (llama-server), only where it said
            **({"server_prob": c.server_prob} if c.server_prob is not None else {}),
        }
        for c in step.candidates
    ]
    if step.stage_notes:
        out["stage_notes"] = [[n.stage, n.text] for n in step.stage_notes]
    if not step.after_sampler:
        out["after_sampler"] = False
    if step.server_sampler:
        out["server_sampler"] = step.server_sampler
    return out


def run_to_dict(
    prompt: str, model: str, settings: dict[str, Any], steps: Sequence[Step],
    tree: RunTree | None = None, ending: str = "",
) -> dict[str, Any]:  # fmt: skip
    """The run; with ``tree``, also every branch under ``"tree"`` (``decoding-lab-tree/1``, as
    ``RunTree.to_json`` writes it and ``RunTree.from_json`` reads it back). Without a tree the
    file is what it always was. ``ending``: the grammar's word on the output
    (``RunSummary.ending``: incomplete, or why the grammar stopped it), under ``"ending"``."""
    out = {
        "format": "decoding-lab-run/1",
        "prompt": prompt,
        "model": model,
        "settings": settings,
        "text": "".join(s.text for s in steps),
        "steps": [step_to_dict(s) for s in steps],
    }
    if tree is not None:
        out["tree"] = tree.to_json()
    if ending:
        out["ending"] = ending
    return out


def run_to_json(prompt: str, model: str, settings: dict[str, Any], steps: Sequence[Step],
                tree: RunTree | None = None, ending: str = "") -> str:  # fmt: skip
    """``run_to_dict`` as JSON text (File > Export passes the run store's tree)."""
    data = run_to_dict(prompt, model, settings, steps, tree, ending)
    return json.dumps(data, indent=1, ensure_ascii=False)


def csv_cell(value: Any) -> Any:
    """A cell a spreadsheet will not run: text starting with = + - @ tab or CR gets a ``'``."""
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value


def markdown_text(text: str) -> str:
    """Text shown as itself in Markdown: HTML and Markdown syntax escaped."""
    return (
        _MARKDOWN.sub(r"\\\1", text.replace("&", "&amp;"))
        .replace("\\<", "&lt;")
        .replace("\\>", "&gt;")
    )


def run_to_csv(steps: Sequence[Step]) -> str:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(CSV_COLUMNS)
    for s in steps:
        writer.writerow([csv_cell(getattr(s, c)) for c in CSV_COLUMNS])
    return out.getvalue()


def run_to_markdown(
    prompt: str, model: str, settings: dict[str, Any], steps: Sequence[Step], ending: str = ""
) -> str:
    changed = markdown_text(", ".join(f"{k}={v}" for k, v in settings.items()))
    text = markdown_text("".join(s.text for s in steps))
    model, prompt = markdown_text(model), markdown_text(prompt)
    note = f"\n\n**Note:** {markdown_text(ending)}" if ending else ""
    return (
        f"# Decoding Lab run\n\n**Model:** {model}  \n**Settings:** {changed}\n\n"
        f"## Prompt\n\n{prompt}\n\n## Output ({count(len(steps), 'token')})\n\n{text}{note}\n"
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
