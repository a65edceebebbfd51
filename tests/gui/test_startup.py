"""The window opens before the engine's heavy imports: torch and transformers load with the
first model, in the worker, so a user sees the window in well under a second."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

CHILD = """
import sys, tempfile, pathlib
from gui.devtools.harness import isolated_window
from gui.shell.app import make_app
app = make_app()
window = isolated_window(pathlib.Path(tempfile.mkdtemp()))
app.processEvents()
assert window.isVisible()
heavy = sorted(m for m in ("torch", "transformers") if m in sys.modules)
print("HEAVY", heavy)
window.close()
"""


def test_window_shows_without_importing_torch_or_transformers():
    out = subprocess.run(
        [sys.executable, "-c", CHILD], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "HEAVY []" in out.stdout, out.stdout


def test_engine_records_and_settings_import_without_torch():
    code = (
        "import sys\n"
        "import engine, engine.records, engine.sampling.settings, engine.errors, "
        "engine.classroom.export, engine.models.catalog, engine.models.loading, "
        "engine.sampling.checks\n"
        "from engine import SamplerSettings, PRESETS\n"
        "SamplerSettings(temperature=0.5, top_k=3)\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
        "from engine import GenerationSession\n"
        "assert 'torch' in sys.modules\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]


def test_pyside_import_hook_no_longer_reads_every_imported_module():
    import gui  # noqa: F401 - tames the hook on import

    feature = sys.modules.get("shibokensupport.feature")
    scan = getattr(feature, "_mod_uses_pyside", None)
    if scan is None:
        pytest.skip("this PySide has no import hook to tame")
    import json

    import gui.shell.window

    assert getattr(scan, "decoding_lab", False)
    assert scan(json) is False  # answered from the name: outside the app
    assert scan(gui.shell.window) is True  # the app's own modules are still read
