#!/usr/bin/env bash
# Builds Kiln's libFuzzer targets (test/Fuzz) with clang-22 into build-fuzz/
# (or $KILN_FUZZ_BUILD_DIR) and runs one target, or all of them one after the
# other, for SECONDS each (default 60):
#
#   scripts/fuzz.sh [TARGET|all] [SECONDS]
#
# Targets: gguf hf llama2c tokbin tokjson tokenizer calibration artifact ir
# (docs/reliability.md says what each covers). Seeds are made from
# ../shared/models (or $KILN_FUZZ_MODELS) and test/**/*.mlir at every run
# into a fresh BUILD/fuzz-seeds.XXXXXX/ (removed at exit), so that several
# runs can go on side by side; what the fuzzer finds accumulates in
# BUILD/fuzz-corpus/TARGET/; crashing inputs land in BUILD/fuzz-crashes/
# TARGET/ (minimize with `kiln-fuzz-TARGET -minimize_crash=1 -runs=10000
# FILE`, then add the result under test/Fuzz/regressions/TARGET/).
# Environment: KILN_FUZZ_RUNS=N runs N inputs per target instead of a time
# limit; KILN_FUZZ_ARGS adds libFuzzer flags; KILN_FUZZ_JOBS sets ninja's
# -j (default 2); KILN_FUZZ_NO_BUILD=1 uses the binaries already built.
# A target fails when libFuzzer reports a crash, an out-of-memory or a
# timeout (an input running over 25 s); the script ends with lit-style
# "Passed: N" / "Failed: N" lines and exits non-zero if any target failed.
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${KILN_FUZZ_BUILD_DIR:-$root/build-fuzz}"
models="${KILN_FUZZ_MODELS:-$root/../shared/models}"
all=(gguf hf llama2c tokbin tokjson tokenizer calibration artifact ir)
which="${1:-all}"
seconds="${2:-60}"
if [ "$which" = all ]; then
  targets=("${all[@]}")
elif [[ " ${all[*]} " == *" $which "* ]]; then
  targets=("$which")
else
  echo "fuzz.sh: unknown target '$which' (expected all or one of: ${all[*]})" >&2
  exit 2
fi

# -max_len per target (bytes): a little above the largest seed, small enough
# to keep executions fast. Dictionaries: test/Fuzz/dicts.
# tokenizer: 16 KiB holds the small tokenizer.json seeds and texts long
# enough for every merge path; longer texts only made each run slower (the
# BPE encoders are quadratic in a word's length), 5x fewer runs per second.
declare -A maxlen=([gguf]=524288 [hf]=262144 [llama2c]=131072 [tokbin]=65536
  [tokjson]=262144 [tokenizer]=16384 [calibration]=65536 [artifact]=262144
  [ir]=65536)
declare -A dict=([gguf]=gguf [hf]=json [tokjson]=json [tokenizer]=json
  [calibration]=json [artifact]=json [ir]=mlir)

[ "${KILN_FUZZ_NO_BUILD:-0}" = 1 ] || bash "$root/scripts/setup.sh" || exit 1
export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/kiln-ccache}"
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$root}"
if [ "${KILN_FUZZ_NO_BUILD:-0}" = 1 ]; then
  :
elif [ ! -f "$build/build.ninja" ]; then
  # RelWithDebInfo without -DNDEBUG: asserts stay on while fuzzing.
  CC=clang-22 CXX=clang++-22 cmake -G Ninja -S "$root" -B "$build" \
    -DMLIR_DIR=/usr/lib/llvm-22/lib/cmake/mlir \
    -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-22/bin/lit \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -gline-tables-only" \
    "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O2 -gline-tables-only" \
    -DKILN_ENABLE_FUZZERS=ON -DKILN_ENABLE_CUDA=OFF >/dev/null ||
    { echo "fuzz.sh: configure failed"; echo "  Failed: 1"; exit 1; }
fi
[ "${KILN_FUZZ_NO_BUILD:-0}" = 1 ] ||
  ninja -C "$build" -j "${KILN_FUZZ_JOBS:-2}" kiln-fuzzers ||
  { echo "fuzz.sh: build failed"; echo "  Failed: 1"; exit 1; }

# ASan: allow_user_poisoning=0 makes LLVM's BumpPtrAllocator poisoning (from
# instrumented inline code, while the uninstrumented libMLIR allocates from
# the same slabs) a no-op; see the top-level CMakeLists.txt.
export ASAN_OPTIONS="allow_user_poisoning=0:detect_leaks=0:${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:${UBSAN_OPTIONS:-}"
# A fresh seed folder per run, so that runs of different targets can go on
# side by side (they share the corpus folder of a target only).
mkdir -p "$build"
seeds="$(mktemp -d "$build/fuzz-seeds.XXXXXX")"
trap 'rm -rf "$seeds"' EXIT
mkdir -p "$seeds/tokenizer-json"
KILN_FUZZ_MODELS="$models" KILN_FUZZ_WRITE_SEEDS="$seeds/tokenizer-json" \
  "$build/bin/kiln-fuzz-tokenizer" -runs=0 >/dev/null 2>&1
python3 "$root/test/Fuzz/make_seeds.py" "$models" "$root" "$seeds" \
  "$seeds/tokenizer-json" || { echo "fuzz.sh: seeds failed"; echo "  Failed: 1"; exit 1; }

passed=0
failed=0
logs="$build/fuzz-logs"
mkdir -p "$logs"
for t in "${targets[@]}"; do
  corpus="$build/fuzz-corpus/$t"
  crashes="$build/fuzz-crashes/$t"
  mkdir -p "$corpus" "$crashes"
  args=(-max_len="${maxlen[$t]}" -timeout=25 -rss_limit_mb=4096
        -print_final_stats=1 -artifact_prefix="$crashes/")
  [ -n "${dict[$t]:-}" ] && args+=(-dict="$root/test/Fuzz/dicts/${dict[$t]}.dict")
  if [ -n "${KILN_FUZZ_RUNS:-}" ]; then
    args+=(-runs="$KILN_FUZZ_RUNS")
  else
    args+=(-max_total_time="$seconds")
  fi
  # shellcheck disable=SC2206
  args+=(${KILN_FUZZ_ARGS:-})
  log="$logs/$t.log"
  echo "== fuzz $t: kiln-fuzz-$t ${args[*]} $corpus $seeds/$t"
  KILN_FUZZ_MODELS="$models" "$build/bin/kiln-fuzz-$t" "${args[@]}" \
    "$corpus" "$seeds/$t" >"$log" 2>&1
  rc=$?
  stats=$(grep -E '^stat::(number_of_executed_units|average_exec_per_sec|peak_rss_mb)' "$log" |
          sed -E 's/stat::([a-z_]+): *([0-9]+)/\1=\2/' | tr '\n' ' ')
  cov=$(grep -oE '(DONE|pulse|NEW|REDUCE|INITED) +cov: [0-9]+ ft: [0-9]+ corp: [0-9]+/[0-9]+[a-zA-Z]*' "$log" |
        tail -1 | sed -E 's/^[A-Z]+ +//')
  if [ "$rc" -eq 0 ]; then
    passed=$((passed + 1))
    echo "PASS: fuzz $t ($stats$cov)"
  else
    failed=$((failed + 1))
    echo "FAIL: fuzz $t (exit $rc; log $log; inputs in $crashes)"
    grep -E 'ERROR|runtime error|Test unit written|SUMMARY' "$log" | head -20
  fi
done
echo "fuzz: ${#targets[@]} targets"
echo "  Passed: $passed"
echo "  Failed: $failed"
[ "$failed" -eq 0 ]
