#!/usr/bin/env bash
# Measures each kiln-fuse family on its own (docs/fusion.md): compiles MODEL
# with --fuse=none, each family alone and all, then runs kiln-bench on the
# artifacts alternately (R rounds, so drift on a shared machine hits every
# variant alike) and prints a markdown table: kernel calls per decode step
# (from the emitted entry point), prefill and decode tokens/s (median over
# the rounds of kiln-bench's median) and the speed-up over --fuse=none.
#
#   scripts/bench-fusion.sh [MODEL] [-r ROUNDS] [-t THREADS] [-p PROMPT] [-d DECODE]
#                           [--kiln-bin DIR] [--out DIR]
#
# MODEL defaults to the SmolLM2-135M Q4_1 GGUF in ../shared/models.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
model="$root/../shared/models/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf"
rounds=3 threads=2 prompt=128 decode=64
bin="$root/build/bin" out="${TMPDIR:-/tmp}/kiln-bench-fusion"
while [ $# -gt 0 ]; do
  case "$1" in
    -r) rounds="$2"; shift 2 ;;
    -t) threads="$2"; shift 2 ;;
    -p) prompt="$2"; shift 2 ;;
    -d) decode="$2"; shift 2 ;;
    --kiln-bin) bin="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    -*) echo "bench-fusion: unknown option $1" >&2; exit 2 ;;
    *) model="$1"; shift ;;
  esac
done
[ -f "$model" ] || { echo "bench-fusion: no model at $model" >&2; exit 1; }
mkdir -p "$out"
variants="none horizontal prologue epilogue elementwise all"
for v in $variants; do
  "$bin/kiln-compile" "$model" --fuse="$v" -o "$out/$v.art" >/dev/null 2>"$out/$v.log" \
    || { cat "$out/$v.log" >&2; exit 1; }
done
declare -A pre dec
for r in $(seq "$rounds"); do
  for v in $variants; do
    line="$("$bin/kiln-bench" "$out/$v.art" --threads "$threads" --repeat 3 \
      --prompt-tokens "$prompt" --decode-tokens "$decode" --bandwidth-buffer-mib 64)"
    pre[$v]+="$(echo "$line" | awk '/^prefill:/ {print $2}') "
    dec[$v]+="$(echo "$line" | awk '/^decode:/ {print $2}') "
  done
done
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
calls() { # kernel calls in the emitted decode entry point
  awk '/^extern "C" void kiln_decode\(/ {on=1} on && /KILN_TRACE_BEGIN/ {n++} on && /^}/ {on=0} END {print n+0}' "$1/model.cpp"
}
base_pre="$(echo "${pre[none]}" | median)"
base_dec="$(echo "${dec[none]}" | median)"
echo "model: $(basename "$model"), $threads threads, pp$prompt / tg$decode, $rounds rounds"
echo
echo "| --fuse | kernel calls / decode step | prefill tok/s | decode tok/s | prefill vs none | decode vs none |"
echo "| --- | ---: | ---: | ---: | ---: | ---: |"
for v in $variants; do
  p="$(echo "${pre[$v]}" | median)"
  d="$(echo "${dec[$v]}" | median)"
  printf "| %s | %s | %.1f | %.1f | %.2fx | %.2fx |\n" "$v" "$(calls "$out/$v.art")" \
    "$p" "$d" "$(echo "$p / $base_pre" | bc -l)" "$(echo "$d / $base_dec" | bc -l)"
done
