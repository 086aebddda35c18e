#!/usr/bin/env bash
# Issue 50's training call on a lent GPU machine: the default model on the mixed corpus (Bible,
# software and general text), one or two ways (ARMS) at once on the one GPU, for the same minutes:
#   continue  the shipped weights (models/default) trained on, with the shipped tokenizer:
#             stage 3's recipe (training/recipes/default_mixed_8-2.yaml);
#   scratch   from nothing with a tokenizer trained on the mixed corpus (the kit's): the dense
#             8-2 for DENSE_SHARE of the time, then the LSL 8-2 from it.
# First a short probe (loadtests/bench_training.py --device cuda) measures target tokens/s at
# PROBE_BATCHES: the arms' batch is the smallest within 10 % of the fastest, so the
# minutes buy as many updates as the chip allows (and the probe says whether a d256 model
# fills it). The better arm by its best dev chrF (the same dev sample for both: same seed, same
# EVAL_SENTENCES) comes back as a weights-only bf16 checkpoint in 15 MiB pieces
# ($OUT/weights.pt.part-*; 53 MB, so the int8 bundle is exported here, not there), beside
# $OUT/logs.tgz: the probe, both arms' metrics, summaries and recipes, nvidia-smi's load.
# Here, after:
#   cat weights.pt.part-* > runs/gpu_weights.pt, then export, evaluate and ship it
#   (scripts/ship_default_model.sh with RUN=runs/gpu_weights.pt; docs/training.md).
#
# A session's device time is 15 minutes, the start included, one call at most 10: so one call,
# CALL_MIN minutes of it to the training, the rest to the start, the probe, saving and packing.
#
#   scripts/device/prepare.sh                                       # here, once
#   device run: bash scripts/device/train_default.sh, carry [".device"], timeout_s 590
#   A call after another on the same machine, with less time: CALL_MIN and STOP_MIN to fit,
#   and BATCH=131072 EVAL_EVERY=450 (what the H200 probe picked, 0.19 s an update) to skip the
#   probe (76 s on 2026-11-27).
#   A smoke run on a CPU (KIT: the pack and tokenizers without the wheels, which are for the
#   machine's Python 3.12; one thread per process, or two arms on two cores spin for minutes):
#   DEVICE=cpu PROBE_BATCHES=1024 PROBE_PAIRS=300 CALL_MIN=1.5 STOP_MIN=2.5 EVAL_SENTENCES=1 \
#       SET="training.max_steps=3 training.num_threads=1" OUT=/tmp/out KIT=DIR \
#       PY=.venv/bin/python scripts/device/train_default.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-python3}
KIT=${KIT:-.device}
SITE=${SITE:-/tmp/lsmt-site}
DEVICE=${DEVICE:-cuda}
CALL_MIN=${CALL_MIN:-8.0}       # minutes into the call at which both arms stop training
STOP_MIN=${STOP_MIN:-8.8}       # ... at the latest (a stage that started slowly is stopped)
# A stage stopped by its time limit evaluates and saves before it exits (about 30 s): a
# watchdog closer to CALL_MIN than that killed the second call's only arm before it wrote
# summary.json (2026-11-27, docs/training.md), so it is kept at least this far behind.
STOP_AFTER_MIN=0.8
STOP_MIN=$("$PY" -c "print(max($STOP_MIN, $CALL_MIN + $STOP_AFTER_MIN))")
DENSE_SHARE=${DENSE_SHARE:-0.45}  # the scratch arm's share of its minutes for the dense stage
LOAD_MIN=${LOAD_MIN:-0.8}       # a stage's start before its first update (tokenizing its pairs)
PROBE_BATCHES=${PROBE_BATCHES:-16384,65536,131072}
# A batch holds one direction's pairs: 20,000 a direction let the largest batch fill (with 300,
# the first call's probe measured 7,000-11,000-token updates whatever it asked)
PROBE_PAIRS=${PROBE_PAIRS:-20000}
EVAL_S=${EVAL_S:-90}            # about this many seconds of training between dev evaluations
# (one takes 10-15 s there; each stage also evaluates where its time limit stops it)
EVAL_SENTENCES=${EVAL_SENTENCES:-32}
WARMUP=${WARMUP:-300}           # the dense stage's (the recipe's 800 would be most of it)
SET=${SET:-}                    # more recipe overrides for every stage
# The arms: continue alone since the first call measured it far ahead of scratch in the same
# minutes (docs/training.md, "The first call"); ARMS="continue scratch" compares them again.
ARMS=${ARMS:-continue}
: "${OUT:?OUT: where the results go (the device tool sets it)}"
started=$(date +%s)
LOGS=runs/gpu_logs  # what comes back beside the weights, as $OUT/logs.tgz
mkdir -p "$OUT" "$LOGS"
say() { echo "[$(($(date +%s) - started)) s] $*" | tee -a "$LOGS/call.txt"; }

# shellcheck source=scripts/device/kit.sh
. scripts/device/kit.sh
install_kit
# Both arms read one corpus; each keeps its own tokenizer (the recount of the shipped one
# decides the continue arm's per-target vocabularies, as in make default-model).
mixed_corpus data/gpu_mixed
mkdir -p data/default_mixed
[ -e data/default_mixed/corpus ] || ln -s ../gpu_mixed/corpus data/default_mixed/corpus
[ -d data/default_mixed/tokenizer ] || cp -r "$KIT/shipped_tokenizer" data/default_mixed/tokenizer
[ -f runs/default_init.pt ] || "$PY" -m model_export checkpoint models/default --out runs/default_init.pt
if command -v nvidia-smi > /dev/null; then
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > $LOGS/gpu.csv
    nvidia-smi dmon -s um -d 5 > $LOGS/dmon.txt 2>&1 &
fi
say "kit ready"

minutes_left() {  # minutes_left AT [LESS]: minutes from now to AT minutes into the call, less LESS
    "$PY" -c "print(round($1 - ($(date +%s) - $started) / 60 - ${2:-0}, 2))"
}

# 1. The batch: the smallest within 10 % of the best tokens/s; its updates/s sets how often the
# arms evaluate (the arms share the chip). BATCH and EVAL_EVERY set skip the probe (a call
# short of time reuses what an earlier probe picked: docs/training.md).
if [ -n "${BATCH:-}" ]; then
    EVAL_EVERY=${EVAL_EVERY:?EVAL_EVERY: updates between dev evaluations, with BATCH}
    say "no probe: batch $BATCH, evaluating every $EVAL_EVERY updates"
else
    "$PY" -m loadtests.bench_training --recipe default_mixed_8-2 --device "$DEVICE" \
        --configs bf16 --batch-tokens "$PROBE_BATCHES" --steps 8 --warmup 5 --profile \
        --pairs-per-route "$PROBE_PAIRS" --out runs/gpu_probe > $LOGS/probe.txt 2>&1 || cat $LOGS/probe.txt
    picked=$("$PY" - "$EVAL_S" "$(wc -w <<< "$ARMS")" <<'EOF'
import json, sys
try:
    rows = json.load(open("runs/gpu_probe/results.json"))["results"]
except (OSError, KeyError, ValueError):
    print(65536, 200)  # no probe: the batch reasoned before one was measured
    raise SystemExit
best = max(r["tgt_tokens_per_s"] for r in rows)
pick = min((r for r in rows if r["tgt_tokens_per_s"] >= 0.9 * best), key=lambda r: r["batch_tokens"])
updates_per_s = pick["tgt_tokens_per_s"] / pick["batch_tokens"] / int(sys.argv[2])
print(pick["batch_tokens"], max(10, round(updates_per_s * float(sys.argv[1]))))
EOF
    )
    read -r BATCH EVAL_EVERY <<< "$picked"
    say "probe: $(grep -h 'tokens/s' $LOGS/probe.txt | tr -s ' ' | paste -sd ';' -); batch $BATCH, evaluating every $EVAL_EVERY updates"
fi

# 2. The arms, at once, until CALL_MIN.
common=("training.batch_tokens=$BATCH" "training.eval_every=$EVAL_EVERY" "training.save_every=0"
    "training.eval_sentences=$EVAL_SENTENCES" "training.eval_testsets=[]" "training.seed=3")
train() {  # train RUN RECIPE MINUTES OVERRIDE...: a stage in runs/gpu_RUN for MINUTES of training
    local run=runs/gpu_$1 recipe=training/recipes/$2.yaml minutes=$3
    shift 3
    # shellcheck disable=SC2086  # SET: one override per word
    "$PY" -m training.train --config "$recipe" --out "$run" --device "$DEVICE" --no-progress \
        --time-limit "$minutes" --set "${common[@]}" "$@" $SET > "$LOGS/$(basename "$run").log" 2>&1
}
scratch_data=("data.dir=data/gpu_mixed/corpus" "data.tokenizer=data/gpu_mixed/tokenizer")
arms_start=$(( ($(date +%s) - started) ))
dense_end=$("$PY" -c "s = $arms_start / 60; print(round(s + $DENSE_SHARE * ($CALL_MIN - s), 2))")
# A stage whose start took longer than LOAD_MIN would run past CALL_MIN: at STOP_MIN every
# stage still training is asked to stop (SIGTERM: it finishes its update and saves last.pt).
( sleep "$("$PY" -c "print(max(0, round($STOP_MIN * 60 - ($(date +%s) - $started))))")"
  pkill -TERM -f "training.train" || true ) &
watchdog_pid=$!
pids=()
if [[ " $ARMS " == *" continue "* ]]; then
    train continue default_mixed_8-2 "$(minutes_left "$CALL_MIN" "$LOAD_MIN")" &
    pids+=($!)
fi
if [[ " $ARMS " == *" scratch "* ]]; then
    {
        # no evaluations in the dense stage: the LSL stage starts from its last weights, and a young
        # model's greedy outputs run to the length limit (25 s an evaluation on the H200, 2026-11-27)
        train dense default_dense_8-2 "$(minutes_left "$dense_end" "$LOAD_MIN")" \
            "${scratch_data[@]}" "training.warmup_steps=$WARMUP" "training.eval_every=0"
        say "scratch: dense stage done"
        train lsl default_lsl_8-2 "$(minutes_left "$CALL_MIN" "$LOAD_MIN")" \
            "${scratch_data[@]}" "init_from=runs/gpu_dense/last.pt"
    } &
    pids+=($!)
fi
for pid in "${pids[@]}"; do wait "$pid" || say "an arm failed (its log: $LOGS/gpu_*.log)"; done
kill "$watchdog_pid" 2> /dev/null || true
say "arms done"

# 3. The better arm's best checkpoint comes back: by its summary, or, for an arm stopped
# before it wrote one, by the dev evaluations in its metrics (best.pt is saved at each best).
WINNER=$("$PY" - <<'EOF'
import json, os, sys
scores = {}
for arm, run in (("continue", "runs/gpu_continue"), ("scratch", "runs/gpu_lsl")):
    if not os.path.exists(f"{run}/best.pt"):
        continue
    try:
        best = json.load(open(f"{run}/summary.json")).get("best_dev_chrf")
    except (OSError, ValueError):
        with open(f"{run}/metrics.jsonl") as f:
            evals = [r for r in map(json.loads, f) if r.get("kind") == "eval"]
        best = max((r["dev_chrf"] for r in evals), default=None)
        print(f"{arm}: no summary (stopped early): best dev chrF from its metrics", file=sys.stderr)
    if best is not None:
        scores[run] = best
        print(f"{arm}: best dev chrF {best:.2f}", file=sys.stderr)
print(max(scores, key=scores.get) if scores else "")
EOF
)
echo "$WINNER" > $LOGS/winner.txt
if [ -n "$WINNER" ]; then
    "$PY" -m training.checkpoint slim "$WINNER/best.pt" runs/gpu_weights.pt --dtype bfloat16
    split -b 15M runs/gpu_weights.pt "$OUT/weights.pt.part-"
fi
for run in runs/gpu_continue runs/gpu_dense runs/gpu_lsl runs/gpu_probe; do
    [ -d "$run" ] || continue
    mkdir -p "$LOGS/$(basename "$run")"
    cp "$run"/*.json "$run"/*.jsonl "$run"/*.yaml "$run"/*.txt "$LOGS/$(basename "$run")/" \
        2>/dev/null || true
done
tar -C runs -czf "$OUT/logs.tgz" gpu_logs
say "winner: ${WINNER:-none}; results in $OUT"
