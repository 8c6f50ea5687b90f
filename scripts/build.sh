#!/usr/bin/env bash
# Configures (once) and builds Kiln into build/ (or $KILN_BUILD_DIR) with
# CMake + Ninja against Debian's LLVM/MLIR 22. Installs missing packages
# first. Extra arguments are passed to the CMake configure step;
# $KILN_BUILD_TARGETS (space-separated) builds only those targets.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${KILN_BUILD_DIR:-$root/build}"
bash "$root/scripts/setup.sh"
export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/kiln-ccache}"
# Relative paths in the cache keys: clones in other folders (CI) hit too.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$root}"
if [ ! -f "$build/build.ninja" ] || [ $# -gt 0 ]; then
  cmake -G Ninja -S "$root" -B "$build" \
    -DMLIR_DIR=/usr/lib/llvm-22/lib/cmake/mlir \
    -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-22/bin/lit \
    -DCMAKE_BUILD_TYPE="${KILN_BUILD_TYPE:-Release}" "$@" >/dev/null
fi
# shellcheck disable=SC2086 # a list of target names
ninja -C "$build" ${KILN_BUILD_TARGETS:-}
