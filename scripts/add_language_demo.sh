#!/usr/bin/env bash
# Issue 23's demonstration: German added to the bundled default model on the CPU, measured
# through the served bundle. Arms side by side, same data and wall time: German written with
# the shipped tokenizer (`shared`) or with a German tokenizer of its own (`own`, the Shallow
# paper's new vocabulary), each with the shared decoder's German modules or with a decoder of
# German's own (`*_decoder`). Each arm: training/recipes/default_add_de_8-2.yaml from the
# shipped bundle's weights, `model_export add-language` into a copy of models/default, then
# `model_export.evaluate` (int8, beam 4, as served) on NTREX-128 and the held-out package
# documents, de<->en (trained) and de<->fr (zero-shot: no German-French pair was seen).
# The `bilingual` arm is the paper's baseline: training/recipes/bilingual_de-en_8-2.yaml from
# scratch on the same pairs, exported as a bundle of its own, evaluated on de<->en.
#
#   TIME_LIMIT=60 scripts/add_language_demo.sh      # train at most 60 min per arm, evaluate
#   STEPS=2 EVAL_SENTENCES=8 scripts/add_language_demo.sh   # a quick smoke run
# Every step resumes or skips what it finds (data/add_de, runs/add_de_*), so slices add up.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
STEPS=${STEPS:-}
TIME_LIMIT=${TIME_LIMIT:-}
EVAL_SENTENCES=${EVAL_SENTENCES:-500}
ARMS=${ARMS:-shared own shared_decoder own_decoder bilingual}
SHIPPED=models/default
DATA=data/add_de
RECIPE=training/recipes/default_add_de_8-2.yaml
BILINGUAL_RECIPE=training/recipes/bilingual_de-en_8-2.yaml

[ -f runs/default_weights.pt ] || \
    $PY -m model_export checkpoint "$SHIPPED" --out runs/default_weights.pt
[ -f "$DATA/corpus/stats.json" ] || $PY -m lsmt_text.data build --out "$DATA/corpus" \
    --languages de,en --directions all \
    --sources libreoffice-help,libreoffice-ui,gnome-docs,debian-handbook,wesnoth
# The shipped tokenizer with German's piece counts (its target vocabulary), and German's own.
[ -f "$DATA/tokenizer/frequencies.json" ] || $PY -m lsmt_text.tokenizer recount \
    --model "$SHIPPED/tokenizer" --data "$DATA/corpus" --out "$DATA/tokenizer"
[ -f "$DATA/tokenizer_de/spm.model" ] || $PY -m lsmt_text.tokenizer train \
    --data "$DATA/corpus" --out "$DATA/tokenizer_de" --languages de --vocab-size 8000
# The bilingual baseline's joint German-English tokenizer.
[ -f "$DATA/tokenizer_bilingual/spm.model" ] || $PY -m lsmt_text.tokenizer train \
    --data "$DATA/corpus" --out "$DATA/tokenizer_bilingual" --languages de,en --vocab-size 8000

for arm in $ARMS; do
    run=runs/add_de_$arm
    if [ -f "$run/last.pt" ]; then args=(--resume); else
        args=(--config "$RECIPE")
        case $arm in
            shared) ;;
            own) args+=(--set "data.language_tokenizers.de=$DATA/tokenizer_de") ;;
            shared_decoder) args+=(--set "model.language_decoders=[de]") ;;
            own_decoder) args+=(--set "data.language_tokenizers.de=$DATA/tokenizer_de"
                                "model.language_decoders=[de]") ;;
            bilingual) args=(--config "$BILINGUAL_RECIPE") ;;
            *) echo "unknown arm $arm (shared, own, shared_decoder, own_decoder, bilingual)" >&2
               exit 2 ;;
        esac
    fi
    $PY -m training.train "${args[@]}" --out "$run" ${STEPS:+--max-steps "$STEPS"} \
        ${TIME_LIMIT:+--time-limit "$TIME_LIMIT"}
    # Evaluated after every slice (its best checkpoint so far), so a partial run is measured
    # too; eval/summary.json says at which step.
    step=$("$PY" -c "import json; print(json.load(open('$run/summary.json'))['step'])")
    if [ -f "$run/eval/summary.json" ] && \
        [ "$("$PY" -c "import json; print(json.load(open('$run/eval/summary.json'))['step'])")" = "$step" ]; then
        echo "arm $arm: already evaluated at step $step"; continue
    fi
    bundle=$run/bundle
    rm -rf "$bundle"
    if [ "$arm" = bilingual ]; then
        # stored like the shipped bundle (int8), so sizes and scores compare as served
        $PY -m model_export --checkpoint "$run" --which best --out "$bundle" --dtype int8
        ntrex_routes=de-en,en-de
    else
        cp -r "$SHIPPED" "$bundle"
        $PY -m model_export add-language "$bundle" --from "$run" --which best
        # NTREX is multi-way (every language translated from the same English): de<->fr too
        ntrex_routes=de-en,en-de,de-fr,fr-de
    fi
    mkdir -p "$run/eval"
    for t in ntrex libreoffice-help-test gnome-docs-test; do
        routes=de-en,en-de; [ "$t" = ntrex ] && routes=$ntrex_routes
        $PY -m model_export.evaluate "$bundle" --data "$DATA/corpus" --testset "$t" \
            --routes "$routes" --beam 4 ${EVAL_SENTENCES:+--max-sentences "$EVAL_SENTENCES"} \
            --out "$run/eval/$t.json"
    done
    du -sb "$SHIPPED" "$bundle" > "$run/eval/bytes.txt"
    cp "$run/summary.json" "$run/eval/summary.json"
    if "$PY" -c "import json,sys; sys.exit(not json.load(open('$run/summary.json'))['stopped_early'])"; then
        echo "arm $arm stopped at its time limit (step $step): run this script again to continue"
    fi
done
