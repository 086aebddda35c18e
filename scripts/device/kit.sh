# Sourced by the scripts that run on the lent GPU machine: install_kit installs the carried
# kit's wheels ($KIT/*.whl: the packages the image lacks) into $SITE, once per machine, and
# puts $SITE first on PYTHONPATH. Needs PY, KIT and SITE set.
install_kit() {
    if ls "$KIT"/*.whl > /dev/null 2>&1 && [ ! -f "$SITE/.installed" ]; then
        "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
            --target "$SITE" "$KIT"/*.whl || return 1
        touch "$SITE/.installed"
    fi
    if [ -d "$SITE" ]; then export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"; fi
}
