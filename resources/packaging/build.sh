#!/usr/bin/env bash
# Build the one-folder app into dist/decoding-lab, then run the built executable's self-test
# from a clean environment (no .venv on PATH, no PYTHONPATH, offline).
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}
# PyInstaller comes with the venv (pyproject.toml's `package` extra, its version from the lock).
"$PY" -c "import PyInstaller" 2>/dev/null || { echo "no PyInstaller in $PY: run make setup" >&2; exit 1; }
start=$(date +%s)
"$PY" -m PyInstaller --noconfirm --clean --log-level WARN \
    --distpath dist --workpath build/pyinstaller resources/packaging/decoding-lab.spec
echo "build: $(( $(date +%s) - start )) s; size: $(du -sm dist/decoding-lab | cut -f1) MB"
out=$(mktemp -d)
cd "$out"
# Offline for real where this machine allows a user namespace (a network namespace with no
# interface up); elsewhere HF_HUB_OFFLINE=1 alone keeps the Hub away.
netns=()
if unshare -rn true 2>/dev/null; then
    netns=(unshare -rn)
    echo "self-test: clean environment, no network (unshare -rn)"
else
    echo "self-test: clean environment, HF_HUB_OFFLINE=1 (no user namespace for unshare -rn here)"
fi
env -i HOME="$HOME" PATH=/usr/bin:/bin QT_QPA_PLATFORM=offscreen HF_HUB_OFFLINE=1 \
    ${netns[@]+"${netns[@]}"} "$OLDPWD/dist/decoding-lab/decoding-lab" --self-test "$out"
echo "screenshot and log in $out"
