#!/usr/bin/env bash
# Gather into .device/ (ignored by git) what a lent GPU machine lacks for
# scripts/device/train_default.sh: the mixed corpus as a pack (training.data.pack: the package
# mirrors cannot be reached from there) and the wheels of the Python packages its image does
# not hold (/work/.library/device/KINDS.md lists what it has), at the versions CI tests.
# The device tool sends the working tree and the carried paths, 64 MiB in all: this script
# prints the total and fails when it is over.
#
#   scripts/device/prepare.sh          # then: device run, carry [".device"] (docs/training.md)
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}
KIT=.device
CORPUS=${CORPUS:-data/default_mixed/corpus}
LIMIT=$((64 << 20))
mkdir -p "$KIT"
pins=$("$PY" -c 'from importlib.metadata import version as v
print(" ".join(f"{n}=={v(n)}" for n in ("pydantic", "pydantic-core", "annotated-types",
      "typing-inspection", "py3langid", "sentencepiece")))')
platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64; do
    platforms+=(--platform "$p")
done
# shellcheck disable=SC2086  # one argument per pin
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp "${platforms[@]}" -d "$KIT" $pins
[ -f "$KIT/default_mixed.lsmtpack" ] || \
    "$PY" -m training.data pack "$CORPUS" --out "$KIT/default_mixed.lsmtpack"
tree=$(git ls-files -z --cached --others --exclude-standard | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
kit=$(du -sb "$KIT" | cut -f1)
echo "working tree $((tree >> 20)) MiB + $KIT $((kit >> 20)) MiB = $(((tree + kit) >> 20)) MiB (limit 64)"
[ $((tree + kit)) -le $LIMIT ] || { echo "over the device tool's 64 MiB" >&2; exit 1; }
