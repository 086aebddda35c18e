# Sourced by the scripts that run on the lent GPU machine: install_kit installs the carried
# kit's wheels ($KIT/*.whl: the packages the image lacks) into $SITE, once per machine, and
# puts $SITE first on PYTHONPATH; mixed_corpus DIR unpacks the kit's corpus and tokenizer;
# find_cublas lets our CUDA 13 CTranslate2 open the image's cuBLAS. Need PY, KIT and SITE set.
install_kit() {
    if ls "$KIT"/*.whl > /dev/null 2>&1 && [ ! -f "$SITE/.installed" ]; then
        "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
            --target "$SITE" "$KIT"/*.whl || return 1
        touch "$SITE/.installed"
    fi
    if [ -d "$SITE" ]; then export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"; fi
}

find_cublas() {
    # CTranslate2 opens libcublas.so.13 at run time (dlopen): the image's is in the
    # nvidia-cublas package beside PyTorch, outside the loader's paths.
    local dir
    dir=$("$PY" -c 'import glob, os, site
hits = [h for p in site.getsitepackages() for h in glob.glob(f"{p}/nvidia/*/lib/libcublas.so.*")]
print(os.path.dirname(hits[0]) if hits else "")')
    [ -n "$dir" ] && export LD_LIBRARY_PATH="$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    echo "cuBLAS from: ${dir:-the loader search path}"
}

mixed_corpus() {  # mixed_corpus DIR: DIR/corpus from the kit's pack, DIR/tokenizer from the
    # kit (scripts/device/prepare.sh trains it), else trained here (about 30 s)
    [ -f "$1/corpus/stats.json" ] || \
        "$PY" -m lsmt_text.data unpack "$KIT/default_mixed.lsmtpack" --out "$1/corpus" || return 1
    [ ! -f "$1/tokenizer/spm.model" ] || return 0
    if [ -d "$KIT/tokenizer" ]; then cp -r "$KIT/tokenizer" "$1/tokenizer"; else
        "$PY" -m lsmt_text.tokenizer train --data "$1/corpus" --out "$1/tokenizer" --vocab-size 8000
    fi
}
