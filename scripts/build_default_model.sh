#!/usr/bin/env bash
# Rebuild the bundled default model (models/default): corpus, tokenizer, dense 8-2
# pre-training, LSL fine-tuning from it, then training further on Bible, software and general
# text (stage 3, issues 20 and 42); after each stage-3 slice, scripts/ship_default_model.sh
# chooses a candidate, evaluates it on Acts, NTREX and the held-out software and everyday
# slices, and replaces models/default (and MODEL_CARD.md) when it beats the shipped model by
# the shipping rule (python -m model_export.ship). Run through `make default-model`, which
# installs the environment first.
#
# Where it starts:
#   FROM=scratch   every stage (the default when torch sees a GPU or runs/default_lsl exists)
#   FROM=shipped   stage 3 only, from the weights of the shipped bundle (the default on a CPU
#                  without earlier runs: stages 1-2 take many hours there)
# Each stage resumes the run it finds in runs/, so an interrupted build continues where it
# stopped:
#   TIME_LIMIT=30 make default-model     # train at most 30 minutes per stage and call, then stop
#                                        # (stage 3: then evaluate the slice and ship it if better)
#   DENSE_STEPS=20 LSL_STEPS=20 MIXED_STEPS=20 ...   # a quick smoke run of the whole pipeline
#   MIXED_SET='data.source_weights={tatoeba: 3}' ...  # a recipe override for stage 3 (a run
#                                        # resumed keeps its own recipe unless told otherwise)
#   EXTEND_VOCAB=500 ...                 # a new stage-3 run from the shipped bundle with its
#                                        # tokenizer extended by 500 whole words per language
#                                        # (python -m lsmt_text.tokenizer extend; docs/data.md)
#
# Where the corpora and runs live: data/ and runs/ of the checkout. A checkout that is
# replaced between calls (a fresh clone per session or per CI job) would lose the run it is
# resuming: STATE=/a/lasting/dir makes data/ and runs/ links into it, so the next call, from
# whichever checkout, resumes where this one stopped:
#   STATE=~/lsmt-state TIME_LIMIT=90 make default-model
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
if [ -n "${STATE:-}" ]; then
    for d in data runs; do
        mkdir -p "$STATE/$d"
        if [ -L "$d" ] || [ ! -e "$d" ]; then
            ln -sfn "$STATE/$d" "$d"
        else
            echo "$d/ exists in the checkout: move it to $STATE/$d (or leave STATE unset)" >&2
            exit 1
        fi
    done
    echo "default model: data/ and runs/ are in $STATE"
fi
mkdir -p runs  # a fresh clone has none
# Public-domain editions only (a shipped model is derived from its training text): Spanish
# Reina-Valera 1909, French Louis Segond 1910 and Italian Diodati 1649 instead of the table's
# modern primaries; see `python -m lsmt_text.data editions`.
LANGS=ar,en,es,fr,it,ru
EDITIONS=es=v,fr=l,it=d
DATA=data/default
MIXED=data/default_mixed
DENSE_STEPS=${DENSE_STEPS:-}
LSL_STEPS=${LSL_STEPS:-}
MIXED_STEPS=${MIXED_STEPS:-}
TIME_LIMIT=${TIME_LIMIT:-}
OUT=${OUT:-models/default}
if [ -z "${FROM:-}" ]; then
    if [ -d runs/default_lsl ] || "$PY" -c "import sys, torch; sys.exit(not torch.cuda.is_available())"; then
        FROM=scratch; else FROM=shipped; fi
fi
echo "default model: starting from $FROM"

train() {  # train STAGE MAX_STEPS: start the stage's run, or resume it
    local run=runs/default_$1 args=()
    if [ -f "$run/last.pt" ]; then args=(--resume); else
        args=(--config "training/recipes/default_$1_8-2.yaml"); fi
    [ "$1" = mixed ] && [ -n "${MIXED_SET:-}" ] && args+=(--set "$MIXED_SET")
    # A new stage-3 run from a bundle continues the learning-rate decay where the bundle's
    # run left it (its optimizer is not in the bundle): back at the peak rate it unlearns.
    [ "$1" = mixed ] && [ ! -f "$run/last.pt" ] && [ -n "${SCHEDULE_OFFSET:-}" ] && \
        args+=(--set "training.lr_schedule_offset=$SCHEDULE_OFFSET")
    $PY -m training.train "${args[@]}" --out "$run" ${2:+--max-steps "$2"} \
        ${TIME_LIMIT:+--time-limit "$TIME_LIMIT"}
    if [ -n "$TIME_LIMIT" ] && "$PY" -c "import json,sys; sys.exit(not json.load(open('$run/summary.json'))['stopped_early'])"; then
        # Stage 3's slice is a candidate like any other: it is evaluated and shipped if better.
        if [ "$1" = mixed ]; then echo "stage $1 stopped at its time limit: evaluating it"; return; fi
        echo "stage $1 stopped at its time limit: run this script again to continue"; exit 0
    fi
}

[ -f "$MIXED/corpus/stats.json" ] || $PY -m lsmt_text.data build --out "$MIXED/corpus" \
    --languages "$LANGS" --directions all --editions "$EDITIONS" --public-domain-only \
    --sources all

if [ "$FROM" = scratch ]; then
    [ -f "$DATA/corpus/stats.json" ] || $PY -m lsmt_text.data build --out "$DATA/corpus" \
        --languages "$LANGS" --directions all --editions "$EDITIONS" --public-domain-only
    [ -f "$DATA/tokenizer/spm.model" ] || \
        $PY -m lsmt_text.tokenizer train --data "$DATA/corpus" --out "$DATA/tokenizer" --vocab-size 8000
    train dense "$DENSE_STEPS"
    train lsl "$LSL_STEPS"
    START_TOKENIZER=$DATA/tokenizer
    [ -f runs/default_init.pt ] || cp runs/default_lsl/best.pt runs/default_init.pt
else
    # Keep the starting point: models/default is replaced at the end. A new run starts from
    # the bundle shipped now: a start kept from an earlier bundle (shipped since, by a slice
    # or a GPU call) is made again, or the run would continue a model that was superseded.
    if [ ! -f runs/default_mixed/last.pt ] && \
            ! cmp -s "$OUT/manifest.json" runs/default_start/manifest.json 2>/dev/null; then
        echo "default model: a new run starts from $OUT as shipped now"
        rm -rf runs/default_start runs/default_init.pt runs/default_init.extended
        cp -r "$OUT" runs/default_start
    fi
    [ -d runs/default_start ] || cp -r "$OUT" runs/default_start
    START_TOKENIZER=runs/default_start/tokenizer
    # Where the shipped weights' schedule stood: their run's updates, plus the offset that run
    # itself started from.
    SCHEDULE_OFFSET=$("$PY" -c "import json
p = json.load(open('runs/default_start/manifest.json'))['provenance']
print((p.get('step') or 0) + p['recipe']['training'].get('lr_schedule_offset', 0))")
    [ -f runs/default_init.pt ] || \
        $PY -m model_export checkpoint runs/default_start --out runs/default_init.pt
    # The start's tokenizer extended with whole words, and its weights with rows for them; the
    # marker keeps a resumed call from extending twice.
    if [ -n "${EXTEND_VOCAB:-}" ] && [ ! -f runs/default_init.extended ]; then
        if [ -f runs/default_mixed/last.pt ]; then
            echo "EXTEND_VOCAB starts a new run: move runs/default_mixed away first" >&2
            exit 1
        fi
        $PY -m lsmt_text.tokenizer extend --model "$START_TOKENIZER" --data "$MIXED/corpus" \
            --out "$MIXED/tokenizer" --per-language "$EXTEND_VOCAB"
        $PY -m training.checkpoint extend-vocabulary runs/default_init.pt "$MIXED/tokenizer" \
            runs/default_init.pt
        touch runs/default_init.extended
    fi
fi
# Stage 3 keeps the stage-2 tokenizer (or its extension); its per-target vocabularies follow
# the mixed corpus.
if [ ! -f runs/default_init.extended ] && { [ ! -f "$MIXED/tokenizer/frequencies.json" ] || \
        ! cmp -s "$START_TOKENIZER/spm.model" "$MIXED/tokenizer/spm.model"; }; then
    $PY -m lsmt_text.tokenizer recount --model "$START_TOKENIZER" --data "$MIXED/corpus" \
        --out "$MIXED/tokenizer"
fi
train mixed "$MIXED_STEPS"
# Choose, evaluate and ship the slice when it is better than the shipped model.
PY=$PY DATA="$MIXED/corpus" OUT="$OUT" scripts/ship_default_model.sh
