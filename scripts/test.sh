#!/usr/bin/env bash
# Runs every Kiln test: builds build/ and runs `check-kiln` (lit/FileCheck
# suites for dialects, passes, codegen and importers; the GoogleTest unit
# suites; numerics against the numpy reference; end-to-end generation on the
# real models; bad-input cases), then rebuilds the importers, runtime and
# tools with ASan+UBSan in build-asan/ (-g1: line tables for the reports,
# a faster build than full debug info; only the targets those suites run)
# and reruns the unit, importer and integration tests there, and finally
# builds the libFuzzer targets with clang in build-fuzz/ and runs each
# briefly (scripts/fuzz.sh, 10 s per target or $KILN_CI_FUZZ_SECONDS;
# KILN_SKIP_FUZZ=1 skips) plus the fuzz regression inputs. Prints
# "kiln: N passed, N failed" at the end.
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
lit=/usr/lib/llvm-22/bin/lit
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
# Wall time of each phase, printed as "kiln: <phase> took N s" (CI budget).
phase_start=$SECONDS
phase() {
  echo "kiln: $1 took $((SECONDS - phase_start)) s"
  phase_start=$SECONDS
}

bash "$root/scripts/build.sh" || { echo "kiln: build failed"; echo "kiln: 0 passed, 1 failed"; exit 1; }
phase "build"
"$lit" -sv "$root/build/test" 2>&1 | tee -a "$log"
status=${PIPESTATUS[0]}
phase "lit"

if [ "${KILN_SKIP_ASAN:-0}" != "1" ]; then
  echo "== ASan+UBSan build (build-asan/) =="
  # Only what the four suites below run (not kiln-serve or the benchmarks).
  # The compiler (kiln-opt, kiln-compile, kiln-calibrate: the MLIR passes and
  # codegen, which ASan leaves uninstrumented anyway, see CMakeLists.txt)
  # comes from build/ (KILN_EXTRA_TOOLS_DIR): what the ASan suites check is
  # the code that reads files and runs models (importers, artifact writer
  # and loader, runtime, tokenizers), and building the compiler again took
  # ~40% of this build.
  # Highway keeps every SIMD target: with the static one only
  # (HWY_COMPILE_ONLY_STATIC) the build is ~110 s shorter but SmolLM2's
  # block kernels run at SSE speed and the suites ~370 s longer.
  asan_targets="KilnImportTests kiln_runtime_tests kiln_rt_text_tests
    kiln-run kiln-bench kiln-eval kiln-keygen kiln-weight-dump KilnPlanTests"
  for t in gguf hf llama2c tokbin tokjson tokenizer calibration artifact ir; do
    asan_targets+=" kiln-fuzz-$t"
  done
  if KILN_BUILD_DIR="$root/build-asan" KILN_BUILD_TYPE=RelWithDebInfo \
       KILN_BUILD_TARGETS="$asan_targets" \
       bash "$root/scripts/build.sh" -DKILN_ENABLE_SANITIZERS=ON -DKILN_ENABLE_CUDA=OFF \
         "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG" \
         "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG"; then
    phase "ASan build"
    KILN_EXTRA_TOOLS_DIR="$root/build/bin" \
    ASAN_OPTIONS="detect_leaks=0:abort_on_error=0" UBSAN_OPTIONS="print_stacktrace=1" \
      "$lit" -sv "$root/build-asan/test/Unit" "$root/build-asan/test/Integration" \
      "$root/build-asan/test/Import" "$root/build-asan/test/Fuzz" 2>&1 | tee -a "$log"
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
    phase "ASan lit"
  else
    echo "kiln: ASan build failed"; status=1
  fi
fi

if [ "${KILN_SKIP_FUZZ:-0}" != "1" ]; then
  echo "== Fuzzing (build-fuzz/, ${KILN_CI_FUZZ_SECONDS:-10} s per target) =="
  # Each target counts as one test in the "Passed:"/"Failed:" lines below.
  bash "$root/scripts/fuzz.sh" all "${KILN_CI_FUZZ_SECONDS:-10}" 2>&1 | tee -a "$log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
  phase "fuzz build and runs"
  if [ -f "$root/build-fuzz/test/lit.site.cfg.py" ]; then
    ASAN_OPTIONS="allow_user_poisoning=0:detect_leaks=0" \
      "$lit" -sv "$root/build-fuzz/test/Fuzz" 2>&1 | tee -a "$log"
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
  fi
fi

count() {
  grep -E "^\s*($1)\s*:\s*[0-9]+" "$log" | sed -E 's/.*:\s*([0-9]+).*/\1/' |
    awk '{s += $1} END {print s + 0}'
}
passed=$(count 'Passed')
failed=$(count 'Failed|Unresolved|Timed Out')
unsupported=$(count 'Unsupported')
[ "$status" -ne 0 ] && [ "$failed" -eq 0 ] && failed=1
echo "kiln: $passed passed, $failed failed, $unsupported skipped"
exit "$status"
