"""The front door and the guides behind it: README.md stays short; every link of the README and
the guides (resources/docs/*.md) reaches a file that exists and, with #anchor, a heading there;
every `main.py ...` command they show parses with the real command line, every `make X` names
a target of the Makefile; every section the README held before the guides took it over is a
heading of some guide; and the guides tell no history (no issue numbers)."""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path

import pytest

from engine.cli import build_parser
from gui.shell.help import anchors

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "resources" / "docs"
README = ROOT / "README.md"
GUIDES = sorted(DOCS.glob("*.md"))
PAGES = [README, *GUIDES]

# The README's section headings when it held everything (1,073 lines), each now a heading of a
# guide (its title, "Decoding Lab", stays the README's).
README_SECTIONS_BEFORE = [
    "Set-up: two commands (Linux, fresh machine, Python 3.10+ and `make`)",
    "The window",
    "Presentation view (F5)",
    "For teachers: lessons, guess rounds and shared runs",
    "Run a lesson",
    "Run a guess round",
    "Share a run",
    "Write your own lesson",
    "Headless CLI",
    "Decoding strategies: every one, its reference and its test",
    "Sampler stages",
    "Search methods",
    "What each step records",
    "Comparing presets",
    "Speed and the benchmark",
    "Desktop package and self-test",
    "Served models: vLLM, llama.cpp's llama-server, Ollama, SGLang",
    "Bundled models",
    "The engine (`engine/`, never imports Qt)",
    "Layout",
]

FENCE = re.compile(r"^```.*?^```", re.M | re.S)
LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)\)")


def prose(text: str) -> str:
    """The text without its code: fenced blocks and inline spans (a link inside them is an
    example, not a link)."""
    return re.sub(r"`[^`\n]*`", "", FENCE.sub("", text))


def headings(path: Path) -> list[str]:
    return [
        m[1].strip()
        for m in re.finditer(r"^#{1,6} (.+)$", FENCE.sub("", path.read_text("utf-8")), re.M)
    ]


def links(path: Path) -> list[str]:
    return LINK.findall(prose(path.read_text(encoding="utf-8")))


def test_the_readme_is_a_front_door():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 150, f"README.md has {len(lines)} lines; the rest belongs in a guide"
    # it shows the window, and points at every guide
    assert "resources/docs/images/main-window.png" in README.read_text(encoding="utf-8")
    named = {Path(t.split("#")[0]).name for t in links(README)}
    assert {g.name for g in GUIDES} - {"index.md"} <= named


def test_the_slug_spells_anchors_as_github_does():
    assert anchors(["Set-up: two commands (Linux, fresh machine, Python 3.10+ and `make`)"]) == [
        "set-up-two-commands-linux-fresh-machine-python-310-and-make"
    ]
    assert anchors(["The window's code (`gui/`)", "int8 / int4", "Tree", "Tree"]) == [
        "the-windows-code-gui", "int8--int4", "tree", "tree-1",
    ]  # fmt: skip


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_link_reaches_a_file_and_a_heading(page):
    bad = []
    for target in links(page):
        if re.match(r"[a-z]+:", target):  # the web, mail
            assert target.startswith(("https://", "http://", "mailto:")), target
            continue
        file, _, anchor = target.partition("#")
        where = (page.parent / file).resolve() if file else page
        if not where.exists():
            bad.append(f"{target}: no file {where}")
        elif anchor and anchor not in anchors(headings(where)):
            bad.append(f"{target}: no heading #{anchor} in {where.name}")
    assert not bad, f"{page.name}: {bad}"


def test_every_section_of_the_old_readme_is_in_a_guide():
    found = {h for g in GUIDES for h in headings(g)}
    missing = [h for h in README_SECTIONS_BEFORE if h not in found]
    assert not missing, f"sections of the old README in no guide: {missing}"


def test_the_guides_tell_no_history():
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        assert not re.search(r"\bissues? \d+", text, re.I), f"{page.name} names an issue"


SHELL_BLOCK = re.compile(r"^```(?:bash|sh|shell|console)\n(.*?)^```", re.M | re.S)


def commands(text: str) -> list[str]:
    """Every command a page shows: the lines of its shell blocks (joined where a line ends in
    a backslash) and its inline code spans."""
    shown = []
    for body in SHELL_BLOCK.findall(text):
        shown += [line for line in body.replace("\\\n", " ").splitlines() if line.strip()]
    shown += re.findall(r"`([^`\n]+)`", FENCE.sub("", text))
    return shown


def main_py_argv(command: str) -> tuple[bool, list[str]] | None:
    """(whole, the arguments after `main.py`) for a command that runs `main.py` (or
    `decoding-lab-cli`), None for any other. A command is whole when it names the interpreter
    (`.venv/bin/python main.py ...`); a bare `main.py tree` in prose names a command and some
    of its options, not all it needs."""
    try:
        words = shlex.split(command, comments=True)
    except ValueError:
        return None  # not a shell line (a code span of prose)
    for i, word in enumerate(words):
        if word.endswith("main.py") or word == "decoding-lab-cli":
            return i > 0 or word == "decoding-lab-cli", words[i + 1 :]
    return None


def check_main_py(argv: list[str], whole: bool = True) -> str | None:
    """None when `main.py` accepts these arguments as main.main reads them, else why not."""
    if "--self-test" in argv:  # the self-test, with an optional folder
        return None if len(argv) <= 2 else "--self-test takes one folder"
    if any(a in ("-h", "--help") for a in argv):
        argv = [a for a in argv if a not in ("-h", "--help")]
    elif not argv or argv[0].startswith("-"):  # the window: its one option
        unknown = [a for a in argv if a != "--presentation"]
        return f"the window takes no {unknown}" if unknown else None
    parser = build_parser()
    if not whole:  # a command named in prose: the command and the options it names exist
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        if not argv:
            return None
        if argv[0] not in sub.choices:
            return f"no command {argv[0]}"
        known = sub.choices[argv[0]]._option_string_actions
        unknown = [a for a in argv[1:] if a.startswith("-") and a.split("=")[0] not in known]
        return f"{argv[0]} has no {unknown}" if unknown else None
    try:
        parser.parse_args(argv)
    except SystemExit as exc:
        return f"argparse exit {exc.code}"
    return None


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_main_py_command_parses(page, capsys):
    bad = []
    for command in commands(page.read_text(encoding="utf-8")):
        found = main_py_argv(command)
        if found is None:
            continue
        why = check_main_py(found[1], whole=found[0])
        said = capsys.readouterr().err.strip().splitlines()
        if why:
            bad.append(f"{command!r}: {why}: {said[-1] if said else ''}")
    assert not bad, bad


def test_the_readme_and_the_user_guide_show_commands():
    # the check above has something to check
    for page in (README, DOCS / "cli.md", DOCS / "user-guide.md"):
        shown = [main_py_argv(c) for c in commands(page.read_text(encoding="utf-8"))]
        assert any(found and found[0] for found in shown), page


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_make_command_is_a_target(page):
    targets = set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(encoding="utf-8"), re.M))
    bad = []
    for command in commands(page.read_text(encoding="utf-8")):
        words = command.split()
        if len(words) > 1 and words[0] == "make" and words[1] not in targets | {"VAR=value"}:
            bad.append(command)
    assert not bad, bad


def test_the_architecture_guide_maps_every_folder():
    text = (DOCS / "architecture.md").read_text(encoding="utf-8")
    for top in ("engine", "gui"):
        for folder in sorted(p.name for p in (ROOT / top).iterdir() if p.is_dir()):
            if folder != "__pycache__":
                assert f"{folder}/" in text, f"{top}/{folder}/ is on no map of architecture.md"
    # gui/README.md's map, beside the code, is the guide's
    gui_readme = (ROOT / "gui" / "README.md").read_text(encoding="utf-8")
    assert FENCE.search(gui_readme)[0] in text


def test_the_package_carries_the_guides():
    spec = (ROOT / "resources" / "packaging" / "decoding-lab.spec").read_text(encoding="utf-8")
    assert re.search(r'"resources" / "docs"\), "resources/docs"', spec)
