#!/usr/bin/env bash
# Issue 28's quality study (lsmt_study/studies/quality.yaml) on a lent GPU machine: the arms in
# $ARMS, one after the other, each trained MINUTES, exported and evaluated there
# (python -m lsmt_study run); an arm is started only while the call has room for it (the
# last arm's wall time, the first arm's estimate FIRST_ARM_S). Checkpoints stay there; the
# arms' result.json and logs come back in $OUT, merged here with the earlier calls':
#   python -m lsmt_study report runs/study_calls/*  (docs/quality.md)
#
#   scripts/device/prepare.sh                  # here: the kit, corpus, tokenizer, CTranslate2
#   device run: ARMS=dense,lsl bash scripts/device/quality_study.sh, carry [".device"],
#       timeout_s 600
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-python3}
KIT=${KIT:-.device}
SITE=${SITE:-/tmp/lsmt-site}
ARMS=${ARMS:?ARMS: the comma-separated arms of lsmt_study/studies/quality.yaml to run}
MINUTES=${MINUTES:-}  # default: the study's
CALL_S=${CALL_S:-540}  # leave the call's last minute for copying the results
FIRST_ARM_S=${FIRST_ARM_S:-180}  # the first arm's wall time, data loading included (a guess)
DEVICE=${DEVICE:-cuda}
DATA=data/gpu_mixed  # as train_default.sh
: "${OUT:?OUT: where the results go (the device tool sets it)}"
started=$(date +%s)
mkdir -p "$OUT"

# shellcheck source=scripts/device/kit.sh
. scripts/device/kit.sh
install_kit
find_cublas
export PYTHONUNBUFFERED=1
mixed_corpus "$DATA"

last=$FIRST_ARM_S
IFS=, read -ra arms <<< "$ARMS"
for arm in "${arms[@]}"; do
    now=$(($(date +%s) - started))
    if [ $((now + last)) -gt "$CALL_S" ]; then
        echo "== $arm: not started ($now s into the call, the last arm took $last s)"
        continue
    fi
    echo "== $arm ($now s into the call)"
    t0=$(date +%s)
    "$PY" -m lsmt_study run quality --arms "$arm" --out runs/study --device "$DEVICE" \
        ${MINUTES:+--minutes "$MINUTES"} || echo "   $arm FAILED (exit $?)"
    last=$(($(date +%s) - t0))
    # what comes back: the result and the logs (no checkpoint, no bundle)
    (cd runs/study && find "$arm" -maxdepth 2 \( -name result.json -o -name '*.log' \
        -o -name summary.json -o -name metrics.jsonl \) -exec cp --parents {} "$OUT/" \;)
done
"$PY" -m lsmt_study report runs/study --out "$OUT" > /dev/null || true
echo "done at $(($(date +%s) - started)) s"
