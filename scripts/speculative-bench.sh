#!/usr/bin/env bash
# Speculative decoding against plain greedy decoding (docs/speculative.md):
# decode tokens/s of kiln-run on the session with and without
# --speculative=ngram and suffix (adaptive) and ngram with a fixed draft length, median of REPS
# runs each (interleaved), on the templated workload of scripts/speculative-workload/
# (answers that copy from the prompt) and on open text taken at run time
# from ../shared/data (a wiki paragraph, a story opening). Not a CI step.
#
# usage: scripts/speculative-bench.sh [MODEL ...]
#   default MODEL: SmolLM2-135M-Instruct Q4_1 and stories260K
# environment: TOKENS (generated per run, default 96), REPS (default 5),
#   OUT (work directory)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=$ROOT/build/bin
SHARED=${KILN_SHARED_DIR:-$ROOT/../shared}
TOKENS=${TOKENS:-96}
REPS=${REPS:-5}
OUT=${OUT:-$(mktemp -d /tmp/kiln-spec-bench.XXXXXX)}
MODELS=("$@")
[ ${#MODELS[@]} -gt 0 ] || MODELS=(
  "$SHARED/models/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf"
  "$SHARED/models/stories260K/stories260K.bin")
mkdir -p "$OUT"
echo "speculative-bench: work directory $OUT" >&2
cp "$ROOT"/scripts/speculative-workload/templated-*.txt "$OUT/"
python3 - "$SHARED" "$OUT" <<'PY'
import sys
shared, out = sys.argv[1], sys.argv[2]
w = open(shared + "/data/wiki.test.raw.406", encoding="utf-8").read()
start = w.find(" = ", 20000)
para = w[start:start + 1500]
open(out + "/open-wiki.txt", "w").write(para[:para.rfind(".") + 1].strip() + " ")
t = open(shared + "/data/tinystories_sample.txt", encoding="utf-8").read()
open(out + "/open-story.txt", "w").write(t[:700].rsplit(".", 1)[0] + ". ")
PY

run1() { # run1 ART PROMPT ARGS...: one kiln-run; prints its stderr
  local art=$1 prompt=$2; shift 2
  "$BIN/kiln-run" "$art" --prompt-file "$prompt" --temperature 0 \
    --max-tokens "$TOKENS" --no-engine "$@" 2>&1 >/dev/null
}
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
tps() { sed -n 's/^decode: \([0-9.]*\) tokens.*/\1/p'; }
accept() { sed -n 's/.* accepted (acceptance \([0-9.]*%\)).*/\1/p'; }

printf '| model | prompt | plain (tokens/s) | ngram adaptive | ratio | acceptance | suffix adaptive | ratio | acceptance | ngram fixed K=5 | ratio | acceptance |\n'
printf '|---|---|---|---|---|---|---|---|---|---|---|---|\n'
for model in "${MODELS[@]}"; do
  name=$(basename "$model" | sed 's/\..*//')
  art="$OUT/$name.art"
  "$BIN/kiln-compile" "$model" -o "$art" --speculative > /dev/null 2>&1
  for prompt in templated-contract templated-support open-wiki open-story; do
    p="$OUT/$prompt.txt"
    # A prompt the model cannot take (longer than its context): skipped.
    if ! "$BIN/kiln-run" "$art" --prompt-file "$p" --max-tokens 1 \
         --no-engine > /dev/null 2>&1; then
      printf '| %s | %s | (prompt longer than the context) | | | | | | |\n' \
        "$name" "$prompt"
      continue
    fi
    # The three configurations interleaved, REPS rounds (this VM drifts).
    b=() a=() x=() f=() adacc=- sxacc=- fxacc=- costs=-
    for _ in $(seq "$REPS"); do
      b+=("$(run1 "$art" "$p" | tps)")
      log=$(run1 "$art" "$p" --speculative=ngram)
      a+=("$(echo "$log" | tps)"); adacc=$(echo "$log" | accept)
      costs=$(echo "$log" | sed -n 's/.*step cost by k (ms): //p')
      log=$(run1 "$art" "$p" --speculative=suffix)
      x+=("$(echo "$log" | tps)"); sxacc=$(echo "$log" | accept)
      log=$(run1 "$art" "$p" --speculative=ngram --draft-adaptive=false)
      f+=("$(echo "$log" | tps)"); fxacc=$(echo "$log" | accept)
    done
    base=$(printf '%s\n' "${b[@]}" | median)
    ad=$(printf '%s\n' "${a[@]}" | median)
    fx=$(printf '%s\n' "${f[@]}" | median)
    sx=$(printf '%s\n' "${x[@]}" | median)
    echo "$name $prompt: step cost by k (ms): $costs" >&2
    printf '| %s | %s | %s | %s | %.2fx | %s | %s | %.2fx | %s | %s | %.2fx | %s |\n' \
      "$name" "$prompt" "$base" "$ad" "$(echo "$ad / $base" | bc -l)" "$adacc" \
      "$sx" "$(echo "$sx / $base" | bc -l)" "$sxacc" \
      "$fx" "$(echo "$fx / $base" | bc -l)" "$fxacc"
  done
done
