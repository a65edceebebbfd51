#!/usr/bin/env bash
# Build the one-folder app into dist/decoding-lab, then run the built executable's self-test
# from a clean environment (no .venv on PATH, no PYTHONPATH, offline).
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}
"$PY" -m pip install -q "pyinstaller==6.22.3" "pyinstaller-hooks-contrib==2026.9"
start=$(date +%s)
"$PY" -m PyInstaller --noconfirm --clean --log-level WARN \
    --distpath dist --workpath build/pyinstaller resources/packaging/decoding-lab.spec
echo "build: $(( $(date +%s) - start )) s; size: $(du -sh dist/decoding-lab | cut -f1)"
out=$(mktemp -d)
cd "$out"
env -i HOME="$HOME" PATH=/usr/bin:/bin QT_QPA_PLATFORM=offscreen HF_HUB_OFFLINE=1 \
    "$OLDPWD/dist/decoding-lab/decoding-lab" --self-test "$out"
echo "screenshot and log in $out"
