#!/usr/bin/env bash
# Issue 28's serving check on a lent GPU machine, in one device call (planned at about 5
# minutes; not yet run on a GPU):
#   1. the CUDA 13 CTranslate2 (scripts/device/build_ctranslate2.sh) sees the GPU;
#   2. the CUDA tests that skip on a CPU: the server's host tier on a real GPU (engines moved
#      device -> host -> dropped), mixed-precision training, and parity (PyTorch vs the
#      engine on the GPU, token for token) for two of the tiny model variants;
#   3. eviction churn on the default model (loadtests.churn --device cuda): a budget of three
#      engines, every route in turn for five rounds; every request answered, engines evicted
#      and restored, GPU memory flat;
#   4. if time is left, the lazy-loading benchmark on the GPU (loadtests.bench --only lazy).
# Logs and results go to $OUT (the device tool returns them).
#
#   scripts/device/build_ctranslate2.sh && scripts/device/prepare.sh serve      # here
#   device run: bash scripts/device/serve_check.sh, carry [".device-serve"], timeout_s 420
set -uo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-python3}
KIT=${KIT:-.device-serve}
SITE=${SITE:-/tmp/lsmt-serve-site}
BENCH_AFTER_S=${BENCH_AFTER_S:-240}  # start the benchmark only this early into the call
: "${OUT:?OUT: where the logs go (the device tool sets it)}"
started=$(date +%s)
mkdir -p "$OUT"
status=0

step() {  # step NAME COMMAND...: run it, log to $OUT/NAME.log, remember a failure
    local name=$1
    shift
    echo "== $name ($(($(date +%s) - started)) s into the call)"
    if "$@" > "$OUT/$name.log" 2>&1; then echo "   passed"; else
        echo "   FAILED (exit $?); the end of $OUT/$name.log:"
        tail -n 25 "$OUT/$name.log"
        status=1
    fi
}

# shellcheck source=scripts/device/kit.sh
. scripts/device/kit.sh
install_kit || exit 1
export PYTHONUNBUFFERED=1
find_cublas
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv | tee "$OUT/gpu.csv"

step ctranslate2 "$PY" -c '
import ctranslate2
print(ctranslate2.__version__, ctranslate2.__file__)
n = ctranslate2.get_cuda_device_count()
print("CUDA devices:", n, "compute types:", sorted(ctranslate2.get_supported_compute_types("cuda")))
assert n > 0 and "int8_float16" in ctranslate2.get_supported_compute_types("cuda")'
step cuda_tests "$PY" -m pytest -q -rs \
    "tests/server/test_server_registry.py::test_cuda_host_tier_on_real_gpu" \
    "tests/test_training.py::test_cuda_mixed_precision"
# parity on the GPU: two of the tiny variants (they train first, on the CPU: 73 s for both
# on this 2-core machine, their CPU parity tests included)
step cuda_parity "$PY" -m pytest -q tests/test_parity.py \
    -k "cuda_engine and (baseline or lsl-layer-encoder)"
step churn "$PY" -m loadtests.churn --device cuda --engines 3 --rounds 5 --out "$OUT/churn"
if [ $(($(date +%s) - started)) -lt "$BENCH_AFTER_S" ]; then
    step bench_lazy "$PY" -m loadtests.bench --device cuda --only lazy --out "$OUT/bench"
else
    echo "== bench_lazy skipped: $(($(date +%s) - started)) s into the call"
fi
nvidia-smi --query-gpu=memory.used --format=csv >> "$OUT/gpu.csv"
echo "done in $(($(date +%s) - started)) s, status $status"
exit $status
