"""The house rules a reader relies on, checked on the source (HOUSE_STYLE.md): no module over
450 lines, no function over 60 lines, no import circle, engine/ free of Qt.

The few exceptions are named here with the reason, so adding one is a visible decision. What
is still over the limits today is listed as DEBT (issue 23) with its size: it may shrink, not
grow, and an entry that is back within the limits must be dropped from the list.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_MODULE, MAX_FUNCTION = 450, 60

# Declarative tables: data laid out as code, read top to bottom, not logic.
TABLE_MODULES: dict[str, str] = {}

# UI building: widget construction laid out in the order it appears on screen.
UI_BUILDING = {
    "gui/classroom/lesson_panel.py:LessonPanel.__init__": "the lesson panel's widgets",
    "gui/controls/method_panel.py:MethodPanel.__init__": "the method panel's widgets",
}


# Still to split (issue 23): path or path:function -> its size today, the most it may have.
DEBT: dict[str, int] = {}
# Import circles still to break (issue 23), each as its sorted module list.
DEBT_CIRCLES: list[list[str]] = []


def sources() -> list[Path]:
    files = [*ROOT.glob("engine/**/*.py"), *ROOT.glob("gui/**/*.py"), ROOT / "main.py"]
    return sorted(f for f in files if ".venv" not in f.parts)


def rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def functions(tree: ast.AST, prefix: str = "") -> Iterator[tuple[str, ast.AST]]:
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield prefix + node.name, node
            yield from functions(node, prefix + node.name + ".")
        elif isinstance(node, ast.ClassDef):
            yield from functions(node, prefix + node.name + ".")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports(path: Path, names: set[str], type_hints: bool = False) -> set[str]:
    """The project modules ``path`` imports, anywhere in the file except under
    ``if TYPE_CHECKING:`` (those too with ``type_hints``: a circle through a type hint is
    still a circle to a reader)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip: set[int] = set()
    for node in ast.walk(tree):
        if type_hints:
            break
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for child in node.body for n in ast.walk(child))
    found: set[str] = set()
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*up, base] if base else up)
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names)
    return {n for n in found if n in names}


def test_no_module_is_over_the_limit() -> None:
    over = {
        rel(f): n
        for f in sources()
        if (n := f.read_text(encoding="utf-8").count("\n")) > MAX_MODULE
        and rel(f) not in TABLE_MODULES
        and n > DEBT.get(rel(f), 0)
    }
    assert not over, f"modules over {MAX_MODULE} lines (split them by job): {over}"


def test_no_function_is_over_the_limit() -> None:
    over = {}
    for f in sources():
        for name, node in functions(ast.parse(f.read_text(encoding="utf-8"))):
            length = node.end_lineno - node.lineno + 1  # type: ignore[attr-defined]
            key = f"{rel(f)}:{name}"
            if length > max(MAX_FUNCTION, DEBT.get(key, 0)) and key not in UI_BUILDING:
                over[key] = length
    assert not over, f"functions over {MAX_FUNCTION} lines: {over}"


def test_the_exceptions_still_exist() -> None:
    """An exception whose function is gone or short again is dropped from the list."""
    found = {
        f"{rel(f)}:{name}": node.end_lineno - node.lineno + 1  # type: ignore[attr-defined]
        for f in sources()
        for name, node in functions(ast.parse(f.read_text(encoding="utf-8")))
    }
    stale = [k for k in UI_BUILDING if found.get(k, 0) <= MAX_FUNCTION]
    assert not stale, f"listed as long UI building but not (or no longer) long: {stale}"
    found.update({rel(f): f.read_text(encoding="utf-8").count("\n") for f in sources()})
    paid = [k for k in DEBT if found.get(k, 0) <= (MAX_FUNCTION if ":" in k else MAX_MODULE)]
    assert not paid, f"within the limits now: drop them from DEBT: {paid}"


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on.add(start)
        while work:
            node, it = work[-1]
            advanced = False
            for nxt in it:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    advanced = True
                    break
                if nxt in on:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    top = stack.pop()
                    on.discard(top)
                    component.append(top)
                    if top == node:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return out


def test_no_import_circle() -> None:
    """Package ``__init__`` modules that only re-export are left out (importing a submodule
    runs its package's ``__init__`` but does not depend on it)."""
    files = {module_name(f): f for f in sources()}
    names = set(files)
    graph = {name: imports(path, names) - {name} for name, path in files.items()}
    found = cycles(graph)
    new = [c for c in found if c not in DEBT_CIRCLES]
    assert not new, f"import circles: {new}"
    gone = [c for c in DEBT_CIRCLES if c not in found]
    assert not gone, f"broken now: drop them from DEBT_CIRCLES: {gone}"


def test_the_engine_never_imports_qt_or_the_window() -> None:
    bad = {}
    for f in ROOT.glob("engine/**/*.py"):
        tree = ast.parse(f.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            for n in names:
                if n.split(".")[0] in {"PySide6", "pyqtgraph", "gui", "shiboken6"}:
                    bad.setdefault(rel(f), []).append(n)
    assert not bad, f"engine modules importing Qt or the window: {bad}"


# -- the window as a house of parts (gui/README.md) ---------------------------------------------

GUI_MAX_MODULE = 400
# Each gui folder and the folders it may import from (besides itself). A feature reaches
# another feature only through that feature's ``api`` module; nothing imports the shell but
# the developer tools, which sit on top.
FEATURES = ("models", "run", "tree", "score", "inside", "experiments", "classroom")
BELOW = {
    "common": set(),
    "core": {"common"},
    "controls": {"common", "core"},
    **{f: {"common", "core", "controls"} for f in FEATURES},
    "shell": {"common", "core", "controls", *FEATURES},
    "devtools": {"common", "core", "controls", *FEATURES, "shell"},
}


def gui_graph(type_hints: bool) -> dict[str, set[str]]:
    files = {module_name(f): f for f in sources() if rel(f).startswith("gui/")}
    names = set(files)
    return {name: imports(path, names, type_hints) - {name} for name, path in files.items()}


def test_gui_has_no_import_circle_counting_type_hints() -> None:
    assert cycles(gui_graph(type_hints=True)) == []


def test_gui_parts_import_only_what_lies_below_them() -> None:
    bad = []
    for name, targets in gui_graph(type_hints=True).items():
        parts = name.split(".")
        if len(parts) < 3:  # gui/__init__.py
            continue
        home = parts[1]
        assert home in BELOW, f"{name}: a gui folder the house rules do not know: {home}"
        for target in targets:
            there = target.split(".")
            if len(there) < 3 or there[1] == home:
                continue
            through_api = there[1] in FEATURES and there[2] == "api" and home in FEATURES
            if there[1] not in BELOW[home] and not through_api:
                bad.append(f"{name} -> {target}")
    assert not bad, f"imports against the gui's layers: {bad}"


def test_no_gui_module_is_over_400_lines() -> None:
    over = {
        rel(f): n
        for f in sources()
        if rel(f).startswith("gui/") and (n := f.read_text(encoding="utf-8").count("\n")) > 400
    }
    assert not over, f"gui modules over {GUI_MAX_MODULE} lines: {over}"


def test_no_part_is_given_the_window() -> None:
    """A part's constructor takes what it uses (gui.core.session), never the main window: no
    parameter annotated as the window or left untyped as ``Any`` named like it."""
    bad = []
    for f in sources():
        if not rel(f).startswith("gui/") or rel(f).startswith(
            ("gui/shell/window.py", "gui/devtools")
        ):
            continue
        for name, node in functions(ast.parse(f.read_text(encoding="utf-8"))):
            if not name.endswith("__init__"):
                continue
            for arg in node.args.args[1:]:  # type: ignore[attr-defined]
                hint = ast.unparse(arg.annotation) if arg.annotation else ""
                if "MainWindow" in hint or "QMainWindow" in hint or hint.endswith("Host"):
                    bad.append(f"{rel(f)}:{name}({arg.arg}: {hint})")
                elif arg.arg in ("w", "window", "host") and hint in ("", "Any"):
                    bad.append(f"{rel(f)}:{name}({arg.arg}: {hint or 'untyped'})")
    assert not bad, f"parts given the window: {bad}"
