#!/usr/bin/env bash
# Ship stage 3 of the default model when it is better than the shipped one (issue 42), after
# each stage-3 slice of scripts/build_default_model.sh (which calls it) or alone, for a run
# trained elsewhere (RUN: a run directory or a checkpoint file, e.g. a GPU call's weights):
#   1. candidates: the run's checkpoints (best.pt, and last.pt when it is a later step; or the
#      file given) each moved WISE of the way back toward the weights it started from (python
#      -m training.checkpoint interpolate; weight-space ensembling), one per checkpoint and
#      weight, each exported int8 as served;
#   2. the choice, on dev slices so that no test set is spent on it: the shipping rule
#      (python -m model_export.ship --choose) against the shipped bundle, Romans standing for
#      Acts; the best general mean among the candidates that keep the Bible;
#   3. the verdict, on the test sets: the chosen candidate against the shipped bundle
#      (python -m model_export.ship); on SHIP it replaces models/default, and MODEL_CARD.md is
#      regenerated from the evidence copied to docs/default_model/.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
RUN=${RUN:-runs/default_mixed}
RUN_LOGS=${RUN_LOGS:-$RUN}  # where the run's summary.json and metrics.jsonl are
START=${START:-runs/default_init.pt}  # the weights the run started from
DATA=${DATA:-data/default_mixed/corpus}
OUT=${OUT:-models/default}
WORK=${WORK:-runs/default_mixed_eval}
# Stage 3 forgets Bible text as it learns the rest (docs/training.md: -2.7 chrF on Acts for a
# run's own weights, -0.6 halfway back): how far back is chosen among these weights (0: the
# run's own weights). One weight skips the choice.
WISE=${WISE:-0 0.1 0.2 0.35 0.5}
# Test sets every candidate is scored on (docs/data.md), with sentences per direction (empty:
# all); 100 keeps a CPU evaluation of one model near 7 minutes on 2 cores (NTREX's long
# sentences take most of it). The dev slices choose among candidates: 40 sentences per
# direction take about a minute and a half per model.
TESTSETS=(acts ntrex libreoffice-help-test libreoffice-ui-test tatoeba-test)
EVAL_SENTENCES=${EVAL_SENTENCES:-100}
DEVSETS=(bible-dev tatoeba-dev tico19-dev libreoffice-help-dev libreoffice-ui-dev)
DEV_SENTENCES=${DEV_SENTENCES:-40}
# With MIN_GAIN set, only the routes that beat copying the source on NTREX by that many chrF
# are shipped (unset: every route, as the shipped model offers them).
MIN_GAIN=${MIN_GAIN:-}

evaluate() {  # evaluate BUNDLE OUT_DIR SENTENCES TESTSET...: the bundle as served (int8, beam 4)
    local bundle=$1 out=$2 sentences=$3
    shift 3
    mkdir -p "$out"
    for t in "$@"; do
        [ -f "$out/$t.json" ] || $PY -m model_export.evaluate "$bundle" --data "$DATA" \
            --testset "$t" --beam 4 ${sentences:+--max-sentences "$sentences"} \
            --out "$out/$t.json"
    done
}

# The bar: the shipped bundle's evaluations, kept beside a copy of its manifest; made again
# when models/default is no longer that bundle (shipped by hand, or checked out anew).
for bar in "$WORK/before" "$WORK/before_dev"; do
    cmp -s "$OUT/manifest.json" "$bar/shipped.manifest" || rm -rf "$bar"
    mkdir -p "$bar" && cp "$OUT/manifest.json" "$bar/shipped.manifest"
done
# A new machine has no bar yet: the test-set evaluations the last ship wrote beside the model
# card are the shipped bundle's (the manifest copied with them says so), made as here.
SHIPPED_EVAL=docs/default_model/eval
if cmp -s "$OUT/manifest.json" "$SHIPPED_EVAL/shipped.manifest" && $PY -c "
import json, sys
from pathlib import Path
sys.exit(any(json.loads((Path(sys.argv[1]) / f'{t}.json').read_text())['max_sentences']
             != int(sys.argv[2]) for t in sys.argv[3:]))" \
        "$SHIPPED_EVAL" "$EVAL_SENTENCES" "${TESTSETS[@]}" 2>/dev/null; then
    for t in "${TESTSETS[@]}"; do
        [ -f "$WORK/before/$t.json" ] || cp "$SHIPPED_EVAL/$t.json" "$WORK/before/"
    done
fi
evaluate "$OUT" "$WORK/before" "$EVAL_SENTENCES" "${TESTSETS[@]}"

# 1-2. A candidate per checkpoint and weight, scored on the dev slices; the choice. The run's
# last checkpoint is a candidate beside its best: the in-loop dev score that picks best.pt is
# 16 sentences per direction, and slice 14's last checkpoint beat its best one as served by
# 0.55 chrF (docs/training.md).
rm -rf "$WORK/candidates" "$WORK/after" "$WORK/choice.json"
step() {  # step CHECKPOINT: its training step (mapped, so last.pt's optimizer is not read)
    $PY -c "import sys, torch
print(torch.load(sys.argv[1], map_location='cpu', mmap=True, weights_only=False)['step'])" "$1"
}
if [ -d "$RUN" ]; then
    CHECKPOINTS=()
    [ -f "$RUN/best.pt" ] && CHECKPOINTS+=("$RUN/best.pt")
    if [ -f "$RUN/last.pt" ] && { [ ! -f "$RUN/best.pt" ] || \
            [ "$(step "$RUN/last.pt")" != "$(step "$RUN/best.pt")" ]; }; then
        CHECKPOINTS+=("$RUN/last.pt")
    fi
else
    CHECKPOINTS=("$RUN")
fi
[ "${#CHECKPOINTS[@]}" -gt 0 ] || { echo "no best.pt or last.pt in $RUN" >&2; exit 1; }
CANDIDATES=()
for ckpt in "${CHECKPOINTS[@]}"; do
    for w in $WISE; do
        c=$WORK/candidates/$(basename "$ckpt" .pt)/$w
        mkdir -p "$c"
        if [ "$w" = 0 ]; then  # the run's own weights: no start needed (WISE=0 for a run
            # trained from scratch, whose tokenizer is not the start's)
            $PY -m training.checkpoint slim "$ckpt" "$c/model.pt"
        else
            $PY -m training.checkpoint interpolate "$ckpt" "$START" "$c/model.pt" --weight "$w"
        fi
        $PY -m model_export --checkpoint "$c/model.pt" --out "$c/bundle" --name default_mixed \
            --dtype int8
        CANDIDATES+=("$c")
    done
done
if [ "${#CANDIDATES[@]}" -gt 1 ]; then
    evaluate "$OUT" "$WORK/before_dev" "$DEV_SENTENCES" "${DEVSETS[@]}"
    for c in "${CANDIDATES[@]}"; do
        evaluate "$c/bundle" "$c/dev" "$DEV_SENTENCES" "${DEVSETS[@]}"
    done
    dev=("${CANDIDATES[@]/%//dev}")
    $PY -m model_export.ship --before "$WORK/before_dev" --bible bible-dev \
        --out "$WORK/choice.json" --choose "${dev[@]}" || [ -f "$WORK/choice.json" ]
    CHOSEN=$($PY -c "import json, sys; print(json.load(open(sys.argv[1]))['chosen'])" \
        "$WORK/choice.json")
    CHOSEN=${CHOSEN%/dev}
    echo "chosen on the dev slices: $CHOSEN (see $WORK/choice.json)"
else
    CHOSEN=${CANDIDATES[0]}
fi

# 3. The verdict on the test sets.
evaluate "$CHOSEN/bundle" "$WORK/after" "$EVAL_SENTENCES" "${TESTSETS[@]}"
if ! $PY -m model_export.ship --before "$WORK/before" --after "$WORK/after" \
        --out "$WORK/verdict.json"; then
    echo "the candidate does not beat $OUT: kept the shipped model (train on and run again)"
    exit 0
fi
rm -rf "$OUT"
$PY -m model_export --checkpoint "$CHOSEN/model.pt" --out "$OUT" --name default --dtype int8 \
    --eval-json "$WORK/after/ntrex.json" ${MIN_GAIN:+--min-chrf-gain "$MIN_GAIN"}
# What the model card is made of, kept beside it (small files) so that it can be regenerated.
rm -rf docs/default_model/start docs/default_model/eval
mkdir -p docs/default_model/start docs/default_model/eval
cp "$WORK"/before/*.json docs/default_model/start/
cp "$WORK"/after/*.json docs/default_model/eval/
cp "$OUT/manifest.json" docs/default_model/eval/shipped.manifest
cp "$RUN_LOGS/summary.json" "$RUN_LOGS/metrics.jsonl" docs/default_model/
rm -f docs/default_model/choice.json
[ ! -f "$WORK/choice.json" ] || cp "$WORK/choice.json" docs/default_model/
# the slice joins the model's lineage (docs/default_model/slices.json) before the card is made
WEIGHT=$(basename "$CHOSEN")
$PY scripts/model_card.py --bundle "$OUT" --record-slice "$WORK/verdict.json" --weight "$WEIGHT"
# The model just shipped is the bar for the next candidate.
rm -rf "$WORK/before" "$WORK/before_dev"
mv "$WORK/after" "$WORK/before"
[ ! -d "$CHOSEN/dev" ] || cp -r "$CHOSEN/dev" "$WORK/before_dev"
for bar in "$WORK/before" "$WORK/before_dev"; do
    [ ! -d "$bar" ] || cp "$OUT/manifest.json" "$bar/shipped.manifest"
done
echo "shipped $CHOSEN as $OUT"
