"""engine/ never imports Qt or gui/: every submodule is imported, then sys.modules is checked;
and the source of every engine module is read for such imports (a lazy one inside a function
would escape the first check)."""

import ast
import pkgutil
import subprocess
import sys
from pathlib import Path

import engine

FORBIDDEN = ("PySide6", "shiboken6", "pyqtgraph", "gui")
ROOT = Path(engine.__file__).parent

IMPORT_ALL = """
import importlib, json, pkgutil, sys
import engine
names = [m.name for m in pkgutil.walk_packages(engine.__path__, "engine.")]
for name in names:
    importlib.import_module(name)
loaded = sorted({m.split(".")[0] for m in sys.modules})
print(json.dumps({"modules": names, "top": loaded}))
"""


def engine_modules() -> list[str]:
    return [m.name for m in pkgutil.walk_packages(engine.__path__, "engine.")]


def test_every_engine_module_imports_without_qt():
    import json

    out = subprocess.run(
        [sys.executable, "-c", IMPORT_ALL], capture_output=True, text=True, check=True
    )
    data = json.loads(out.stdout.strip().splitlines()[-1])
    assert set(data["modules"]) == set(engine_modules())
    assert len(data["modules"]) >= 15  # the walk really found the submodules
    leaked = [m for m in data["top"] if m in FORBIDDEN]
    assert not leaked, f"importing the engine loaded {leaked}"


def imported_names(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_no_engine_source_imports_qt_or_gui_anywhere():
    files = sorted(ROOT.rglob("*.py"))
    assert len(files) >= 15
    offenders = {
        str(p.relative_to(ROOT)): sorted(imported_names(p) & set(FORBIDDEN)) for p in files
    }
    assert not {k: v for k, v in offenders.items() if v}


def test_the_source_check_catches_a_lazy_qt_import(tmp_path):
    sneaky = tmp_path / "sneaky.py"
    sneaky.write_text("def later():\n    from PySide6.QtCore import QTimer\n    return QTimer\n")
    assert "PySide6" in imported_names(sneaky)
