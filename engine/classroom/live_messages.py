"""What the live round's server sends the students' page (JSON objects), built from the
round's state. No Qt. The page shows every text with ``textContent``, never as markup."""

from __future__ import annotations

from typing import Any

from engine.classroom.live import LiveRound, Question, Reveal, Scored, Student

WAIT = {"type": "wait", "message": "Wait for the teacher's question."}
ENDED = {"type": "ended", "message": "The round has ended. Thank you!"}
REMOVED = {"type": "removed", "message": "The teacher removed you from the round."}
CLOSED = {"type": "closed"}


def question(q: Question, answer: str | int | None = None) -> dict[str, Any]:
    return {"type": "question", "number": q.number, "mode": q.mode, "context": q.context,
            "choices": [c.text for c in q.choices], "answer": answer}  # fmt: skip


def _mine(r: Scored | None) -> dict[str, Any] | None:
    if r is None:
        return None
    return {"answer": r.answer, "token": r.token_text, "prob": r.prob, "bits": r.bits,
            "rank": r.rank, "picked": r.picked}  # fmt: skip


def reveal_for(v: Reveal, sid: int) -> dict[str, Any]:
    return {
        "type": "reveal", "number": v.question.number, "picked": v.token_text,
        "prob": v.model_prob, "top": [list(t) for t in v.top],
        "class_choice": v.class_choice is not None, "mine": _mine(v.results.get(sid)),
    }  # fmt: skip


def reveals(v: Reveal, sids: list[int]) -> dict[int, dict[str, Any]]:
    return {sid: reveal_for(v, sid) for sid in sids}


def welcome(round_: LiveRound, student: Student) -> list[dict[str, Any]]:
    """The state a student (re)joining is sent: the open question with their answer, or the
    last reveal, or a word to wait."""
    with round_.lock:
        q = round_.question
        if q is not None:
            out = [question(q, round_.answers.get(student.sid))]
            return out if round_.accepting else [*out, CLOSED]
        if round_.reveals:
            return [reveal_for(round_.reveals[-1], student.sid)]
        return [WAIT]
