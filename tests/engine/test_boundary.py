import subprocess
import sys


def test_import_engine_leaves_qt_out():
    code = "import sys, engine; print(any(m.startswith('PySide6') for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
