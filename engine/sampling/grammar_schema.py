"""When llguidance may read a JSON schema's ``oneOf`` as ``anyOf``: when no value can match two
alternatives, "exactly one" and "at least one" are the same constraint. The check here is
conservative (what it cannot prove disjoint stays refused, with the library's own message):
two alternatives are disjoint when their constants or enums share no value, when their types
share none (an integer is a number), or when both are objects requiring one property whose
constants share none (a tagged union: ``{"kind": {"const": "circle"}}``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

_NUMBER = {"integer", "number"}


def _values(alt: dict[str, Any]) -> set[tuple[str, Any]] | None:
    """An alternative's possible values when it lists them (const or enum), else None."""
    if "const" in alt:
        raw = [alt["const"]]
    elif isinstance(alt.get("enum"), list):
        raw = alt["enum"]
    else:
        return None
    out = set()
    for v in raw:
        if isinstance(v, bool) or v is None or isinstance(v, str):
            out.add(("json", json.dumps(v)))
        elif isinstance(v, (int, float)):
            out.add(("number", float(v)))  # 1 and 1.0 are one value in JSON Schema
        else:
            out.add(("json", json.dumps(v, sort_keys=True)))
    return out


def _types(alt: dict[str, Any]) -> set[str] | None:
    kind = alt.get("type")
    kinds = [kind] if isinstance(kind, str) else kind if isinstance(kind, list) else None
    if kinds is None or not all(isinstance(k, str) for k in kinds):
        return None
    out = set(kinds)
    return out | _NUMBER if out & _NUMBER else out


def _tag(alt: dict[str, Any]) -> dict[str, set[tuple[str, Any]]]:
    """A required property's listed values, by property name."""
    props, required = alt.get("properties"), alt.get("required")
    if not isinstance(props, dict) or not isinstance(required, list):
        return {}
    out = {}
    for name in required:
        sub = props.get(name) if isinstance(name, str) else None
        values = _values(sub) if isinstance(sub, dict) else None
        if values is not None:
            out[name] = values
    return out


def disjoint(a: Any, b: Any) -> bool:
    """Whether no JSON value can match both alternatives (as far as can be shown)."""
    if not isinstance(a, dict) or not isinstance(b, dict) or "$ref" in a or "$ref" in b:
        return False
    va, vb = _values(a), _values(b)
    if va is not None and vb is not None:
        return not va & vb
    ta, tb = _types(a), _types(b)
    if ta is not None and tb is not None and not ta & tb:
        return True
    tags_a, tags_b = _tag(a), _tag(b)
    return any(not tags_a[k] & tags_b[k] for k in tags_a.keys() & tags_b.keys())


def _one_ofs(node: Any) -> Iterator[list[Any]]:
    """Every ``oneOf`` list in a schema, nested ones too (an explicit stack: no recursion)."""
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if isinstance(item.get("oneOf"), list):
                yield item["oneOf"]
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def one_of_is_disjoint(schema_text: str) -> bool:
    """True when the schema has a ``oneOf`` and each one's alternatives are pairwise disjoint."""
    try:
        schema = json.loads(schema_text)
    except (ValueError, RecursionError):
        return False  # the compiler names what is wrong with it
    groups = list(_one_ofs(schema))
    return bool(groups) and all(
        disjoint(x, y) for alts in groups for i, x in enumerate(alts) for y in alts[i + 1 :]
    )
