# Sourced by the scripts that run on the lent GPU machine: install_kit installs the carried
# kit's wheels ($KIT/*.whl: the packages the image lacks) into $SITE, once per machine, and
# puts $SITE first on PYTHONPATH; find_cublas lets our CUDA 13 CTranslate2 open the image's
# cuBLAS. Need PY (and KIT and SITE for install_kit) set.
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
