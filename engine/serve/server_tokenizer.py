"""A served model's tokenizer when no local copy is at hand: the server's ``/tokenize`` and
``/detokenize`` (vLLM's routes), asked ONCE per reply, never once per token.

A step needs several texts: the piece its token adds to the output (two decodes, before and
after it) and each new candidate's text. They go in one ``/detokenize`` request, joined by a
marker the tokenizer spells as itself ("\\x1e\\x1f\\x1e", control characters no token text
holds), and the answer is split there; each piece is then kept. The marker is learned once
(one ``/tokenize`` and one ``/detokenize``); a tokenizer that cannot spell it is asked one
text at a time. Each request has its own time bound (``TOKENIZER_DEADLINE_S``)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

MARK = "\x1e\x1f\x1e"
MAX_KEPT = 50_000  # texts kept (one per token and a few per step): bounded memory


class ServerTokenizer:
    """A tokenizer that asks the server; texts of token sequences are kept once known."""

    chat_template = None

    def __init__(self, client: Any) -> None:
        self.client = client
        self.eos_token_id = None
        self._texts: dict[tuple[int, ...], str] = {}
        self._mark: list[int] | None = None
        self._mark_known = False

    def __call__(self, text: str, add_special_tokens: bool = True) -> dict[str, list[int]]:
        return {"input_ids": self.client.tokenize(text, add_special_tokens)}

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        key = tuple(int(i) for i in ids)
        if not key:
            return ""
        if key not in self._texts:
            self._keep(key, self.client.detokenize(list(key)))
        return self._texts[key]

    def convert_ids_to_tokens(self, token_id: int) -> str:
        return f"<{token_id}>"

    def _keep(self, key: tuple[int, ...], text: str) -> None:
        if len(self._texts) >= MAX_KEPT:
            self._texts.clear()
        self._texts[key] = text

    def prefetch(self, groups: Iterable[Sequence[int]]) -> None:
        """Learn the text of every group (a token sequence) not known yet, in one request."""
        todo = list(dict.fromkeys(tuple(int(i) for i in g) for g in groups if len(g)))
        todo = [g for g in todo if g not in self._texts]
        mark = self._marker() if len(todo) > 1 else None
        if not todo or mark is None:
            for group in todo:  # one text, or a tokenizer that cannot spell the marker
                self.decode(group)
            return
        joined: list[int] = []
        for group in todo:  # the marker before each group: every group decodes mid-text
            joined += [*mark, *group]
        parts = self.client.detokenize(joined).split(MARK)
        if len(parts) != len(todo) + 1 or parts[0]:
            for group in todo:
                self.decode(group)
            return
        for group, text in zip(todo, parts[1:], strict=True):
            self._keep(group, text)

    def _marker(self) -> list[int] | None:
        if not self._mark_known:
            self._mark_known = True
            ids = self.client.tokenize(MARK, add_special_tokens=False)
            if ids and self.client.detokenize(ids) == MARK:
                self._mark = list(ids)
        return self._mark


def prefetch_step(track: Any, token: int, candidates: Sequence[int]) -> None:
    """Before a step's record is made: the texts ``TextTrack.push(token)`` and its ``show``
    of each candidate will ask for, fetched in one request (a served tokenizer only)."""
    detok = getattr(track, "detok", None)
    tok = getattr(detok, "tokenizer", None)
    if not isinstance(tok, ServerTokenizer) or detok is None:
        return
    ids = detok.ids[detok._prefix :]
    before, after = detok.ids[detok._prefix : detok._read], [*ids, token]
    shown = getattr(track.show, "_cache", {})
    singles = [[t] for t in dict.fromkeys([token, *candidates]) if t not in shown]
    tok.prefetch([before, after, *singles])
