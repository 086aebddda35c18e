#!/usr/bin/env bash
# Issue 20's GPU recipe on a lent machine: the default model's dense 8-2 then LSL 8-2 stages
# (training/recipes/default_{dense,lsl}_8-2.yaml) from scratch on the mixed corpus, with a
# tokenizer trained on it (prepare.sh trains it and the kit carries it), then the int8
# bundle, which comes back in $OUT.
#
# A session's device time is 15 minutes, the machine's start included, and one call runs at
# most 10 minutes; a checkpoint cannot come back (the tool returns 64 MiB; last.pt is 316 MB).
# So one call does it all: the dense stage for at most DENSE_MIN minutes, the LSL stage from
# its best checkpoint for what is left of CALL_MIN, then the export of the LSL stage's best
# checkpoint into $OUT as bundle.tar.part-* (15 MiB pieces: the tool returns files of at most
# 16 MiB); here: cat bundle.tar.part-* | tar -x. A second call on the same warm machine (a
# session with time left) resumes both stages from runs/ and exports again.
#
#   scripts/device/prepare.sh                                       # here, once
#   device run: bash scripts/device/train_default.sh, carry [".device"], timeout_s 600
#   DENSE_STEPS=2 LSL_STEPS=2 SET=training.eval_sentences=2 OUT=/tmp/out KIT=DIR \
#       PY=.venv/bin/python scripts/device/train_default.sh          # a smoke run on a CPU
#   (DIR: the pack and the tokenizer without the wheels, which are for the machine's 3.12)
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-python3}
KIT=${KIT:-.device}
SITE=${SITE:-/tmp/lsmt-site}
# Minutes into the call at which the dense stage, then the LSL stage, stop training (counted
# from the call's start, unpacking and the tokenizer included). The LSL stage's data loading,
# its last save and the export come after: 14 s on the CPU smoke run with the Bible corpus,
# more with the mixed one, hence the margin to the 10-minute call.
DENSE_MIN=${DENSE_MIN:-3.5}
CALL_MIN=${CALL_MIN:-7.5}
# About 18 updates a second on one H100 (docs/training.md): the time limits stop them first.
DENSE_STEPS=${DENSE_STEPS:-8000}
LSL_STEPS=${LSL_STEPS:-9000}
# Target tokens per update. The recipes' 16,384 ran at about 18 updates a second on an H100
# (docs/training.md): for a d256 model that is per-step overhead, not arithmetic, so four times
# the tokens should cost far less than four times the time; a few minutes of training then see
# several times the text. Not measured yet (no GPU since): the call's metrics.jsonl records
# tgt_tokens_per_s, so the first call says. WARMUP (the dense stage's): the recipe's 800 steps
# would be most of the stage at this size.
BATCH_TOKENS=${BATCH_TOKENS:-65536}
WARMUP=${WARMUP:-300}
SET=${SET:-}  # more recipe overrides for both stages, e.g. training.eval_sentences=2
DATA=data/gpu_mixed
: "${OUT:?OUT: where the bundle goes (the device tool sets it)}"
started=$(date +%s)

# shellcheck source=scripts/device/kit.sh
. scripts/device/kit.sh
install_kit
mixed_corpus "$DATA"

minutes_left() {  # minutes_left BUDGET: what is left of BUDGET minutes of this call
    "$PY" -c "print(round($1 - ($(date +%s) - $started) / 60, 2))"
}

stage() {  # stage NAME STEPS MINUTES [--set overrides]: runs/gpu_NAME, started or resumed,
    # until STEPS updates or MINUTES more minutes, whichever comes first
    local name=$1 steps=$2 minutes=$3 run=runs/gpu_$1 args=()
    shift 3
    if [ -f "$run/summary.json" ] && \
        "$PY" -c "import json,sys; sys.exit(json.load(open('$run/summary.json'))['step'] < $steps)"; then
        return 0  # done in an earlier call
    fi
    if "$PY" -c "import sys; sys.exit($minutes > 0.5)"; then
        echo "no time left in this call for stage $name" >&2
        return 0
    fi
    if [ -f "$run/last.pt" ]; then args=(--resume); else
        # shellcheck disable=SC2086  # SET: one override per word
        args=(--config "training/recipes/default_${name}_8-2.yaml" --set \
            "data.dir=$DATA/corpus" "data.tokenizer=$DATA/tokenizer" \
            "training.batch_tokens=$BATCH_TOKENS" "$@" $SET); fi
    "$PY" -m training.train "${args[@]}" --out "$run" --max-steps "$steps" --time-limit "$minutes"
}

stage dense "$DENSE_STEPS" "$(minutes_left "$DENSE_MIN")" "training.warmup_steps=$WARMUP"
stage lsl "$LSL_STEPS" "$(minutes_left "$CALL_MIN")" init_from=runs/gpu_dense/best.pt
rm -rf runs/gpu_lsl/bundle
"$PY" -m model_export --checkpoint runs/gpu_lsl --out runs/gpu_lsl/bundle --name default \
    --dtype int8
mkdir -p "$OUT"
tar -C runs/gpu_lsl -cf - bundle | split -b 15M - "$OUT/bundle.tar.part-"
cp runs/gpu_dense/metrics.jsonl "$OUT/dense_metrics.jsonl"
cp runs/gpu_lsl/metrics.jsonl "$OUT/lsl_metrics.jsonl"
echo "bundle exported into $OUT"
