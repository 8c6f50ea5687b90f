#!/usr/bin/env python3
"""Builds a Kiln artifact (docs/artifact.md) from a llama2.c checkpoint WITHOUT
the compiler: weights.bin/tokenizer.json/manifest.json plus a hand-written
model.cpp calling the kernel ABI, compiled to model.so. It is the runtime's
stand-in for kiln-compile output, used to test kiln-run end to end.

usage: make_llama2c_artifact.py MODEL.bin TOKENIZER.bin OUT_DIR [--max-prefill N]
"""
import ctypes, json, os, struct, subprocess, sys

import numpy as np

ALIGN = 64


def abi_version(include_dir):
    """KILN_ABI_VERSION of the kernel_abi.h model.cpp is compiled against."""
    import re
    text = open(os.path.join(include_dir, "kiln_rt", "kernel_abi.h")).read()
    return int(re.search(r"#define KILN_ABI_VERSION (\d+)", text).group(1))

def xxh3(path):
    lib = ctypes.CDLL("libxxhash.so.0")
    lib.XXH3_64bits.restype = ctypes.c_uint64
    lib.XXH3_64bits.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    data = open(path, "rb").read()
    return "%016x" % lib.XXH3_64bits(data, len(data))

def main():
    args = sys.argv[1:]
    max_prefill = 64
    if "--max-prefill" in args:
        i = args.index("--max-prefill")
        max_prefill = int(args[i + 1])
        del args[i:i + 2]
    model_path, tok_path, out = args
    os.makedirs(out, exist_ok=True)
    raw = open(model_path, "rb").read()
    dim, hidden, n_layers, n_heads, n_kv_heads, vocab, seq_len = struct.unpack("7i", raw[:28])
    shared = vocab > 0
    vocab = abs(vocab)
    hd = dim // n_heads
    kv_dim = n_kv_heads * hd
    w = np.frombuffer(raw, dtype=np.float32, offset=28)
    shapes = [("tok_embeddings", (vocab, dim)), ("rms_att", (n_layers, dim)),
              ("wq", (n_layers, dim, dim)), ("wk", (n_layers, kv_dim, dim)),
              ("wv", (n_layers, kv_dim, dim)), ("wo", (n_layers, dim, dim)),
              ("rms_ffn", (n_layers, dim)), ("w1", (n_layers, hidden, dim)),
              ("w2", (n_layers, dim, hidden)), ("w3", (n_layers, hidden, dim)),
              ("rms_final", (dim,)), ("freq_real", (seq_len, hd // 2)),
              ("freq_imag", (seq_len, hd // 2))]
    arrays, at = {}, 0
    for name, shape in shapes:
        count = int(np.prod(shape))
        arrays[name] = w[at:at + count].reshape(shape)
        at += count
    if not shared:
        arrays["wcls"] = w[at:at + vocab * dim].reshape(vocab, dim)

    # weights.bin: one tensor per layer matrix, each 64-byte aligned.
    tensors, blob, offsets = [], bytearray(), {}
    def add(name, a):
        pad = (-len(blob)) % ALIGN
        blob.extend(b"\0" * pad)
        offsets[name] = len(blob)
        b = np.ascontiguousarray(a, dtype="<f4").tobytes()
        tensors.append({"name": name, "offset": len(blob), "bytes": len(b),
                        "dtype": "f32", "shape": list(a.shape)})
        blob.extend(b)
    add("tok_embeddings", arrays["tok_embeddings"])
    for l in range(n_layers):
        for n in ["rms_att", "wq", "wk", "wv", "wo", "rms_ffn", "w1", "w2", "w3"]:
            add(f"layers.{l}.{n}", arrays[n][l])
    add("rms_final", arrays["rms_final"])
    if not shared:
        add("wcls", arrays["wcls"])
    blob.extend(b"\0" * ((-len(blob)) % ALIGN))
    open(os.path.join(out, "weights.bin"), "wb").write(blob)

    # tokenizer.json from llama2.c tok*.bin.
    t = open(tok_path, "rb").read()
    (max_len,) = struct.unpack_from("i", t, 0)
    p, pieces, scores = 4, [], []
    for _ in range(vocab):
        score, n = struct.unpack_from("fi", t, p)
        p += 8
        pieces.append(t[p:p + n]); scores.append(score); p += n
    types = []
    for i, pc in enumerate(pieces):
        if i == 0: types.append(2)
        elif i in (1, 2): types.append(3)
        elif pc.startswith(b"<0x") and pc.endswith(b">") and len(pc) == 6: types.append(6)
        else: types.append(1)
    pieces[0], pieces[1], pieces[2] = b"<unk>", b"<s>", b"</s>"
    pieces = [pc.replace(b" ", "\u2581".encode()) for pc in pieces]
    tok = {"format": "kiln-tokenizer", "version": 1, "model": "spm",
           "pieces_hex": [pc.hex() for pc in pieces], "scores": scores,
           "types": types, "merges": [], "bos_id": 1, "eos_id": 2, "unk_id": 0,
           "add_bos": True, "add_dummy_prefix": True, "byte_fallback": True}
    json.dump(tok, open(os.path.join(out, "tokenizer.json"), "w"))

    # model.cpp: the llama2.c forward pass over the kernel ABI.
    nmax = max_prefill
    bufs = [("x", nmax * dim), ("xb", nmax * dim), ("xb2", nmax * dim),
            ("q", nmax * dim), ("k", nmax * kv_dim), ("v", nmax * kv_dim),
            ("hb", nmax * hidden), ("hb2", nmax * hidden)]
    arena_off, arena = {}, 0
    for name, count in bufs:
        arena_off[name] = arena
        arena += (count * 4 + ALIGN - 1) // ALIGN * ALIGN
    cls = "wcls" if not shared else "tok_embeddings"
    src = [f'#include "kiln_rt/kernel_abi.h"', "#include <math.h>",
           # Linears and elementwise ops are generated code (kernel_abi.h,
           # "Generated kernels"): hand-written here on the same primitives.
           "struct LinEnv { kiln_linear_weight w; const float *x; float *y; int64_t n, in, out; };",
           "static void linTile(void *p, int64_t b, int64_t e) {",
           "  const LinEnv &l = *(const LinEnv *)p;",
           "  kiln_k_linear_tile(&l.w, l.x, l.n, l.in, b, e, l.y + b, l.out);",
           "}",
           "static void linear(const float *x, const float *w, float *y, int64_t n, int64_t in, int64_t out) {",
           "  LinEnv l = {kiln_linear_weight{}, x, y, n, in, out};",
           "  l.w.kind = KILN_WEIGHT_F32; l.w.data = w;",
           "  kiln_k_parallel_for(out, n == 1 ? 16 : 128, n * in * out, linTile, &l);",
           "}",
           "static void add(const float *a, const float *b, float *y, int64_t c) { for (int64_t i = 0; i < c; ++i) y[i] = a[i] + b[i]; }",
           "static void swiglu(const float *g, const float *u, float *y, int64_t c) { for (int64_t i = 0; i < c; ++i) y[i] = kiln_swiglu(g[i], u[i]); }",
           "static void forward(kiln_exec_ctx *ctx, int64_t n, int64_t pos) {",
           "  const uint8_t *W = ctx->weights;",
           "#define WT(off) ((const float *)(W + (off)))"]
    for name, off in arena_off.items():
        src.append(f"  float *{name} = (float *)(ctx->arena + {off});")
    src.append(f"  kiln_k_embedding(ctx->tokens, n, WT({offsets['tok_embeddings']}), {vocab}, {dim}, x);")
    for l in range(n_layers):
        o = lambda nm: offsets[f"layers.{l}.{nm}"]
        kc = l * 2 * seq_len * kv_dim
        vc = (l * 2 + 1) * seq_len * kv_dim
        src += [
            f"  kiln_k_rms_norm(x, WT({o('rms_att')}), xb, n, {dim}, 1e-5f);",
            f"  linear(xb, WT({o('wq')}), q, n, {dim}, {dim});",
            f"  linear(xb, WT({o('wk')}), k, n, {dim}, {kv_dim});",
            f"  linear(xb, WT({o('wv')}), v, n, {dim}, {kv_dim});",
            f"  kiln_k_rope(q, q, n, {n_heads}, {hd}, {hd}, pos, 10000.0f);",
            f"  kiln_k_rope(k, k, n, {n_kv_heads}, {hd}, {hd}, pos, 10000.0f);",
            f"  kiln_k_attention(q, k, v, ctx->kv + {kc}, ctx->kv + {vc}, xb, n, pos, {n_heads}, {n_kv_heads}, {hd}, {seq_len}, 1.0f / sqrtf({hd}.0f));",
            f"  linear(xb, WT({o('wo')}), xb2, n, {dim}, {dim});",
            f"  add(x, xb2, x, n * {dim});",
            f"  kiln_k_rms_norm(x, WT({o('rms_ffn')}), xb, n, {dim}, 1e-5f);",
            f"  linear(xb, WT({o('w1')}), hb, n, {dim}, {hidden});",
            f"  linear(xb, WT({o('w3')}), hb2, n, {dim}, {hidden});",
            f"  swiglu(hb, hb2, hb, n * {hidden});",
            f"  linear(hb, WT({o('w2')}), xb, n, {hidden}, {dim});",
            f"  add(x, xb, x, n * {dim});"]
    src += [f"  kiln_k_rms_norm(x + (n - 1) * {dim}, WT({offsets['rms_final']}), xb, 1, {dim}, 1e-5f);",
            f"  linear(xb, WT({offsets[cls]}), ctx->logits, 1, {dim}, {vocab});",
            "}",
            'extern "C" void kiln_prefill(kiln_exec_ctx *ctx, int64_t n, int64_t pos) { forward(ctx, n, pos); }',
            'extern "C" void kiln_decode(kiln_exec_ctx *ctx, int64_t n, int64_t pos) { forward(ctx, n, pos); }',
            'extern "C" void kiln_plan_info(kiln_plan_info_t *out) {',
            f'  out->arena_bytes = {arena}; out->max_prefill_tokens = {nmax}; out->vocab_size = {vocab};',
            f'  out->kv_cache_bytes = {n_layers * 2 * seq_len * kv_dim * 4}; out->max_seq = {seq_len};',
            f'  out->prefill_weights_extent = {len(blob)}; out->decode_weights_extent = {len(blob)};',
            '  out->step_max_tokens = 0; out->step_weights_extent = 0; out->tp_size = 1;',
            '}', ""]
    cpp = os.path.join(out, "model.cpp")
    open(cpp, "w").write("\n".join(src))
    inc = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "include")
    subprocess.check_call(["c++", "-O2", "-shared", "-fPIC", "-I", inc, cpp,
                           "-o", os.path.join(out, "model.so")])

    files = {}
    for f in ["model.so", "model.cpp", "weights.bin", "tokenizer.json"]:
        path = os.path.join(out, f)
        files[f] = {"bytes": os.path.getsize(path), "xxh3_64": xxh3(path)}
    manifest = {
        "format": "kiln-artifact", "version": 1, "abi_version": abi_version(inc), "target": "cpu",
        "model": {"name": os.path.basename(model_path).rsplit(".", 1)[0],
                  "architecture": "llama", "source": os.path.abspath(model_path),
                  "source_format": "llama2c", "dim": dim, "hidden_dim": hidden,
                  "n_layers": n_layers, "n_heads": n_heads, "n_kv_heads": n_kv_heads,
                  "head_dim": hd, "vocab_size": vocab, "max_seq_len": seq_len,
                  "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tied_embeddings": shared},
        "recipe": {"dtype": "f32", "quant": "none", "pipeline": "hand-written (runtime test)"},
        "runtime": {"arena_bytes": arena, "max_prefill_tokens": nmax,
                    "entry_points": {"prefill": "kiln_prefill", "decode": "kiln_decode"},
                    "kv_cache": {"layers": n_layers, "kv_heads": n_kv_heads, "head_dim": hd,
                                 "max_seq": seq_len, "dtype": "f32",
                                 "bytes": n_layers * 2 * seq_len * kv_dim * 4}},
        "weights": {"file": "weights.bin", "tensors": tensors},
        "tokenizer": {"file": "tokenizer.json"},
        "files": files,
    }
    json.dump(manifest, open(os.path.join(out, "manifest.json"), "w"), indent=2)

if __name__ == "__main__":
    main()
