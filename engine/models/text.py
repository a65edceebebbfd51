"""Token ids to text: the growing output (correct across multi-byte characters) and the
display string of single tokens."""

from __future__ import annotations

import codecs
import functools
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


@functools.cache
def _byte_table() -> dict[str, int]:
    """The byte-level BPE alphabet (GPT-2, Llama 3, SmolLM2, Qwen): one printable character
    per byte, as the tokenizers write their vocabularies; empty when transformers lacks it."""
    try:
        from transformers.convert_slow_tokenizer import bytes_to_unicode
    except ImportError:
        return {}
    return {char: byte for byte, char in bytes_to_unicode().items()}


def _hex_bytes(err: UnicodeError) -> tuple[str, int]:
    """A codec error handler: the bytes that are no whole UTF-8 character, as ``<0xF0>``."""
    if not isinstance(err, UnicodeDecodeError):
        raise err
    return "".join(f"<0x{b:02X}>" for b in err.object[err.start : err.end]), err.end


codecs.register_error("decoding-lab-hex-bytes", _hex_bytes)


def show_bytes(data: bytes) -> str:
    """``data`` as text, each byte that is not part of a whole UTF-8 character written
    ``<0xF0>`` (the notation of byte-fallback vocabularies): b" \xf0\x9f" gives
    " <0xF0><0x9F>"."""
    return data.decode("utf-8", errors="decoding-lab-hex-bytes")


class TokenTable:
    """Display strings of single tokens, decoded once and kept. A token that is part of a
    character (a lone byte of an emoji or an accented letter) shows its bytes, ``<0xF0><0x9F>``,
    rather than U+FFFD or the vocabulary's byte alphabet ("ðŁ")."""

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
                    text = self._raw(token_id)
            self._cache[token_id] = text
        return text

    def _raw(self, token_id: int) -> str:
        raw = self.tokenizer.convert_ids_to_tokens(token_id)
        if not isinstance(raw, str) or raw == "":
            return f"<{token_id}>"
        table = _byte_table()
        if all(char in table for char in raw):  # a byte-level BPE token: its bytes
            return show_bytes(bytes(table[char] for char in raw))
        if len(raw) == 1 and ord(raw) < 256:  # one byte as chr(byte) (ByT5's vocabulary)
            return show_bytes(bytes([ord(raw)]))
        return raw  # SentencePiece byte fallback is already "<0xF0>"


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
