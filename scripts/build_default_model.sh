#!/usr/bin/env bash
# Rebuild the bundled default model (models/default) from scratch: corpus, tokenizer, dense
# 8-2 pre-training, LSL fine-tuning from it, test-set evaluation, export, MODEL_CARD.md.
# Run through `make default-model`, which installs the environment first.
#
# Training uses a GPU when torch sees one (bf16); on a CPU it runs too, for many hours. Each
# stage resumes the run it finds in runs/, so an interrupted build continues where it stopped:
#   TIME_LIMIT=30 make default-model     # train at most 30 minutes per stage and call, then stop
#   DENSE_STEPS=20 LSL_STEPS=20 ...      # a quick smoke run of the whole pipeline
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
# Public-domain editions only (a shipped model is derived from its training text): Spanish
# Reina-Valera 1909, French Louis Segond 1910 and Italian Diodati 1649 instead of the table's
# modern primaries; see `python -m training.data editions`.
LANGS=ar,en,es,fr,it,ru
EDITIONS=es=v,fr=l,it=d
DATA=data/default
DENSE_STEPS=${DENSE_STEPS:-}
LSL_STEPS=${LSL_STEPS:-}
TIME_LIMIT=${TIME_LIMIT:-}
OUT=${OUT:-models/default}

[ -f "$DATA/corpus/stats.json" ] || $PY -m training.data build --out "$DATA/corpus" \
    --languages "$LANGS" --directions all --editions "$EDITIONS" --public-domain-only
[ -f "$DATA/tokenizer/spm.model" ] || \
    $PY -m training.tokenizer train --data "$DATA/corpus" --out "$DATA/tokenizer" --vocab-size 8000

train() {  # train STAGE MAX_STEPS: start the stage's run, or resume it
    local run=runs/default_$1 args=()
    if [ -f "$run/last.pt" ]; then args=(--resume); else
        args=(--config "training/recipes/default_$1_8-2.yaml"); fi
    $PY -m training.train "${args[@]}" --out "$run" ${2:+--max-steps "$2"} \
        ${TIME_LIMIT:+--time-limit "$TIME_LIMIT"}
    if [ -n "$TIME_LIMIT" ] && "$PY" -c "import json,sys; sys.exit(not json.load(open('$run/summary.json'))['stopped_early'])"; then
        echo "stage $1 stopped at its time limit: run this script again to continue"; exit 0
    fi
}
train dense "$DENSE_STEPS"
train lsl "$LSL_STEPS"

# Evaluate what is served: each model exported as an int8 bundle with the per-target
# vocabularies it trained with, its CTranslate2 engines on the whole held-out test book
# (Acts), beam 4, with the copy-the-source baseline beside every direction.
for stage in dense lsl; do
    rm -rf "runs/default_$stage/bundle"
    $PY -m model_export --checkpoint "runs/default_$stage" --out "runs/default_$stage/bundle" \
        --name "default_$stage" --dtype int8
    $PY -m model_export.evaluate "runs/default_$stage/bundle" --data "$DATA/corpus" --split test \
        --beam 4 --out "runs/default_$stage/test.json"
done

# The shipped bundle: only the directions that beat copying the source by at least 10 chrF.
rm -rf "$OUT"
$PY -m model_export --checkpoint runs/default_lsl --out "$OUT" --name default --dtype int8 \
    --eval-json runs/default_lsl/test.json --min-chrf-gain 10
$PY scripts/model_card.py --bundle "$OUT"
