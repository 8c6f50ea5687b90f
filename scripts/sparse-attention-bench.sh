#!/usr/bin/env bash
# Speed and error of the dynamic block-sparse prefill attention kernel
# against the dense one at long context (docs/sparse-attention.md), on one
# GQA group of Llama-3-8B shapes (4 query heads, 1 KV head, head_dim 128;
# a layer costs 8x, its 8 KV heads) and a synthetic prompt with a sink,
# RoPE locality and retrieved needle spans: build/bin/kiln-attention-bench
# (runtime/bench/AttentionBench.cpp describes the input) at 8K, 32K and 128K
# tokens, one prefill step each. Prints a markdown table: the median times
# (ms), the speed-up, the kept fraction of the causal block pairs (density),
# the oracle density (the fewest blocks holding gamma of each sampled row's
# exact attention mass), and the sparse output's relative error against
# dense (||O_s - O_d|| / ||O_d||, all heads; the retrieval head's alone;
# the worst (row, head)). Measures, checks nothing; not a CI step: the
# dense kernel at 128K takes minutes on two cores, so the largest size runs
# once. Builds nothing: build kiln-attention-bench first.
#
# usage: scripts/sparse-attention-bench.sh [GAMMA ...]   (default: 0.95)
# environment: TOKENS (default "8192 32768 131072"), REPEAT (runs per
# kernel below 65536 tokens, default 3; 1 from 65536), THREADS (default: the
# tool's), BENCH_FLAGS (more kiln-attention-bench flags, e.g. "--block 128"),
# OUT (where the raw outputs go; default a new /tmp directory).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BENCH=$ROOT/build/bin/kiln-attention-bench
read -r -a SIZES <<< "${TOKENS:-8192 32768 131072}"
REPEAT=${REPEAT:-3}
GAMMAS=("$@")
[ ${#GAMMAS[@]} -gt 0 ] || GAMMAS=(0.95)
if [ ! -x "$BENCH" ]; then
  echo "sparse-attention-bench: $BENCH not found; build it first:" \
       "ninja -C build kiln-attention-bench" >&2
  exit 1
fi
FLAGS=()
[ -z "${THREADS:-}" ] || FLAGS+=(--threads "$THREADS")
read -r -a EXTRA <<< "${BENCH_FLAGS:-}"
OUT=${OUT:-$(mktemp -d /tmp/kiln-attention-bench.XXXXXX)}
echo "sparse-attention-bench: raw outputs in $OUT" >&2

for t in "${SIZES[@]}"; do
  r=$REPEAT
  [ "$t" -lt 65536 ] || r=1
  for g in "${GAMMAS[@]}"; do
    echo "== T=$t gamma=$g (repeat $r)" >&2
    "$BENCH" --tokens "$t" --gamma "$g" --repeat "$r" "${FLAGS[@]}" \
      "${EXTRA[@]}" | tee "$OUT/T$t-g$g.txt" >&2
  done
done

# One field of a saved output: the first match of sed expression $2 in $1.
field() { sed -n "$2" "$1" | head -n 1; }

echo
echo "| T | gamma | dense (ms) | sparse (ms) | speed-up | density | oracle density | rel. error | retrieval head | worst (row, head) |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for t in "${SIZES[@]}"; do
  for g in "${GAMMAS[@]}"; do
    f=$OUT/T$t-g$g.txt
    dense=$(field "$f" 's/^dense .*: \([0-9.]*\) ms (median.*/\1/p')
    sparse=$(field "$f" 's/^sparse .*: \([0-9.]*\) ms (median.*/\1/p')
    speedup=$(field "$f" 's/.*, speedup \([0-9.]*x\)$/\1/p')
    density=$(field "$f" 's/^sparse .*, density \([0-9.]*\|n\/a\).*/\1/p')
    oracle=$(field "$f" 's/.*; oracle density \([0-9.]*\) .*/\1/p')
    rel=$(field "$f" 's/^error  sparse vs dense: [^ ]* \([^,]*\),.*/\1/p')
    head0=$(field "$f" 's/^error  by head of the group[^:]*: \([^ ]*\).*/\1/p')
    worst=$(field "$f" 's/.*, worst (row, head) \([^ ]*\) at.*/\1/p')
    echo "| $t | $g | $dense | $sparse | $speedup | $density | $oracle | $rel | ${head0:--} | $worst |"
  done
done
echo
echo "Input (exact attention of 64 sampled rows per size):"
for t in "${SIZES[@]}"; do
  f=$OUT/T$t-g${GAMMAS[0]}.txt
  echo "- T=$t: $(field "$f" 's/^input: //p')"
done
