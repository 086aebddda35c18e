#!/usr/bin/env bash
# Rebuild the bundled default model (models/default) from scratch: corpus, tokenizer, dense
# 8-2 pre-training, LSL fine-tuning from it, test-set evaluation, export. See MODEL_CARD.md.
# Run through `make default-model`, which installs the environment first.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
LANGS=de,en,fr,ko,pt,ru
DATA=data/default
# Training steps can be overridden for a quick smoke run: DENSE_STEPS=20 LSL_STEPS=20 ...
DENSE_STEPS=${DENSE_STEPS:-}
LSL_STEPS=${LSL_STEPS:-}
OUT=${OUT:-models/default}

[ -d "$DATA/corpus" ] || $PY -m training.data build --out "$DATA/corpus" --languages "$LANGS"
[ -f "$DATA/tokenizer/spm.model" ] || \
    $PY -m training.tokenizer train --data "$DATA/corpus" --out "$DATA/tokenizer" --vocab-size 8000

$PY -m training.train --config training/recipes/default_dense_8-2.yaml --out runs/default_dense \
    ${DENSE_STEPS:+--max-steps "$DENSE_STEPS"}
$PY -m training.train --config training/recipes/default_lsl_8-2.yaml --out runs/default_lsl \
    ${LSL_STEPS:+--max-steps "$LSL_STEPS"}

# Evaluate what is served: each model exported as an int8 bundle with per-target vocabularies
# (pieces seen >= 5 times, at most 4000), its CTranslate2 engines on the whole held-out test
# book (Acts), beam 4, with the copy-the-source baseline beside every direction.
EXPORT_OPTS=(--dtype int8 --target-vocab-min-count 5 --target-vocab-max-size 4000)
for stage in dense lsl; do
    rm -rf "runs/default_$stage/bundle"
    $PY -m model_export --checkpoint "runs/default_$stage" --out "runs/default_$stage/bundle" \
        --name "default_$stage" "${EXPORT_OPTS[@]}"
    $PY -m model_export.evaluate "runs/default_$stage/bundle" --data "$DATA/corpus" --split test \
        --beam 4 --out "runs/default_$stage/test.json"
done

# The shipped bundle: only the directions that beat copying the source by at least 10 chrF.
rm -rf "$OUT"
$PY -m model_export --checkpoint runs/default_lsl --out "$OUT" --name default "${EXPORT_OPTS[@]}" \
    --eval-json runs/default_lsl/test.json --min-chrf-gain 10
$PY scripts/model_card.py --bundle "$OUT"
