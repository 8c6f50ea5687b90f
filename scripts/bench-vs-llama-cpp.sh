#!/usr/bin/env bash
# Kiln against llama.cpp on the same GGUF files, same machine, same threads.
#
# For each file: compiles it with kiln-compile (cached), then for each round
# runs kiln-bench and llama-bench alternately (Kiln first in odd rounds,
# llama.cpp first in even ones, so that a change in the machine's load hits
# both alike) and reports the medians over the rounds: prefill (ppP) and
# decode (tgN) tokens/s of both, their ratio, and the decode roofline: the
# bytes one decode step reads (every layer matrix and norm, the output
# matrix, ONE embedding row; from the GGUF tensor table) over the memory
# bandwidth kiln-bench measures in the same run.
#
# Kiln's prefill is `kiln-bench --prompt-tokens P --decode-tokens 1`, its
# decode `kiln-bench --prompt-tokens 1 --decode-tokens N`
# (decode from an almost empty context, as llama-bench's tgN); llama.cpp's is
# one `llama-bench -p P -n N -r 1 -o json` per round. Each tool warms up in
# each invocation. The files (and the llama.cpp build) are prepared into the
# cache directory on first use; nothing is written into the repository.
#
# Run by hand (not part of CI): scripts/bench-vs-llama-cpp.sh --help
set -euo pipefail
shopt -s inherit_errexit

root="$(cd "$(dirname "$0")/.." && pwd)"
peers="$root/scripts/peers"

ALL_FILES=(smollm2-q4_1 smollm2-q8_0 smollm2-q4_k_m stories260k tinystories656k-q8_0
           llama110m-f32 llama110m-f16 llama110m-q8_0 llama110m-q4_0 llama110m-q4_k_m
           tinyllama-f16 tinyllama-q8_0 tinyllama-q4_0 tinyllama-q4_k_m)

usage() {
  cat <<EOF
usage: scripts/bench-vs-llama-cpp.sh [options]

  --files A,B,...      files to measure (default: all); --list shows them
  -r, --repetitions N  rounds per file, medians reported (default 3)
  -t, --threads N      threads for both tools (default: nproc = $(nproc))
  -p, --prompt N       prefill test length (default 512; capped at a model's context)
  -n, --gen N          decode test length (default 128)
  --markdown FILE      also write the table as markdown
  --csv FILE           also write the table as CSV
  --kiln-flags "F ..." extra kiln-compile flags for every file, e.g.
                       "--act-quant=int8" (noted in the table; cached apart)
  --kiln-bin DIR       Kiln's binaries (default \$KILN_BIN_DIR or $root/build/bin)
  --llama-bin DIR      llama.cpp's binaries (default: built by scripts/peers/llama-cpp.sh)
  --models DIR         shipped models (default \$KILN_MODELS_DIR or $root/../shared/models)
  --cache DIR          cache (default \$KILN_PEER_CACHE or ~/.cache/kiln-peers)
  --list               print the file names and exit

Files: ${ALL_FILES[*]}
EOF
}

die() { echo "bench-vs-llama-cpp.sh: error: $*" >&2; exit 1; }
note() { echo "bench-vs-llama-cpp.sh: $*" >&2; }
posint() { case "$2" in ''|*[!0-9]*|0) die "$1 needs a positive integer, got '$2'";; esac; }

FILES=""
REPS=3
THREADS=$(nproc)
PP=512
TG=128
MARKDOWN=""
CSV=""
KILN_FLAGS=()
KILN_BIN=${KILN_BIN_DIR:-$root/build/bin}
LLAMA_BIN=""
MODELS=${KILN_MODELS_DIR:-$root/../shared/models}
CACHE=${KILN_PEER_CACHE:-$HOME/.cache/kiln-peers}
while [ $# -gt 0 ]; do
  opt=$1
  case "$opt" in
    -h|--help) usage; exit 0;;
    --list) printf '%s\n' "${ALL_FILES[@]}"; exit 0;;
    --files|-r|--repetitions|-t|--threads|-p|--prompt|-n|--gen|--markdown|--csv|\
    --kiln-flags|--kiln-bin|--llama-bin|--models|--cache)
      [ $# -ge 2 ] || die "$opt needs a value"
      val=$2; shift 2;;
    --*=*) set -- "${opt%%=*}" "${opt#*=}" "${@:2}"; continue;;
    *) die "unknown argument '$opt' (see --help)";;
  esac
  case "$opt" in
    --files) FILES=$val;;
    --kiln-flags) read -r -a KILN_FLAGS <<<"$val";;
    -r|--repetitions) posint "$opt" "$val"; REPS=$val;;
    -t|--threads) posint "$opt" "$val"; THREADS=$val;;
    -p|--prompt) posint "$opt" "$val"; PP=$val;;
    -n|--gen) posint "$opt" "$val"; TG=$val;;
    --markdown) MARKDOWN=$val;;
    --csv) CSV=$val;;
    --kiln-bin) KILN_BIN=$val;;
    --llama-bin) LLAMA_BIN=$val;;
    --models) MODELS=$val;;
    --cache) CACHE=$val;;
  esac
done

selected=()
if [ -z "$FILES" ]; then
  selected=("${ALL_FILES[@]}")
else
  IFS=, read -r -a selected <<<"$FILES"
  for f in "${selected[@]}"; do
    known=0
    for g in "${ALL_FILES[@]}"; do [ "$f" != "$g" ] || known=1; done
    [ $known = 1 ] || die "unknown file '$f' (known: ${ALL_FILES[*]})"
  done
fi
[ ${#selected[@]} -gt 0 ] || die "--files selects nothing"

# --- tools ------------------------------------------------------------------
for t in kiln-compile kiln-bench; do
  [ -x "$KILN_BIN/$t" ] || die "$KILN_BIN/$t not found; build Kiln (scripts/build.sh) or pass --kiln-bin DIR"
done
if [ -z "$LLAMA_BIN" ]; then
  note "preparing llama.cpp (scripts/peers/llama-cpp.sh)"
  LLAMA_BIN=$(KILN_PEER_CACHE=$CACHE "$peers/llama-cpp.sh" | tail -n 1) ||
    die "scripts/peers/llama-cpp.sh failed"
fi
for t in llama-bench llama-quantize; do
  [ -x "$LLAMA_BIN/$t" ] || die "$LLAMA_BIN/$t not found (--llama-bin DIR or scripts/peers/llama-cpp.sh)"
done
python3 -c "import gguf, numpy" 2>/dev/null ||
  die "python3 cannot import gguf and numpy (scripts/setup.sh installs gguf==0.19.0)"
mkdir -p "$CACHE/gguf" "$CACHE/kiln" || die "cannot create $CACHE"

# Kiln's thread count: a --threads flag if this kiln-bench has one, and
# OMP_NUM_THREADS in any case (what the OpenMP runtime reads).
KILN_THREAD_ARGS=()
if "$KILN_BIN/kiln-bench" --help 2>/dev/null | grep -q -- '--threads'; then
  KILN_THREAD_ARGS=(--threads "$THREADS")
fi

# --- files ------------------------------------------------------------------
shipped() { # NAME -> path of a model shipped in $MODELS
  case "$1" in
    smollm2-q4_1) echo "$MODELS/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf";;
    stories260k) echo "$MODELS/stories260K/stories260K.gguf";;
    tinystories656k-q8_0) echo "$MODELS/tinystories-656k/gguf/TinyStories-656K-Q8_0.gguf";;
    *) return 1;;
  esac
}

quantize() { # SRC DST TYPE
  local tmp="$2.tmp$$"
  note "llama-quantize $(basename "$1") -> $(basename "$2") ($3)"
  nice "$LLAMA_BIN/llama-quantize" --allow-requantize "$1" "$tmp" "$3" "$THREADS" \
      >"$tmp.log" 2>&1 ||
    { tail -n 20 "$tmp.log" >&2; rm -f "$tmp" "$tmp.log"; die "llama-quantize $3 of $1 failed"; }
  rm -f "$tmp.log"
  mv -f "$tmp" "$2"
}

random_gguf() { # SHAPE TYPE -> path
  local out="$CACHE/gguf/random-$1-$2.gguf"
  if [ ! -f "$out" ]; then
    python3 "$peers/make_random_gguf.py" --shape "$1" --type "$2" -o "$out" >/dev/null ||
      die "make_random_gguf.py --shape $1 --type $2 failed"
  fi
  echo "$out"
}

prepare() { # NAME -> path of its GGUF (made if missing)
  local name=$1 path src type
  if path=$(shipped "$name"); then
    [ -f "$path" ] || die "$path not found (--models DIR)"
    echo "$path"; return
  fi
  case "$name" in
    smollm2-*) src=$(shipped smollm2-q4_1); [ -f "$src" ] || die "$src not found (--models DIR)";;
    llama110m-f32|llama110m-f16) random_gguf llama-110m "${name#llama110m-}"; return;;
    llama110m-*) src=$(random_gguf llama-110m f32);;
    tinyllama-f16) random_gguf tinyllama-1.1b f16; return;;
    tinyllama-*) src=$(random_gguf tinyllama-1.1b f16);;
    *) die "no recipe for $name";;
  esac
  type=$(tr '[:lower:]' '[:upper:]' <<<"${name##*-}")
  path="$CACHE/gguf/$name.gguf"
  [ -f "$path" ] || quantize "$src" "$path" "$type"
  echo "$path"
}

# kiln-compile FILE once per (file, compiler, flags): the key sits beside the
# artifact and a change recompiles.
kiln_artifact() { # NAME GGUF DTYPE CTX -> artifact dir
  local name=$1 gguf=$2 dtype=$3 ctx=$4 key suffix=""
  local flags=(--dtype="$dtype" --max-seq-len="$ctx" ${KILN_FLAGS[@]+"${KILN_FLAGS[@]}"})
  [ ${#KILN_FLAGS[@]} -eq 0 ] || suffix="-$(printf '%s' "${KILN_FLAGS[*]}" | tr -c 'A-Za-z0-9=' '_')"
  local art="$CACHE/kiln/$name$suffix.kiln"
  [ "$PP" -le 512 ] || flags+=(--max-prefill-tokens="$PP")
  key="$(readlink -f "$gguf") $(stat -L -c '%s %Y' "$gguf") $(stat -L -c '%s %Y' "$KILN_BIN/kiln-compile") ${flags[*]}"
  if [ -f "$art.key" ] && [ "$(cat "$art.key")" = "$key" ] && [ -f "$art/manifest.json" ]; then
    echo "$art"; return
  fi
  note "kiln-compile $(basename "$gguf") ${flags[*]}"
  rm -f "$art.key"
  nice "$KILN_BIN/kiln-compile" "$gguf" -o "$art" "${flags[@]}" >&2 ||
    die "kiln-compile $gguf failed"
  echo "$key" >"$art.key"
  echo "$art"
}

# --- measuring ----------------------------------------------------------------
run_dir="$CACHE/runs/$(date +%Y%m%d-%H%M%S)-$$"
mkdir -p "$run_dir"
raw="$run_dir/raw.tsv"
: >"$raw"
record() { printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$raw"; }

kiln_bench() { # ART P N LOG
  OMP_NUM_THREADS=$THREADS "$KILN_BIN/kiln-bench" "$1" --prompt-tokens "$2" --decode-tokens "$3" \
      --repeat 1 --no-verify \
      ${KILN_THREAD_ARGS[@]+"${KILN_THREAD_ARGS[@]}"} >"$4" 2>&1 ||
    { cat "$4" >&2; die "kiln-bench $1 failed"; }
}
value() { # LOG PREFIX -> the number after "PREFIX: "
  sed -n "s/^$2: \([0-9.]*\) .*/\1/p" "$1" | head -n 1
}

llama_build=""
for name in "${selected[@]}"; do
  gguf=$(prepare "$name")
  info=$(python3 "$peers/peerbench.py" info "$gguf") || die "cannot read $gguf"
  eval "$info"
  pp=$PP n=$TG file_note=""
  if [ "$ctx" -gt 0 ] && [ "$pp" -gt "$ctx" ]; then pp=$ctx; file_note="context $ctx"; fi
  if [ "$ctx" -gt 0 ] && [ "$n" -ge "$ctx" ]; then n=$((ctx - 1)); file_note="context $ctx"; fi
  kctx=$(( pp > n + 1 ? pp : n + 1 ))
  if [ "$ctx" -gt 0 ] && [ "$kctx" -gt "$ctx" ]; then kctx=$ctx; fi
  art=$(kiln_artifact "$name" "$gguf" "$kiln_dtype" "$kctx")
  record "$name" meta.weight_types "$weight_types"
  record "$name" meta.decode_bytes "$decode_bytes"
  record "$name" meta.pp "$pp"
  record "$name" meta.tg "$n"
  [ "$kiln_dtype" = f32 ] || file_note="${file_note:+$file_note, }Kiln --dtype=$kiln_dtype"
  [ ${#KILN_FLAGS[@]} -eq 0 ] || file_note="${file_note:+$file_note, }Kiln ${KILN_FLAGS[*]}"
  [ -z "$file_note" ] || record "$name" meta.note "$file_note"
  for ((round = 1; round <= REPS; round++)); do
    note "$name: round $round/$REPS (pp$pp, tg$n, $THREADS threads)"
    order=(kiln llama)
    [ $((round % 2)) -eq 1 ] || order=(llama kiln)
    for tool in "${order[@]}"; do
      if [ "$tool" = kiln ]; then
        kiln_bench "$art" "$pp" 1 "$run_dir/$name.$round.kiln-pp.log"
        kiln_bench "$art" 1 "$n" "$run_dir/$name.$round.kiln-tg.log"
        v=$(value "$run_dir/$name.$round.kiln-pp.log" prefill)
        [ -n "$v" ] || die "no prefill rate in $run_dir/$name.$round.kiln-pp.log"
        record "$name" kiln_pp "$v"
        v=$(value "$run_dir/$name.$round.kiln-tg.log" decode)
        [ -n "$v" ] || die "no decode rate in $run_dir/$name.$round.kiln-tg.log"
        record "$name" kiln_tg "$v"
        for phase in pp tg; do
          v=$(value "$run_dir/$name.$round.kiln-$phase.log" "memory bandwidth")
          [ -z "$v" ] || record "$name" bw "$v"
        done
      else
        json="$run_dir/$name.$round.llama.json"
        "$LLAMA_BIN/llama-bench" -m "$gguf" -p "$pp" -n "$n" -r 1 -t "$THREADS" -o json \
            >"$json" 2>"$json.err" ||
          { tail -n 20 "$json.err" >&2; die "llama-bench on $gguf failed"; }
        parsed=$(python3 "$peers/peerbench.py" llama-json "$json") || die "cannot parse $json"
        v=$(sed -n 's/^pp //p' <<<"$parsed")
        [ -n "$v" ] || die "no pp result in $json"
        record "$name" llama_pp "$v"
        v=$(sed -n 's/^tg //p' <<<"$parsed")
        [ -n "$v" ] || die "no tg result in $json"
        record "$name" llama_tg "$v"
        llama_build=$(sed -n 's/^build //p' <<<"$parsed" | head -n 1)
      fi
    done
  done
done

kiln_rev=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
title="Kiln $kiln_rev vs llama.cpp ${llama_build:-?} (llama-cpp-python 0.3.36), $THREADS threads, median of $REPS rounds, $(date +%Y-%m-%d), ${cpu:-unknown CPU}"
python3 "$peers/peerbench.py" report "$raw" --title "$title" \
    ${MARKDOWN:+--markdown "$MARKDOWN"} ${CSV:+--csv "$CSV"} ||
  die "cannot write the report"
note "raw results and logs: $run_dir"
