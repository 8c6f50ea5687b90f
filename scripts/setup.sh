#!/usr/bin/env bash
# Installs every Debian package (and Python test helper) that building and
# testing Kiln needs. Idempotent: safe to run again.
set -euo pipefail
PKGS=(cmake ninja-build ccache g++ python3 python3-numpy
      llvm-22-dev libmlir-22-dev mlir-22-tools llvm-22-tools
      libxxhash-dev nlohmann-json3-dev libopenblas-dev libgtest-dev libhwy-dev
      libsodium-dev libpcre2-dev libutf8proc-dev clang-22 libclang-rt-22-dev libomp-22-dev)
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
# PyPI gguf (gguf-py) writes the GGUF fixtures of some tests (lit feature
# gguf-py; those tests are skipped without it).
if ! python3 -c "import gguf" 2>/dev/null; then
  python3 -m pip install -q gguf || echo "setup.sh: note: pip install gguf failed; gguf-py tests will be skipped"
fi
