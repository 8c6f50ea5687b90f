#!/usr/bin/env bash
# Sparse attention's price and speed on SmolLM2-135M-Instruct (an 8K model),
# as recorded in docs/sparse-attention.md: accuracy after a 4,096-token
# prefill (KL, greedy agreement, perplexity against dense), the per-head
# budgets on plain text vs a retrieval prompt, the prefill speed at 4K, and
# a needle-in-a-haystack prompt of ~8K tokens. Not a CI step (minutes of
# CPU); run from the repository root after building.
#
# usage: scripts/sparse-attention-eval.sh [GAMMA ...]   (default: 0.95 0.98)
# environment: MODE (the estimate: antidiag, the default, or flex), EXTRA
# (more --sparse-attention settings, e.g. ",decode=quest" or ",stride=8")
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=$ROOT/build/bin
MODEL=$ROOT/../shared/models/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf
WIKI=$ROOT/../shared/data/wiki.test.raw.406
OUT=${OUT:-$(mktemp -d /tmp/kiln-sparse-eval.XXXXXX)}
GAMMAS=("$@")
MODE=${MODE:-antidiag}
EXTRA=${EXTRA:-}
[ ${#GAMMAS[@]} -gt 0 ] || GAMMAS=(0.95 0.98)
echo "sparse-attention-eval: work directory $OUT" >&2
cd "$OUT"

python3 - "$WIKI" <<'PY'
import sys
w = open(sys.argv[1], encoding="utf-8").read()
open("plain.txt", "w").write(w[:40000])
part = w[:9000]
open("retrieval.txt", "w").write(part + "\n\n" + part + "\n\n" + part[:200])
flat = w.replace("\n", " ")[:34500]
mid = flat.find(". ", len(flat) // 2) + 2
doc = flat[:mid] + "The secret code word is BLUEBERRY. " + flat[mid:]
open("needle.txt", "w").write("Read the document and answer the question. Document: " + doc +
                              " Question: What is the secret code word? Answer with one word.")
PY

"$BIN/kiln-compile" "$MODEL" -o dense.art --max-seq-len 8192 > /dev/null
for g in "${GAMMAS[@]}"; do
  "$BIN/kiln-compile" "$MODEL" -o "g$g.art" --max-seq-len 8192 --sparse-attention="$MODE:gamma=$g$EXTRA" 2> /dev/null
done

echo "== accuracy: 4096 tokens prefilled, 256 scored (wiki.test.raw.406)"
"$BIN/kiln-eval" dense.art --text "$WIKI" --ctx 4352 --max-tokens 4352 --prefill-tokens 4096 2> /dev/null | grep perplexity
for g in "${GAMMAS[@]}"; do
  echo "-- gamma $g"
  "$BIN/kiln-eval" dense.art --compare "g$g.art" --text "$WIKI" --tokens 4352 --prefill-tokens 4096 2> /dev/null |
    grep -E "^sparse attention: |KL|agreement"
  "$BIN/kiln-eval" "g$g.art" --text "$WIKI" --ctx 4352 --max-tokens 4352 --prefill-tokens 4096 2> /dev/null | grep perplexity
done

g=${GAMMAS[-1]}
echo "== budgets per layer and KV head, gamma $g: plain text | retrieval prompt"
for t in plain retrieval; do
  "$BIN/kiln-eval" "g$g.art" --text $t.txt --ctx 4097 --max-tokens 4097 --prefill-tokens 4096 2> /dev/null > budget-$t.txt
done
paste <(grep "density per KV head" budget-plain.txt | sed 's/sparse attention layer //; s/ density per KV head:/:/') \
      <(grep "density per KV head" budget-retrieval.txt | sed 's/.*density per KV head://')
grep -h "^sparse attention: " budget-plain.txt budget-retrieval.txt

echo "== prefill speed, 4096-token prompt (attention kernels from the trace)"
for a in dense.art "g$g.art"; do
  "$BIN/kiln-bench" "$a" --prompt-tokens 4096 --decode-tokens 4 --repeat 1 --trace "$a.trace.json" 2>&1 | grep "prefill:"
  python3 - "$a.trace.json" <<'PY'
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
att = sum(e["dur"] for e in ev if e.get("cat") == "kernel" and e["args"].get("kind") == "attention"
          and e["args"].get("tokens", 1) > 1)
print("  attention kernels: %.2f s" % (att / 1e6))
PY
done

echo "== needle in a haystack (~8K tokens)"
for a in dense.art "g$g.art"; do
  printf '%s: ' "$a"
  (tr -d '\n' < needle.txt; echo) | "$BIN/kiln-run" "$a" --chat --temperature 0 --max-tokens 16 2> /dev/null | tr -d '\n'
  echo
done
