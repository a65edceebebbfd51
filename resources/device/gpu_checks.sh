#!/usr/bin/env bash
# The checks a task with a GPU runs first, as one bounded command on the device machine
# (the device tool's `run`): the whole-token graph's CUDA tests, then the bench's GPU rows
# of section 11 (the pipelined session). Each part has its own time limit, so one that
# hangs or fails does not lose the others; logs and figures go to $OUT.
#
# There: torch and transformers are the machine's own; PySide6 is absent (the engine never
# imports Qt) and pydantic travels as wheels in .whl (carry: [".whl"]), made here with
# `pip download --no-deps --only-binary=:all: --python-version 3.12 ... -d .whl pydantic==...`.
# Usage: bash resources/device/gpu_checks.sh [tests|bench|static|row|section7]...
# (default: tests bench). Each part's limit is an environment variable (TESTS_S, BENCH_S, ...);
# the defaults add up to more than one device command may run (600 s): name two or three parts.
# Stop 42 on an H100: tests 44 s, bench 290 s, static 123 s, row 104 s.
set -u
PY=${PY:-python3}  # the machine's Python (there: the one that holds PyTorch)
OUT=${OUT:-/tmp/gpu-checks}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
if ls .whl/*.whl >/dev/null 2>&1; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
fi
"$PY" -c "import torch, transformers; print('torch', torch.__version__, 'transformers', \
transformers.__version__, torch.cuda.get_device_name() if torch.cuda.is_available() else 'no CUDA')" \
    2>&1 | tee "$OUT/versions.txt"
PYTEST=("$PY" -m pytest -q -p no:cacheprovider -p no:pytest-qt -rfEs -o timeout=120)
start=$(date +%s)
failed=0
part() {  # name, seconds, command...
    local name=$1 secs=$2
    shift 2
    echo "== $name (at most ${secs} s, $(($(date +%s) - start)) s in)" | tee -a "$OUT/parts.txt"
    timeout --kill-after=10 "$secs" "$@" 2>&1 | tee "$OUT/$name.log"
    local rc=${PIPESTATUS[0]}
    [ "$rc" -eq 0 ] || failed=1
    echo "== $name: exit $rc after $(($(date +%s) - start)) s" | tee -a "$OUT/parts.txt"
}
for what in "${@:-tests bench}"; do
    for w in $what; do
        case $w in
            tests) part tests "${TESTS_S:-150}" "${PYTEST[@]}" tests/engine/test_token_graph_cuda.py tests/engine/test_draw.py \
                tests/engine/test_warm_up.py -k "cuda" ;;
            bench) part bench "${BENCH_S:-300}" "$PY" main.py bench --gpu-only --pipeline \
                --new-tokens "${NEW_TOKENS:-128}" --json "$OUT/pipeline.json" ;;
            static) part static "${STATIC_S:-200}" "${PYTEST[@]}" tests/engine/test_static_step.py -k cuda ;;
            row) part row "${ROW_S:-200}" env PYTHONPATH=".:${PYTHONPATH:-}" "$PY" \
                resources/device/smollm2_row.py ;;
            section7) part section7 "${SECTION7_S:-300}" "$PY" main.py bench --gpu-only ;;
            *) echo "unknown part: $w"; failed=1 ;;
        esac
    done
done
exit $failed  # non-zero when any part failed or ran out of time (parts.txt says which)
