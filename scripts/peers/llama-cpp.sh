#!/usr/bin/env bash
# Builds llama.cpp, the peer Kiln is measured against, once into a cache
# directory outside the repository, and prints the directory holding its
# binaries on the last line of stdout.
#
# The llama.cpp is the one bundled in the llama-cpp-python 0.3.36 source
# package from PyPI (vendor/llama.cpp), so that the peer is pinned to one
# exact, published revision. Release, CPU only, GGML_NATIVE=ON, no CURL,
# statically linked; targets llama-bench, llama-quantize, llama-perplexity,
# llama-server and, when the revision has it, llama-cli.
#
# AMX is left out (-mno-amx-tile -mno-amx-int8 -mno-amx-bf16 beside
# -march=native) unless KILN_PEER_AMX=1: on the Emerald Rapids machines Kiln
# is developed on, this revision's AMX matmul (ggml_backend_amx_mul_mat)
# dies with a general-protection fault on every prefill of a quantized
# model, although a plain AMX program runs there. Kiln does not use AMX
# either, so both tools get the same instruction sets.
#
# Usage: scripts/peers/llama-cpp.sh            (build if needed; print bin dir)
# Environment:
#   KILN_PEER_CACHE  cache root (default $HOME/.cache/kiln-peers)
#   KILN_PEER_JOBS   parallel compile jobs (default 2)
#   KILN_PEER_KEEP_BUILD=1  keep the CMake build tree after a successful build
#   KILN_PEER_AMX=1  build llama.cpp's AMX kernels too (see above)
#
# Idempotent: once built, a second call only prints the bin directory. A
# failed or interrupted build is resumed by the next call.
set -euo pipefail

VERSION=0.3.36
CACHE=${KILN_PEER_CACHE:-$HOME/.cache/kiln-peers}
DEST=$CACHE/llama.cpp-$VERSION
BIN=$DEST/bin
JOBS=${KILN_PEER_JOBS:-2}
REQUIRED=(llama-bench llama-quantize llama-perplexity llama-server)
OPTIONAL=(llama-cli)

die() { echo "llama-cpp.sh: error: $*" >&2; exit 1; }
note() { echo "llama-cpp.sh: $*" >&2; }

AMX=${KILN_PEER_AMX:-0}
case "$AMX" in 0|1) ;; *) die "KILN_PEER_AMX must be 0 or 1, got '$AMX'";; esac
AMX_FLAGS=""
[ "$AMX" = 1 ] || AMX_FLAGS="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"

built() {
  [ -f "$DEST/.complete" ] || return 1
  # A build with the other AMX choice (or from before the choice) is redone.
  [ "$(cat "$DEST/.amx" 2>/dev/null)" = "$AMX" ] || return 1
  local t
  for t in "${REQUIRED[@]}"; do [ -x "$BIN/$t" ] || return 1; done
}

if built; then
  echo "$BIN"
  exit 0
fi

case "$JOBS" in ''|*[!0-9]*|0) die "KILN_PEER_JOBS must be a positive integer, got '$JOBS'";; esac

# --- build dependencies (as scripts/setup.sh installs Kiln's) --------------
PKGS=(cmake ninja-build g++ python3 python3-pip)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# A python3/pip that is not Debian's (pyenv, venv) is as good as Debian's.
if [ ${#missing[@]} -gt 0 ] && python3 -m pip --version >/dev/null 2>&1; then
  keep=()
  for p in "${missing[@]}"; do
    case "$p" in python3|python3-pip) ;; *) keep+=("$p");; esac
  done
  missing=(${keep[@]+"${keep[@]}"})
fi
if [ ${#missing[@]} -gt 0 ]; then
  command -v apt-get >/dev/null || die "missing packages ${missing[*]} and no apt-get to install them"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO=sudo
  note "installing ${missing[*]}"
  $SUDO apt-get update -q >&2 || die "apt-get update failed"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "${missing[@]}" >&2 ||
    die "apt-get install ${missing[*]} failed"
fi
for c in cmake ninja g++ python3; do
  command -v "$c" >/dev/null || die "'$c' not found on PATH after installing the build dependencies"
done
python3 -m pip --version >/dev/null 2>&1 || die "python3 -m pip does not work; install python3-pip"

mkdir -p "$DEST" || die "cannot create $DEST"
# One build at a time per cache directory.
exec 9>"$DEST/.lock"
if command -v flock >/dev/null; then
  flock 9 || die "cannot lock $DEST/.lock"
  if built; then echo "$BIN"; exit 0; fi
fi

# --- source ---------------------------------------------------------------
SRC=$DEST/src
LLAMA=$SRC/vendor/llama.cpp
if [ ! -f "$SRC/.unpacked" ]; then
  DL=$DEST/download
  rm -rf "$SRC"
  mkdir -p "$DL"
  shopt -s nullglob
  tarballs=("$DL"/llama[_-]cpp[_-]python-"$VERSION".tar.gz)
  if [ ${#tarballs[@]} -eq 0 ]; then
    note "downloading llama-cpp-python==$VERSION (source package) from PyPI"
    python3 -m pip download --no-binary :all: --no-deps --disable-pip-version-check \
        -d "$DL" "llama-cpp-python==$VERSION" >&2 ||
      die "pip download llama-cpp-python==$VERSION failed (network? PyPI reachable? see pip's message above)"
    tarballs=("$DL"/llama[_-]cpp[_-]python-"$VERSION".tar.gz)
  fi
  shopt -u nullglob
  [ ${#tarballs[@]} -eq 1 ] || die "expected one llama-cpp-python $VERSION sdist in $DL, found: $(ls "$DL")"
  note "sha256 $(sha256sum "${tarballs[0]}" | cut -d' ' -f1)  $(basename "${tarballs[0]}")"
  mkdir -p "$SRC"
  tar -xzf "${tarballs[0]}" -C "$SRC" --strip-components=1 || die "cannot unpack ${tarballs[0]}"
  [ -f "$LLAMA/CMakeLists.txt" ] || die "the sdist has no vendor/llama.cpp/CMakeLists.txt"
  touch "$SRC/.unpacked"
  rm -rf "$DL"
fi

# --- build ----------------------------------------------------------------
BUILD=$DEST/build
note "configuring $LLAMA (Release, CPU, GGML_NATIVE=ON, AMX $([ "$AMX" = 1 ] && echo on || echo off)) in $BUILD"
rm -f "$DEST/.complete"
cmake -S "$LLAMA" -B "$BUILD" -G Ninja \
    -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_C_FLAGS="$AMX_FLAGS" -DCMAKE_CXX_FLAGS="$AMX_FLAGS" \
    -DBUILD_SHARED_LIBS=OFF \
    -DGGML_NATIVE=ON \
    -DGGML_CUDA=OFF -DGGML_METAL=OFF -DGGML_VULKAN=OFF -DGGML_HIP=OFF -DGGML_SYCL=OFF \
    -DGGML_OPENCL=OFF -DGGML_BLAS=OFF \
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON \
    --no-warn-unused-cli >&2 ||
  die "CMake configure failed (see above; the compiler or CMake may be too old for this llama.cpp)"

targets=("${REQUIRED[@]}")
have_targets=$(ninja -C "$BUILD" -t targets all 2>/dev/null | cut -d: -f1)
for t in "${REQUIRED[@]}"; do
  grep -qx "$t" <<<"$have_targets" || die "this llama.cpp has no target $t"
done
for t in "${OPTIONAL[@]}"; do
  if grep -qx "$t" <<<"$have_targets"; then targets+=("$t"); else note "no target $t; skipped"; fi
done
note "building ${targets[*]} with $JOBS jobs (takes a while)"
nice -n 10 ninja -C "$BUILD" -j "$JOBS" "${targets[@]}" >&2 ||
  die "building llama.cpp failed (see the compiler's message above); rerun to resume"

mkdir -p "$BIN"
for t in "${targets[@]}"; do
  [ -x "$BUILD/bin/$t" ] || die "$t was not produced in $BUILD/bin"
  cp -f "$BUILD/bin/$t" "$BIN/$t"
done
{
  echo "llama-cpp-python $VERSION sdist, vendor/llama.cpp"
  [ -f "$LLAMA/.git-commit" ] && echo "commit $(cat "$LLAMA/.git-commit")"
  echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -m) with $(g++ --version | head -1)"
  echo "cmake: Release BUILD_SHARED_LIBS=OFF GGML_NATIVE=ON LLAMA_CURL=OFF, CPU only, C/C++ flags '$AMX_FLAGS'"
  echo "targets: ${targets[*]}"
} >"$DEST/BUILD-INFO"
"$BIN/llama-bench" --version >>"$DEST/BUILD-INFO" 2>&1 || true
echo "$AMX" >"$DEST/.amx"
touch "$DEST/.complete"
[ "${KILN_PEER_KEEP_BUILD:-0}" = 1 ] || rm -rf "$BUILD"
note "built into $BIN"
echo "$BIN"
