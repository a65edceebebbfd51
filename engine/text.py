"""Token ids to text: the growing output (correct across multi-byte characters) and the
display string of single tokens."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class IncrementalDetokenizer:
    """Turns a growing list of ids into text pieces, correct for characters split across
    tokens: a piece is only emitted once it no longer ends in an incomplete character (U+FFFD);
    until then the token's piece is "" and a later token carries the whole character."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self._prefix = 0
        self._read = 0
        self._offsets: list[tuple[int, int]] = []  # (prefix, read) before each push

    def _decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=False)

    def push(self, token_id: int) -> str:
        self._offsets.append((self._prefix, self._read))
        self.ids.append(token_id)
        before = self._decode(self.ids[self._prefix : self._read])
        after = self._decode(self.ids[self._prefix :])
        if len(after) > len(before) and not after.endswith("\ufffd"):
            self._prefix, self._read = self._read, len(self.ids)
            return after[len(before) :]
        return ""

    def truncate(self, n: int) -> None:
        """Forget everything from the n-th pushed id on."""
        if n < len(self.ids):
            self._prefix, self._read = self._offsets[n]
            del self.ids[n:]
            del self._offsets[n:]


class TokenTable:
    """Display strings of single tokens, decoded once and kept."""

    def __init__(self, tokenizer: Any | None) -> None:
        self.tokenizer = tokenizer
        self._cache: dict[int, str] = {}

    def __call__(self, token_id: int) -> str:
        text = self._cache.get(token_id)
        if text is None:
            if self.tokenizer is None:
                text = f"<{token_id}>"
            else:
                text = self.tokenizer.decode([token_id], skip_special_tokens=False)
                if "\ufffd" in text or text == "":  # a lone byte: show the raw token instead
                    raw = self.tokenizer.convert_ids_to_tokens(token_id)
                    text = raw if isinstance(raw, str) else f"<{token_id}>"
            self._cache[token_id] = text
        return text


class TextTrack:
    """The text pieces of one growing sequence and the display string of each token: what a
    session needs to turn ids into ``Step`` text. Without a tokenizer pieces are ""."""

    def __init__(self, tokenizer: Any | None) -> None:
        self.detok = IncrementalDetokenizer(tokenizer) if tokenizer is not None else None
        self.show = TokenTable(tokenizer)
        # ids of special tokens (<|im_end|>, </s>, ...): views show them as marks, not text
        self.special_ids = frozenset(getattr(tokenizer, "all_special_ids", None) or ())

    def push(self, token_id: int) -> str:
        return self.detok.push(token_id) if self.detok is not None else ""

    def truncate(self, n: int) -> None:
        if self.detok is not None:
            self.detok.truncate(n)
