#!/usr/bin/env bash
# Installs llama-cpp-python (llama.cpp's Python binding) into the project's venv from its
# pinned sdist, for the comparisons that read llama.cpp's own logits (tests/engine/
# test_quant_gguf.py) and the bench's llama.cpp rows. Optional: where it cannot be built the
# tests skip and say why. Idempotent: does nothing when that version is installed.
#
# Usage: PYTHON=.venv/bin/python resources/remote/setup_llama_cpp_python.sh
#
# The sdist is the one setup_llama_server.sh builds llama-server from (same version and
# sha256), downloaded with pip into .llama-server/src. GGML_NATIVE=OFF, as there, so the
# library runs on any x86-64-v3 CPU; llama.cpp's tools, examples, tests and server are not
# built (the binding needs only the libraries): 3 min 38 s on 2 cores.
set -euo pipefail

PYTHON="${PYTHON:-python3}"
VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
SHA256="${LLAMA_CPP_PYTHON_SHA256:-832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e}"
SRC_DIR="${LLAMA_SERVER_DIR:-.llama-server}/src"

if [[ "$("$PYTHON" -c 'import importlib.metadata as m; print(m.version("llama_cpp_python"))' \
        2>/dev/null || true)" == "$VERSION" ]]; then
    echo "llama-cpp-python $VERSION is installed"
    exit 0
fi
# shellcheck source=llama_build_checks.sh
source "$(dirname "$0")/llama_build_checks.sh"
llama_build_checks llama-cpp-python

SDIST="$SRC_DIR/llama_cpp_python-$VERSION.tar.gz"
if [[ -f "$SDIST" ]] && ! echo "$SHA256  $SDIST" | sha256sum -c - >/dev/null 2>&1; then
    rm -f "$SDIST"  # a partial or damaged download: fetch it again
fi
if [[ ! -f "$SDIST" ]]; then
    mkdir -p "$SRC_DIR"
    "$PYTHON" -m pip download "llama-cpp-python==$VERSION" --no-binary :all: --no-deps \
        -d "$SRC_DIR" -q
fi
echo "$SHA256  $SDIST" | sha256sum -c -

start=$(date +%s)
CMAKE_ARGS="-DGGML_NATIVE=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
-DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF" CMAKE_BUILD_PARALLEL_LEVEL="${JOBS:-2}" \
    "$PYTHON" -m pip install -q "$SDIST"
echo "llama-cpp-python $VERSION built and installed in $(( $(date +%s) - start )) s"
