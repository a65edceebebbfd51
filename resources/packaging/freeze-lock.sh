#!/usr/bin/env bash
# Write the lock (pip's constraints file) from a venv the test suite passed in:
#   resources/packaging/freeze-lock.sh VENV_PYTHON OUT
# `make upgrade` calls it on its fresh venv after `make test`'s command passed there.
# Every line is `name==version` from `pip freeze --all --exclude-editable` (pip, setuptools and
# the build tools included; the project itself, installed editable, left out), but torch's:
# the Makefile's TORCH_SPEC pins torch (the CPU wheel by default, a CUDA build where the user
# asks), and a constraint on it would fight that choice.
set -euo pipefail
PY=$1
OUT=$2
freeze=$("$PY" -m pip freeze --all --exclude-editable | grep -viE '^torch==')
# A direct reference (`name @ file:///...`) would tie the lock to one machine's disk.
if odd=$(grep -vE '^[A-Za-z0-9][A-Za-z0-9._-]*==[^ ;@]+$' <<<"$freeze"); then
    echo "freeze-lock: not name==version, cannot lock: $odd" >&2
    exit 1
fi
where=$("$PY" -c 'import platform, sys; print(f"{sys.version_info[0]}.{sys.version_info[1]} {sys.platform} {platform.machine()}")')
{
    echo "# The exact versions of every Python package the test suite last passed with: pip's own"
    echo "# constraints file. The Makefile installs with \`-c constraints.txt\` (make setup, run, test,"
    echo "# package; CI), so a fresh machine gets what was tested. torch is left out: the Makefile's"
    echo "# TORCH_SPEC pins it (the CPU wheel by default, a CUDA build where asked)."
    echo "# Made by \`make upgrade\`: a fresh venv from pyproject.toml's ranges without this file, the"
    echo "# test suite run in it, then \`pip freeze --all --exclude-editable\` (freeze-lock.sh)."
    echo "# To refresh: \`make upgrade\`, then \`make setup\`, and commit this file."
    echo "# tests/test_lock.py checks it against the installed versions. Made on:"
    echo "# python: $where"
    echo "$freeze"
} >"$OUT.tmp"
mv "$OUT.tmp" "$OUT"
echo "freeze-lock: $(grep -vc '^#' "$OUT") pins written to $OUT ($where)"
