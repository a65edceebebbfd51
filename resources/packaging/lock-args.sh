#!/usr/bin/env bash
# Print pip's `-c LOCK` for the Makefile's installs: resources/packaging/lock-args.sh PYTHON LOCK
# The lock is one machine's freeze: its `# python:` line names the Python and OS it was made on.
# On another Python a pin may not exist there (numpy 2.4 needs 3.11+) or be left out by a
# marker, so there it prints nothing and says why: pip installs from pyproject.toml's ranges
# (and tests/test_lock.py skips with the same reason). An empty LOCK (`make setup LOCK=`)
# installs from the ranges on purpose.
set -euo pipefail
PY=$1
LOCK=${2:-}
[ -n "$LOCK" ] || exit 0
made=$(sed -n 's/^# python: \([^ ]*\) \([^ ]*\).*/\1 \2/p' "$LOCK")
here=$("$PY" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]} {sys.platform}")')
if [ "$made" = "$here" ]; then
    echo "-c $LOCK"
else
    echo "WARNING: $LOCK was made on Python ${made:-?}, this is $here: installing from" \
        "pyproject.toml's ranges, not the tested versions" \
        "(on Linux: make setup PYTHON=python${made%% *} for those)" >&2
fi
