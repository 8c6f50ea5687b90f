#!/usr/bin/env python3
"""Writes a Llama-architecture GGUF file with seeded random weights.

For benchmarking Kiln against llama.cpp at the sizes of real models without
downloading them: the shapes are those of real checkpoints, the weights are
normal with std 0.02 (RMSNorm weights 1.0), the tokenizer is a valid llama
SentencePiece-style vocabulary (<unk>, <s>, </s>, the 256 byte pieces
<0x00>..<0xFF>, then synthetic pieces) that both llama.cpp and Kiln load.
The same --seed gives the same file, byte for byte.

Usage:
  make_random_gguf.py --shape llama-110m --type f32 [-o FILE] [--seed N]
  make_random_gguf.py --list-shapes

Without -o the file goes to
$KILN_PEER_CACHE/gguf/random-<shape>-<type>.gguf (KILN_PEER_CACHE defaults to
~/.cache/kiln-peers), never into the repository. The last line on stdout is
the path written. Needs numpy and gguf (gguf==0.19.0, as scripts/setup.sh
installs it).
"""
import argparse
import os
import shutil
import string
import sys
from pathlib import Path

try:
    import numpy as np
    import gguf
except ImportError as e:  # pragma: no cover - environment problem
    sys.exit(f"make_random_gguf.py: error: {e}; install with "
             "`python3 -m pip install numpy gguf==0.19.0` (or run scripts/setup.sh)")

# name: (dim, layers, heads, kv heads, ffn, vocab, context)
SHAPES = {
    "llama-110m": dict(dim=768, layers=12, heads=12, kv_heads=12, ffn=2048,
                       vocab=32000, ctx=1024),
    "tinyllama-1.1b": dict(dim=2048, layers=22, heads=32, kv_heads=4, ffn=5632,
                           vocab=32000, ctx=2048),
    # Small enough for scripts/peers/selftest.sh.
    "test-tiny": dict(dim=64, layers=2, heads=4, kv_heads=2, ffn=128,
                      vocab=512, ctx=128),
}

# GGUF token types (llama.cpp's llama_token_type).
NORMAL, UNKNOWN, CONTROL, BYTE = 1, 2, 3, 6


def die(msg):
    sys.exit(f"make_random_gguf.py: error: {msg}")


def make_vocab(n):
    """<unk>, <s>, </s>, 256 byte pieces, then unique synthetic pieces with
    decreasing scores (SentencePiece merges the highest score first)."""
    if n < 3 + 256 + 1:
        die(f"vocabulary of {n} is too small for the special and byte pieces")
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [UNKNOWN, CONTROL, CONTROL] + [BYTE] * 256
    scores = [0.0] * len(tokens)
    seen = set(tokens)
    letters = string.ascii_lowercase
    chars = ["\u2581"] + list(letters) + list(string.ascii_uppercase) + \
        list(string.digits) + list(".,;:!?'\"-()")

    def candidates():
        # Single characters, then word pieces of growing length, with and
        # without the SentencePiece word-start marker U+2581.
        yield from chars
        length = 2
        while True:
            # Deterministic enumeration of letter strings of this length.
            idx = [0] * length
            while True:
                word = "".join(letters[i] for i in idx)
                yield "\u2581" + word
                yield word
                k = length - 1
                while k >= 0 and idx[k] == len(letters) - 1:
                    idx[k] = 0
                    k -= 1
                if k < 0:
                    break
                idx[k] += 1
            length += 1

    gen = candidates()
    rank = 0
    while len(tokens) < n:
        piece = next(gen)
        if piece in seen:
            continue
        seen.add(piece)
        tokens.append(piece)
        types.append(NORMAL)
        scores.append(-float(rank))
        rank += 1
    return tokens, scores, types


def tensor_plan(s):
    """(name, numpy shape (rows, cols) or (n,), is_norm) in file order."""
    d, f, v = s["dim"], s["ffn"], s["vocab"]
    head_dim = d // s["heads"]
    kv = head_dim * s["kv_heads"]
    plan = [("token_embd.weight", (v, d), False)]
    for i in range(s["layers"]):
        b = f"blk.{i}."
        plan += [
            (b + "attn_norm.weight", (d,), True),
            (b + "attn_q.weight", (d, d), False),
            (b + "attn_k.weight", (kv, d), False),
            (b + "attn_v.weight", (kv, d), False),
            (b + "attn_output.weight", (d, d), False),
            (b + "ffn_norm.weight", (d,), True),
            (b + "ffn_gate.weight", (f, d), False),
            (b + "ffn_up.weight", (f, d), False),
            (b + "ffn_down.weight", (d, f), False),
        ]
    plan += [("output_norm.weight", (d,), True), ("output.weight", (v, d), False)]
    return plan


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", choices=sorted(SHAPES), help="model shape")
    ap.add_argument("--type", choices=["f32", "f16"], default="f32",
                    help="type of the 2-D weights (norms stay f32, as llama.cpp writes them)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--std", type=float, default=0.02)
    ap.add_argument("-o", "--output", help="output file (default: the cache directory)")
    ap.add_argument("--force", action="store_true", help="rewrite an existing file")
    ap.add_argument("--list-shapes", action="store_true")
    a = ap.parse_args()

    if a.list_shapes:
        for name, s in SHAPES.items():
            print(name, " ".join(f"{k}={v}" for k, v in s.items()))
        return
    if not a.shape:
        ap.error("--shape is required")
    s = SHAPES[a.shape]
    if a.seed < 0:
        die("--seed must be >= 0")

    if a.output:
        out = Path(a.output)
    else:
        cache = Path(os.environ.get("KILN_PEER_CACHE") or Path.home() / ".cache" / "kiln-peers")
        out = cache / "gguf" / f"random-{a.shape}-{a.type}.gguf"
    if out.exists() and not a.force:
        print(f"make_random_gguf.py: {out} exists (--force to rewrite)", file=sys.stderr)
        print(out)
        return
    out.parent.mkdir(parents=True, exist_ok=True)

    wdtype = np.float32 if a.type == "f32" else np.float16
    plan = tensor_plan(s)
    nbytes = sum(int(np.prod(shape)) * (4 if norm else np.dtype(wdtype).itemsize)
                 for _, shape, norm in plan)
    free = shutil.disk_usage(out.parent).free
    if nbytes + (256 << 20) > free:
        die(f"{out.parent} has {free / 1e9:.2f} GB free, the file needs {nbytes / 1e9:.2f} GB")

    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    try:
        w = gguf.GGUFWriter(str(tmp), "llama")
        w.add_name(f"kiln-random-{a.shape}-{a.type}-seed{a.seed}")
        w.add_description("random weights (normal, std %g, seed %d) written by "
                          "Kiln's scripts/peers/make_random_gguf.py" % (a.std, a.seed))
        w.add_file_type(gguf.LlamaFileType.ALL_F32 if a.type == "f32"
                        else gguf.LlamaFileType.MOSTLY_F16)
        w.add_context_length(s["ctx"])
        w.add_embedding_length(s["dim"])
        w.add_block_count(s["layers"])
        w.add_feed_forward_length(s["ffn"])
        w.add_head_count(s["heads"])
        w.add_head_count_kv(s["kv_heads"])
        w.add_rope_dimension_count(s["dim"] // s["heads"])
        w.add_rope_freq_base(10000.0)
        w.add_layer_norm_rms_eps(1e-5)
        w.add_vocab_size(s["vocab"])
        tokens, scores, types = make_vocab(s["vocab"])
        w.add_tokenizer_model("llama")
        w.add_token_list(tokens)
        w.add_token_scores(scores)
        w.add_token_types(types)
        w.add_unk_token_id(0)
        w.add_bos_token_id(1)
        w.add_eos_token_id(2)
        w.add_add_bos_token(True)
        w.add_add_eos_token(False)

        for name, shape, norm in plan:
            dt = np.dtype(np.float32 if norm else wdtype)
            w.add_tensor_info(name, shape, dt, int(np.prod(shape)) * dt.itemsize)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_ti_data_to_file()
        # One generator per tensor, keyed by (seed, index): a tensor's values
        # do not depend on the others'.
        for index, (name, shape, norm) in enumerate(plan):
            if norm:
                t = np.ones(shape, dtype=np.float32)
            else:
                rng = np.random.default_rng([a.seed, index])
                t = rng.standard_normal(shape, dtype=np.float32)
                t *= np.float32(a.std)
                if wdtype is np.float16:
                    t = t.astype(np.float16)
            w.write_tensor_data(t)
            del t
        w.close()
        os.replace(tmp, out)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    print(f"make_random_gguf.py: wrote {out} ({out.stat().st_size / 1e6:.1f} MB)", file=sys.stderr)
    print(out)


if __name__ == "__main__":
    main()
