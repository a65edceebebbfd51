#!/usr/bin/env bash
# Builds llama.cpp's `llama-server` from source for the served-model tests (tests/remote,
# `make test-llama-server`), into its own cached folder. Idempotent: a stamp file records what
# was built and the script does nothing when it matches.
#
# Usage: resources/remote/setup_llama_server.sh [DIR]   (default: .llama-server)
#
# The source is llama.cpp as vendored in the sdist of `llama-cpp-python` on PyPI (pinned
# version and sha256 below), fetched with pip: no git clone, no other network.
# Build: CMake, Release, only the llama-server target, static (one file in DIR/bin),
# GGML_NATIVE=OFF: ggml then enables SSE4.2/AVX/AVX2/BMI2/FMA/F16C and nothing newer, so the
# binary runs on any x86-64-v3 CPU (the floor vLLM's CPU build also needs) and a cached folder
# restored on another machine does not die with SIGILL, as a -march=native build would on an
# older CPU. No curl/OpenSSL (the tests load a local GGUF), no web UI (no npm, no download).
set -euo pipefail

DIR="${1:-.llama-server}"
PYTHON="${PYTHON:-python3}"
JOBS="${JOBS:-2}"
VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
SHA256="${LLAMA_CPP_PYTHON_SHA256:-832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e}"
STAMP="$DIR/.built"
WANT="llama-cpp-python==$VERSION native=OFF static setup-rev-1"

if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$WANT" && -x "$DIR/bin/llama-server" ]]; then
    echo "llama-server up to date: $DIR/bin/llama-server ($WANT)"
    exit 0
fi

# shellcheck source=llama_build_checks.sh
source "$(dirname "$0")/llama_build_checks.sh"
llama_build_checks llama-server

start=$(date +%s)
rm -rf "$DIR/src" "$DIR/build" "$DIR/bin"
mkdir -p "$DIR/src" "$DIR/bin"
"$PYTHON" -m pip download "llama-cpp-python==$VERSION" --no-binary :all: --no-deps \
    -d "$DIR/src" -q
SDIST="$DIR/src/llama_cpp_python-$VERSION.tar.gz"
echo "$SHA256  $SDIST" | sha256sum -c -
tar -xzf "$SDIST" -C "$DIR/src" "llama_cpp_python-$VERSION/vendor/llama.cpp"
SRC="$DIR/src/llama_cpp_python-$VERSION/vendor/llama.cpp"
rm -f "$SRC/.git"  # a submodule pointer to a repository the sdist does not hold

GENERATOR=()
command -v ninja >/dev/null 2>&1 && GENERATOR=(-G Ninja)
cmake -S "$SRC" -B "$DIR/build" "${GENERATOR[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DGGML_NATIVE=OFF -DBUILD_SHARED_LIBS=OFF -DGGML_CCACHE=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON \
    -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
    -DLLAMA_BUILD_NUMBER=0 -DLLAMA_BUILD_COMMIT="llama-cpp-python-$VERSION" >"$DIR/cmake.log"
cmake --build "$DIR/build" --target llama-server -j "$JOBS" >"$DIR/build.log" 2>&1 || {
    tail -30 "$DIR/build.log" >&2
    exit 1
}
cp "$DIR/build/bin/llama-server" "$DIR/bin/llama-server"
"$DIR/bin/llama-server" --version 2>&1 | tail -3
# The sources and objects are a few hundred MB; the binary is all the tests need.
rm -rf "$DIR/src" "$DIR/build"
echo "$WANT" >"$STAMP"
echo "llama-server ready: $DIR/bin/llama-server (built in $(($(date +%s) - start)) s)"
