"""The lock (constraints.txt, pip's constraints file) against what is installed.

A fresh machine gets the lock's versions (the Makefile installs with ``-c constraints.txt``),
so the lock must be what the tests run on: every pin equals the installed version, every
distribution the project needs (its requirements with the dev and package extras, followed
through their own requirements) is pinned, and torch, which the lock leaves to the Makefile's
TORCH_SPEC, satisfies it. A stale lock, a package moved by hand, or a dependency added to
pyproject.toml without ``make upgrade`` fails here.
"""

from __future__ import annotations

import importlib.metadata as md
import os
import re
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import InvalidVersion, Version

ROOT = Path(__file__).resolve().parents[1]
# `make upgrade` points this at its candidate lock, checked in its own venv before it is kept.
LOCK = ROOT / os.environ.get("DECODING_LAB_LOCK", "constraints.txt")
EXTRAS = ("dev", "package")
# Pinned by the Makefile's TORCH_SPEC (the CPU wheel by default, a CUDA build where asked);
# what torch itself requires is not followed (a CUDA build brings nvidia-* wheels and triton).
UNLOCKED = "torch"


def canonical(name: str) -> str:
    """A distribution name as PEP 503 normalises it."""
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_lock(text: str) -> dict[str, str]:
    """The lock's pins, canonical name -> version; comment and blank lines skipped."""
    pins: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, version = line.partition("==")
        if not sep or not name.strip() or not version.strip():
            raise ValueError(f"the lock's line is not name==version: {raw!r}")
        pins[canonical(name.strip())] = version.strip()
    return pins


def made_on(text: str) -> str | None:
    """The Python and OS the lock was made on (its `# python: 3.11 linux x86_64` line),
    as "3.11 linux"."""
    found = re.search(r"^# python: (\S+) (\S+)", text, re.MULTILINE)
    return f"{found[1]} {found[2]}" if found else None


def here() -> str:
    return f"{sys.version_info[0]}.{sys.version_info[1]} {sys.platform}"


def installed_version(name: str) -> str | None:
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None


def requirement_closure(root: str, extras: Iterable[str] = (), stop: str = UNLOCKED) -> set[str]:
    """Canonical names of every distribution ``root`` requires with ``extras``, followed
    through their requirements (with the extras each asks for), markers evaluated here. What
    ``stop`` requires is not followed; a distribution not installed is named, not followed."""
    seen: dict[str, frozenset[str]] = {}
    todo = [(root, frozenset(extras))]
    while todo:
        name, wanted = todo.pop()
        key = canonical(name)
        if key in seen and wanted <= seen[key]:
            continue
        seen[key] = seen.get(key, frozenset()) | wanted
        if key == canonical(stop) or installed_version(name) is None:
            continue
        for line in md.distribution(name).requires or []:
            req = Requirement(line)
            envs = [{"extra": e} for e in ("", *seen[key])]
            if req.marker is None or any(req.marker.evaluate(env) for env in envs):
                todo.append((req.name, frozenset(req.extras)))
    return set(seen) - {canonical(root)}


def disagreements(
    pins: dict[str, str],
    installed: Callable[[str], str | None],
    required: Iterable[str],
    torch_spec: str | None = None,
) -> list[str]:
    """Each way the lock and the installed versions disagree, one line each (none: in step)."""
    problems = []
    for name, version in sorted(pins.items()):
        have = installed(name)
        if name == canonical(UNLOCKED):
            problems.append(f"{name} is in the lock: the Makefile's TORCH_SPEC pins it")
        elif have is None:
            problems.append(f"{name}=={version} is locked but not installed")
        elif not same_version(have, version):
            problems.append(f"{name}: locked {version}, installed {have}")
    for name in sorted(set(required) - pins.keys() - {canonical(UNLOCKED)}):
        have = installed(name)
        state = f"installed {have}" if have else "not installed"
        problems.append(f"{name} is required but not in the lock ({state})")
    if torch_spec:
        req, have = Requirement(torch_spec), installed(UNLOCKED)
        if have is None or not req.specifier.contains(have, prereleases=True):
            problems.append(f"torch {have} does not satisfy TORCH_SPEC {torch_spec!r}")
    return problems


def same_version(a: str, b: str) -> bool:
    try:
        return Version(a) == Version(b)
    except InvalidVersion:
        return a == b


def test_the_lock_is_what_is_installed() -> None:
    text = LOCK.read_text(encoding="utf-8")
    made = made_on(text)
    assert made, f"{LOCK.name} has no '# python:' line (resources/packaging/freeze-lock.sh)"
    if made != here():
        pytest.skip(
            f"{LOCK.name} was made on Python {made}, this is {here()}: installed from "
            "pyproject.toml's ranges (resources/packaging/lock-args.sh)"
        )
    required = requirement_closure("decoding-lab", EXTRAS)
    problems = disagreements(
        parse_lock(text), installed_version, required, os.environ.get("DECODING_LAB_TORCH_SPEC")
    )
    assert not problems, (
        f"{LOCK.name} and this venv disagree (make setup installs the lock; make upgrade "
        "refreshes it):\n" + "\n".join(problems)
    )


def test_the_closure_follows_extras_and_requirements() -> None:
    required = requirement_closure("decoding-lab", EXTRAS)
    # an extra (dev, package), a direct requirement, and one only a requirement requires
    assert {"pytest", "pyinstaller", "transformers", "tokenizers", "torch"} <= required
    assert "pyinstaller" not in requirement_closure("decoding-lab")


LOCK_TEXT = """\
# python: 3.11 linux x86_64
Foo_Bar==1.0
baz==2.0.0
torch==2.13.0
"""


def test_a_disagreement_is_seen() -> None:
    pins = parse_lock(LOCK_TEXT)
    assert pins == {"foo-bar": "1.0", "baz": "2.0.0", "torch": "2.13.0"}
    assert made_on(LOCK_TEXT) == "3.11 linux"
    installed = {"foo-bar": "1.0", "baz": "2.1", "qux": "3", "torch": "2.13.0+cpu"}.get
    problems = disagreements(pins, installed, {"foo-bar", "baz", "qux", "quux"}, "torch==2.13.0")
    assert problems == [
        "baz: locked 2.0.0, installed 2.1",
        "torch is in the lock: the Makefile's TORCH_SPEC pins it",
        "quux is required but not in the lock (not installed)",
        "qux is required but not in the lock (installed 3)",
    ]
    # the CPU wheel's local version satisfies the Makefile's pin; another release does not
    assert disagreements({}, installed, (), "torch==2.13.0") == []
    assert disagreements({}, {"torch": "2.12.0"}.get, (), "torch==2.13.0") == [
        "torch 2.12.0 does not satisfy TORCH_SPEC 'torch==2.13.0'"
    ]
    assert disagreements({"gone": "1.0"}, installed, ()) == [
        "gone==1.0 is locked but not installed"
    ]
    assert disagreements({"foo-bar": "1.0.0"}, installed, {"foo-bar"}) == []


def test_a_line_that_is_not_a_pin_is_refused() -> None:
    with pytest.raises(ValueError, match="not name==version"):
        parse_lock("foo>=1.0\n")
