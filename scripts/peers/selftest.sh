#!/usr/bin/env bash
# Quick sanity check of the peer-benchmark scripts (seconds; not in CI):
# the random GGUF writer (tiny shape), the bytes-per-token count against a
# hand computation, the report and the option checks of
# scripts/bench-vs-llama-cpp.sh, and, when Kiln is built (build/bin or
# $KILN_BIN_DIR), that kiln-compile loads the random file; when llama.cpp is
# in the cache (scripts/peers/llama-cpp.sh), that llama-bench loads it too.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
peers="$root/scripts/peers"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "selftest: FAIL: $*" >&2; exit 1; }

for s in "$peers/llama-cpp.sh" "$root/scripts/bench-vs-llama-cpp.sh"; do
  bash -n "$s" || fail "syntax of $s"
done

f=$(python3 "$peers/make_random_gguf.py" --shape test-tiny --type f32 --seed 7 -o "$tmp/a.gguf" 2>/dev/null)
[ "$f" = "$tmp/a.gguf" ] || fail "make_random_gguf.py printed '$f'"
python3 "$peers/make_random_gguf.py" --shape test-tiny --type f32 --seed 7 -o "$tmp/b.gguf" >/dev/null 2>&1
cmp -s "$tmp/a.gguf" "$tmp/b.gguf" || fail "same seed, different files"
python3 "$peers/make_random_gguf.py" --shape test-tiny --type f16 -o "$tmp/h.gguf" >/dev/null 2>&1

# test-tiny: dim 64, 2 layers, kv dim 32, ffn 128, vocab 512. Per layer
# 2 norms + q,o (64x64) + k,v (32x64) + gate,up,down (128x64): f32 bytes.
layer=$(( 4 * (2*64 + 2*64*64 + 2*32*64 + 3*128*64) ))
want=$(( 2*layer + 4*64 + 4*512*64 + 4*64 ))   # + final norm + output + 1 row
eval "$(python3 "$peers/peerbench.py" info "$tmp/a.gguf")"
[ "$decode_bytes" = "$want" ] || fail "decode bytes $decode_bytes, expected $want"
[ "$ctx" = 128 ] && [ "$kiln_dtype" = f32 ] && [ "$weight_types" = F32 ] || fail "info: $ctx $kiln_dtype $weight_types"
eval "$(python3 "$peers/peerbench.py" info "$tmp/h.gguf")"
[ "$kiln_dtype" = f16 ] || fail "an F16 file should compile with --dtype=f16"

printf 'm\tmeta.decode_bytes\t1000000\nm\tmeta.pp\t512\nm\tmeta.tg\t128\n' >"$tmp/raw.tsv"
printf 'm\tkiln_pp\t%s\n' 100 300 200 >>"$tmp/raw.tsv"
printf 'm\tllama_pp\t%s\n' 100 100 100 >>"$tmp/raw.tsv"
printf 'm\tkiln_tg\t%s\n' 50 50 50 >>"$tmp/raw.tsv"
printf 'm\tllama_tg\t%s\n' 25 25 25 >>"$tmp/raw.tsv"
printf 'm\tbw\t%s\n' 10 10 10 >>"$tmp/raw.tsv"
python3 "$peers/peerbench.py" report "$tmp/raw.tsv" --csv "$tmp/r.csv" --markdown "$tmp/r.md" >/dev/null
# medians: pp 200 vs 100 (2.0), tg 50 vs 25 (2.0), roofline 10 GB/s / 1 MB = 10000 tok/s.
grep -q '^m,,512,128,200.0,100.0,2.0,50.0,25.0,2.0,1.0,10.0,10000.0,0.005,0.0025,3,$' "$tmp/r.csv" ||
  fail "report CSV: $(cat "$tmp/r.csv")"
grep -q '^| m | ' "$tmp/r.md" || fail "report markdown"

if "$root/scripts/bench-vs-llama-cpp.sh" --files nosuch >/dev/null 2>&1; then fail "--files nosuch accepted"; fi
if "$root/scripts/bench-vs-llama-cpp.sh" -r 0 >/dev/null 2>&1; then fail "-r 0 accepted"; fi

kiln=${KILN_BIN_DIR:-$root/build/bin}
if [ -x "$kiln/kiln-compile" ]; then
  "$kiln/kiln-compile" "$tmp/a.gguf" -o "$tmp/a.kiln" >/dev/null 2>&1 || fail "kiln-compile of the random GGUF"
  OMP_NUM_THREADS=1 "$kiln/kiln-bench" "$tmp/a.kiln" --prompt-tokens 8 --decode-tokens 8 \
      --repeat 1 --bandwidth-buffer-mib 16 >/dev/null || fail "kiln-bench on the random GGUF"
else
  echo "selftest: no $kiln/kiln-compile; Kiln check skipped"
fi
llama="${KILN_PEER_CACHE:-$HOME/.cache/kiln-peers}/llama.cpp-0.3.36/bin"
if [ -x "$llama/llama-bench" ]; then
  "$llama/llama-bench" -m "$tmp/a.gguf" -p 8 -n 8 -r 1 -t 1 -o json >"$tmp/l.json" 2>/dev/null ||
    fail "llama-bench on the random GGUF"
  python3 "$peers/peerbench.py" llama-json "$tmp/l.json" | grep -q '^tg ' || fail "llama-bench JSON"
else
  echo "selftest: no llama.cpp in the cache; llama.cpp check skipped"
fi
echo "selftest: OK"
