#!/usr/bin/env bash
# Installs every Debian package (and Python test helper) that building and
# testing Kiln needs. Idempotent: safe to run again.
set -euo pipefail
PKGS=(cmake ninja-build ccache g++ python3 python3-numpy python3-jinja2
      llvm-22-dev libmlir-22-dev mlir-22-tools llvm-22-tools
      libxxhash-dev nlohmann-json3-dev libopenblas-dev libgtest-dev libhwy-dev
      libsodium-dev libpcre2-dev libutf8proc-dev clang-22 libclang-rt-22-dev libomp-22-dev
      libcpp-httplib-dev openmpi-bin libopenmpi-dev)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO=sudo
if [ ${#missing[@]} -gt 0 ]; then
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "${missing[@]}"
fi
# lit runs the numpy reference with whatever `python3` is first on PATH.
if ! python3 -c "import numpy" 2>/dev/null; then
  python3 -m pip install -q numpy
fi
# gguf-py (PyPI `gguf`): the independent reference the GGML block-format
# tests compare Kiln's decoding with (gguf.quants.dequantize), and the
# writer of some tests' GGUF fixtures. Pinned so that the reference does not
# move under the tests.
if ! python3 -c "import gguf, sys; sys.exit(gguf.__version__ != '0.19.0')" 2>/dev/null &&
   ! python3 -c "import importlib.metadata as m, sys; sys.exit(m.version('gguf') != '0.19.0')" 2>/dev/null; then
  python3 -m pip install -q gguf==0.19.0
fi
# cuobjdump (PyPI nvidia-cuda-cuobjdump): the CUDA codegen tests list the
# cubins and PTX inside a model.so with it.
if [ -x /usr/local/cuda/bin/nvcc ] &&
   ! python3 -c "import glob, nvidia, sys; sys.exit(not any(glob.glob(p + '/*/bin/cuobjdump') for p in nvidia.__path__))" 2>/dev/null; then
  python3 -m pip install -q nvidia-cuda-cuobjdump
fi
# The chat-template tests (test/Chat) compare with jinja2 under that python3.
if ! python3 -c "import jinja2" 2>/dev/null; then
  python3 -m pip install -q jinja2
fi
# The kiln-serve tests (test/Serve) drive the server with the OpenAI Python
# client and parse /metrics with prometheus_client's exposition parser.
if ! python3 -c "import openai, prometheus_client" 2>/dev/null; then
  python3 -m pip install -q openai prometheus_client
fi
