"""Object keys that must not repeat: a small scanner over the bytes of JSON as it is written.

A context-free grammar (llguidance's JSON schema) cannot say "no key twice in one object" for
keys the schema leaves open ({"type": "object"}, additionalProperties), so a model could write
``"type"`` again and again until its budget ran out. The grammar stage keeps one ``JsonKeys``
per row: it follows the tokens taken and, at each step, names the candidate tokens that would
complete a key the open object already has (``repeats``). The text is valid JSON so far (the
grammar sees to that), so the scanner only tracks strings, containers and the object states.
"""

from __future__ import annotations

import json

QUOTE, BACKSLASH = 0x22, 0x5C
KEY, COLON, VALUE, COMMA = range(4)  # what an object expects next


class _Frame:
    """One open container: an object's keys and state (``keys`` None: an array). ``new``
    holds the keys a trial adds, so trying a token never changes the frames it shares."""

    __slots__ = ("keys", "new", "state")

    def __init__(self, keys: set[str] | None, state: int, new: set[str] | None = None) -> None:
        self.keys, self.state, self.new = keys, state, new

    def has(self, key: str) -> bool:
        return self.keys is not None and (
            key in self.keys or (self.new is not None and key in self.new)
        )

    def add(self, key: str) -> None:
        target = self.new if self.new is not None else self.keys
        if target is not None:
            target.add(key)


def _key(raw: bytes) -> str:
    try:
        return json.loads(b'"' + raw + b'"')
    except ValueError:  # half an escape or a broken byte: compare the bytes themselves
        return raw.decode("utf-8", "replace")


class JsonKeys:
    """Where the JSON written so far stands: open containers, and the string being written."""

    def __init__(self) -> None:
        self.stack: list[_Frame] = []
        self.buf: bytearray | None = None  # inside a string: its bytes so far
        self.is_key = False
        self.escape = False
        self.repeated: str | None = None  # a key that was written twice (a forced token)

    def trial(self) -> JsonKeys:
        """A copy to try a token on; the key sets are shared, not copied."""
        out = JsonKeys.__new__(JsonKeys)
        out.stack = [_Frame(f.keys, f.state, set()) for f in self.stack]
        out.buf = bytearray(self.buf) if self.buf is not None else None
        out.is_key, out.escape, out.repeated = self.is_key, self.escape, None
        return out

    def feed(self, data: bytes) -> bool:
        """Follow ``data``; True (and ``repeated`` set) when it completes a key its object
        already has. The scan stops there."""
        for c in data:
            if self.buf is not None:
                if self.escape:
                    self.escape = False
                elif c == BACKSLASH:
                    self.escape = True
                elif c == QUOTE:
                    if self._end_string():
                        return True
                    continue
                self.buf.append(c)
                continue
            self._structure(c)
        return False

    def _end_string(self) -> bool:
        raw, self.buf = bytes(self.buf or b""), None
        top = self.stack[-1] if self.stack else None
        if top is None or top.keys is None:
            return False
        if self.is_key:
            key = _key(raw)
            if top.has(key):
                self.repeated = key
                return True
            top.add(key)
            top.state = COLON
        else:
            top.state = COMMA
        return False

    def _structure(self, c: int) -> None:
        top = self.stack[-1] if self.stack else None
        if c == QUOTE:
            self.buf = bytearray()
            self.is_key = top is not None and top.keys is not None and top.state == KEY
        elif c == 0x7B:  # {
            self.stack.append(_Frame(set(), KEY))
        elif c == 0x5B:  # [
            self.stack.append(_Frame(None, VALUE))
        elif c in (0x7D, 0x5D):  # } ]
            if self.stack:
                self.stack.pop()
            if self.stack and self.stack[-1].keys is not None:
                self.stack[-1].state = COMMA
        elif top is not None and top.keys is not None:
            if c == 0x3A:  # :
                top.state = VALUE
            elif c == 0x2C:  # ,
                top.state = KEY

    def open_keys(self) -> bool:
        """Whether some open object has a key already (else no token can repeat one)."""
        return any(f.keys for f in self.stack)

    def repeats(self, candidates: dict[int, bytes]) -> list[int]:
        """The candidate tokens (id -> bytes) that would complete a key already written."""
        if not self.open_keys():
            return []
        return [t for t, data in candidates.items() if self.trial().feed(data)]
