"""Composing YAML that may be hostile, inside bounds checked before and while it is read.

The safe loader already refuses Python tags. What it does not refuse: a huge file (the pure
Python scanner reads ~150 KB/s), nesting deep enough that the composer's recursion overflows,
and an alias bomb (a few lines whose anchors, expanded, are billions of nodes: construction or
``repr`` then exhausts memory). So: the size is checked first; the composer counts its depth
and its aliases as it goes and stops at the bound; and before anything is constructed, the
node graph's expanded size is counted (each node once, with memo) and refused past a bound."""

from __future__ import annotations

import yaml

from engine.validate.core import InputError
from engine.validate.limits import (
    MAX_LESSON_BYTES,
    MAX_YAML_ALIASES,
    MAX_YAML_DEPTH,
    MAX_YAML_NODES,
)


class _Limited(Exception):
    """Raised inside the composer; carries the line where a bound was passed."""

    def __init__(self, message: str, line: int) -> None:
        super().__init__(message)
        self.message, self.line = message, line


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader whose composer stops at a depth and an alias count."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._aliases = 0

    def compose_node(self, parent, index):  # noqa: ANN001, ANN201 - PyYAML's signature
        line = self.peek_event().start_mark.line + 1
        if self.check_event(yaml.AliasEvent):
            self._aliases += 1
            if self._aliases > MAX_YAML_ALIASES:
                raise _Limited(f"more than {MAX_YAML_ALIASES} aliases (*name)", line)
        self._depth += 1
        try:
            if self._depth > MAX_YAML_DEPTH:
                raise _Limited(f"nested more than {MAX_YAML_DEPTH} levels deep", line)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def expanded_size(root: yaml.Node, bound: int = MAX_YAML_NODES) -> int:
    """How many nodes constructing ``root`` would build, aliases expanded (stops counting past
    ``bound``). A node that contains itself (``&a [*a]``) counts as past the bound. Iterative,
    each node visited once."""
    sizes: dict[int, int] = {}
    open_: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        children = _children(node)
        if done:
            open_.discard(key)
            sizes[key] = min(bound + 1, 1 + sum(sizes[id(c)] for c in children))
            continue
        if key in sizes:
            continue
        if key in open_:  # reached again while its own children are being counted: a cycle
            return bound + 1
        open_.add(key)
        stack.append((node, True))
        stack.extend((c, False) for c in children if id(c) not in sizes)
    return sizes[id(root)]


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def compose_bounded(text: str, source: str, max_bytes: int = MAX_LESSON_BYTES) -> yaml.Node | None:
    """The YAML node tree of ``text`` (None for an empty document), inside the bounds;
    ``InputError`` naming the bound otherwise. YAML syntax errors propagate as
    ``yaml.YAMLError`` for the caller to word."""
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        raise InputError(f"it is {size // 1024} KB, over the {max_bytes // 1024} KB limit", source)
    loader = _BoundedLoader(text)
    try:
        root = loader.get_single_node()
    except _Limited as exc:
        raise InputError(f"line {exc.line}: {exc.message}", source) from None
    finally:
        loader.dispose()
    if root is not None and expanded_size(root) > MAX_YAML_NODES:
        raise InputError(
            f"its aliases expand to more than {MAX_YAML_NODES} values (or refer to themselves)",
            source,
        )
    return root
