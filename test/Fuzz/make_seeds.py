#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets (scripts/fuzz.sh).

usage: make_seeds.py MODELS_DIR SRC_ROOT OUT_DIR [TOKENIZER_SEEDS_DIR]

Seeds are derived at fuzz time from the real models in MODELS_DIR
(../shared/models) and never committed: each checkpoint is shrunk to one
layer, a few hundred vocabulary entries and small dimensions (same tensor
types, metadata and tokenizer kind, weight bytes taken from the real tensors)
so that inputs stay small and executions fast. The IR seeds are the .mlir
files of SRC_ROOT/test split at `// -----`. TOKENIZER_SEEDS_DIR holds the
kiln tokenizer.json texts written by kiln-fuzz-tokenizer
(KILN_FUZZ_WRITE_SEEDS); they seed the tokenizer and artifact targets.
Missing model files are skipped with a note.
"""

import json
import os
import struct
import sys
from pathlib import Path

PART = b"\n#kiln-fuzz-part\n"  # FuzzUtils.h kPartSeparator

# ggml type id -> (elements per block, bytes per block)
GGML = {0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22),
        7: (32, 24), 8: (32, 34), 9: (32, 36), 10: (256, 84), 11: (256, 110),
        12: (256, 144), 13: (256, 176), 14: (256, 210), 15: (256, 292),
        30: (1, 2)}
SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f",
          7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
VOCAB = 300  # keeps SentencePiece's byte pieces <0x00>..<0xFF> (ids 3..258)


def note(msg):
    print("make_seeds: " + msg, file=sys.stderr)


class Reader:
    def __init__(self, data):
        self.data, self.pos = data, 0

    def take(self, fmt):
        v = struct.unpack_from(fmt, self.data, self.pos)[0]
        self.pos += struct.calcsize(fmt)
        return v

    def string(self):
        n = self.take("<Q")
        s = self.data[self.pos:self.pos + n]
        self.pos += n
        return s.decode("utf-8", "surrogateescape")

    def value(self, t):
        if t == 8:
            return self.string()
        if t == 9:
            et, n = self.take("<I"), self.take("<Q")
            return (et, [self.value(et) for _ in range(n)])
        return self.take(SCALAR[t])


def read_gguf(path):
    data = Path(path).read_bytes()
    r = Reader(data)
    assert r.take("<I") == 0x46554747, "not GGUF"
    version, nt, nkv = r.take("<I"), r.take("<Q"), r.take("<Q")
    kv = []
    for _ in range(nkv):
        k = r.string()
        t = r.take("<I")
        kv.append([k, t, r.value(t)])
    tensors = []
    for _ in range(nt):
        name = r.string()
        nd = r.take("<I")
        dims = [r.take("<Q") for _ in range(nd)]
        tensors.append([name, dims, r.take("<I"), r.take("<Q")])
    align = next((v for k, t, v in kv if k == "general.alignment"), 32)
    base = (r.pos + align - 1) // align * align
    return version, kv, tensors, data, base, align


def put_value(out, t, v):
    if t == 8:
        b = v.encode("utf-8", "surrogateescape")
        out += struct.pack("<Q", len(b)) + b
    elif t == 9:
        et, items = v
        out += struct.pack("<IQ", et, len(items))
        for x in items:
            put_value(out, et, x)
    else:
        out += struct.pack(SCALAR[t], v)


def tensor_bytes(dims, t):
    n = 1
    for d in dims:
        n *= d
    per, size = GGML[t]
    return n // per * size


def filler(src, n):
    """n bytes: the start of the real tensor, repeated if it is shorter."""
    if not src:
        return bytes(n)
    return (src * (n // len(src) + 1))[:n]


def kept_merges(merges, pieces):
    keep = set(pieces)
    out = []
    for m in merges:
        a, _, b = m.partition(" ")
        if a in keep and b in keep and a + b in keep:
            out.append(m)
    return out


def shrink_gguf(src, dst):
    version, kv, tensors, data, base, align = read_gguf(src)
    meta = {k: v for k, t, v in kv}
    arch = meta.get("general.architecture", "llama")
    block = max(GGML[t][0] for _, _, t, _ in tensors)
    d = max(block, 16)
    heads, kv_heads, hd, ff = 2, 1, d // 2, d
    sizes = {"embedding_length": d, "feed_forward_length": ff,
             "block_count": 1, "attention.head_count": heads,
             "attention.head_count_kv": kv_heads, "context_length": 64,
             "rope.dimension_count": hd, "attention.key_length": hd,
             "attention.value_length": hd, "vocab_size": VOCAB}
    tokens = meta.get("tokenizer.ggml.tokens", (8, []))[1][:VOCAB]
    vocab = len(tokens) if tokens else VOCAB
    for entry in kv:
        k, t, v = entry
        if k.startswith(arch + ".") and k[len(arch) + 1:] in sizes:
            entry[2] = sizes[k[len(arch) + 1:]] if k[len(arch) + 1:] != "vocab_size" else vocab
        elif t == 9 and k in ("tokenizer.ggml.tokens", "tokenizer.ggml.scores",
                              "tokenizer.ggml.token_type"):
            entry[2] = (v[0], v[1][:vocab])
        elif k == "tokenizer.ggml.merges":
            entry[2] = (v[0], kept_merges(v[1], tokens))
        elif k.startswith("tokenizer.ggml.") and k.endswith("_token_id"):
            entry[2] = v if v < vocab else 0
    shapes = {"token_embd.weight": [d, vocab], "output.weight": [d, vocab],
              "output_norm.weight": [d], "attn_norm.weight": [d],
              "attn_q.weight": [d, d], "attn_k.weight": [d, kv_heads * hd],
              "attn_v.weight": [d, kv_heads * hd], "attn_output.weight": [d, d],
              "ffn_gate.weight": [d, ff], "ffn_up.weight": [d, ff],
              "ffn_down.weight": [ff, d], "ffn_norm.weight": [d],
              "rope_freqs.weight": [hd // 2]}
    out_tensors, blobs, offset = [], [], 0
    for name, dims, t, off in tensors:
        short = name
        if name.startswith("blk."):
            layer, _, short = name[4:].partition(".")
            if layer != "0":
                continue
        if short not in shapes:
            continue
        new = shapes[short]
        if new[0] % GGML[t][0]:
            continue
        n = tensor_bytes(new, t)
        src = data[base + off:base + off + min(n, tensor_bytes(dims, t))]
        out_tensors.append((name, new, t, offset))
        blobs.append(filler(src, n))
        offset += (n + align - 1) // align * align
    out = bytearray(struct.pack("<IIQQ", 0x46554747, version, len(out_tensors),
                                len(kv)))
    for k, t, v in kv:
        put_value(out, 8, k)
        out += struct.pack("<I", t)
        put_value(out, t, v)
    for name, dims, t, off in out_tensors:
        put_value(out, 8, name)
        out += struct.pack("<I", len(dims))
        out += b"".join(struct.pack("<Q", x) for x in dims)
        out += struct.pack("<IQ", t, off)
    out += bytes((-len(out)) % align)
    for blob in blobs:
        out += blob + bytes((-len(blob)) % align)
    Path(dst).write_bytes(out)


def shrink_llama2c(model, tok, out_dir):
    raw = Path(model).read_bytes()
    d, ff, layers, heads, kvh, seq = 16, 16, 1, 2, 1, 64
    hd = d // heads
    tok_bytes = Path(tok).read_bytes()
    r = Reader(tok_bytes)
    max_len = r.take("<i")
    entries = []
    for _ in range(VOCAB):
        score, n = r.take("<f"), r.take("<i")
        entries.append(struct.pack("<fi", score, n) + tok_bytes[r.pos:r.pos + n])
        r.pos += n
    small_tok = struct.pack("<i", max_len) + b"".join(entries)
    for shared in (True, False):
        counts = [VOCAB * d, layers * d, layers * d * d, layers * d * kvh * hd,
                  layers * d * kvh * hd, layers * d * d, layers * d,
                  layers * ff * d, layers * d * ff, layers * ff * d, d,
                  seq * hd // 2, seq * hd // 2]
        if not shared:
            counts.append(VOCAB * d)
        header = struct.pack("<7i", d, ff, layers, heads, kvh,
                             VOCAB if shared else -VOCAB, seq)
        body = filler(raw[28:], 4 * sum(counts))
        name = "stories260k-tiny" + ("" if shared else "-unshared")
        (out_dir / "llama2c" / name).write_bytes(header + body + PART + small_tok)
    (out_dir / "llama2c" / "stories260k-no-tokenizer").write_bytes(
        struct.pack("<7i", d, ff, layers, heads, kvh, VOCAB, seq) +
        filler(raw[28:], 4 * 1024))
    return small_tok


def shrink_tokenizer_json(text, vocab_limit):
    doc = json.loads(text)
    model = doc.get("model", {})
    vocab = {k: v for k, v in model.get("vocab", {}).items() if v < vocab_limit}
    model["vocab"] = vocab
    merges = model.get("merges", [])
    keep = set(vocab)
    small = []
    for m in merges:
        a, b = (m.split(" ", 1) if isinstance(m, str) else m) + [""] * 0
        if a in keep and b in keep and a + b in keep:
            small.append(m)
    model["merges"] = small
    doc["added_tokens"] = [t for t in doc.get("added_tokens", [])
                           if t.get("id", 0) < vocab_limit]
    return json.dumps(doc, ensure_ascii=False).encode()


def safetensors(tensors):
    """(header JSON bytes, data bytes) for [(name, dtype, shape, bytes)]."""
    header, data = {}, bytearray()
    for name, dtype, shape, blob in tensors:
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [len(data), len(data) + len(blob)]}
        data += blob
    return json.dumps(header).encode(), bytes(data)


def shrink_hf(hf_dir, out_dir):
    cfg = json.loads((hf_dir / "config.json").read_text())
    raw = (hf_dir / "model.safetensors").read_bytes()
    n = struct.unpack_from("<Q", raw)[0]
    hdr = json.loads(raw[8:8 + n])
    dtype = next(v["dtype"] for k, v in hdr.items() if k != "__metadata__")
    esize = {"F32": 4, "F16": 2, "BF16": 2}[dtype]
    d, ff, heads, kvh = 32, 32, 2, 1
    hd = d // heads
    cfg.update(hidden_size=d, intermediate_size=ff, num_hidden_layers=1,
               num_attention_heads=heads, num_key_value_heads=kvh,
               vocab_size=VOCAB, max_position_embeddings=64)
    shapes = {"model.embed_tokens.weight": [VOCAB, d], "model.norm.weight": [d],
              "lm_head.weight": [VOCAB, d]}
    for w, s in (("input_layernorm", [d]), ("post_attention_layernorm", [d]),
                 ("self_attn.q_proj", [d, d]), ("self_attn.k_proj", [kvh * hd, d]),
                 ("self_attn.v_proj", [kvh * hd, d]), ("self_attn.o_proj", [d, d]),
                 ("mlp.gate_proj", [ff, d]), ("mlp.up_proj", [ff, d]),
                 ("mlp.down_proj", [d, ff])):
        shapes["model.layers.0.%s.weight" % w] = s
    tensors = []
    for name, shape in shapes.items():
        if name not in hdr:
            continue
        a, b = hdr[name]["data_offsets"]
        count = 1
        for x in shape:
            count *= x
        tensors.append((name, dtype, shape,
                        filler(raw[8 + n + a:8 + n + b], count * esize)))
    h, data = safetensors(tensors)
    tok = shrink_tokenizer_json((hf_dir / "tokenizer.json").read_bytes(), VOCAB)
    tcfg = (hf_dir / "tokenizer_config.json").read_bytes()
    c = json.dumps(cfg).encode()
    index = json.dumps({"metadata": {"total_size": len(data)}, "weight_map": {
        t[0]: "model-00001-of-00001.safetensors" for t in tensors}}).encode()
    hf = out_dir / "hf"
    (hf / "tiny").write_bytes(PART.join([c, h, data, b"", tok, b""]))
    (hf / "tiny-index").write_bytes(PART.join([c, h, data, index, tok, tcfg]))
    (hf / "tiny-raw").write_bytes(PART.join(
        [c, struct.pack("<Q", len(h)) + h, data, b"", tok, b""]))
    (hf / "real-config-header-only").write_bytes(PART.join(
        [(hf_dir / "config.json").read_bytes(), raw[8:8 + n], b"", b"", tok]))
    tj = out_dir / "tokjson"
    (tj / "tinystories656k").write_bytes((hf_dir / "tokenizer.json").read_bytes())
    (tj / "tinystories656k-tiny").write_bytes(tok + PART + tcfg)


def calibration(out_dir):
    import random
    rnd = random.Random(9)
    c = 16
    tensors, meta = [], {"format": "kiln-calibration", "version": "1",
                         "model": "stories260k-tiny"}

    def floats(k, lo=0.0, hi=2.0):
        return struct.pack("<%df" % k, *[rnd.uniform(lo, hi) for _ in range(k)])
    for tap, weights in (("layers.0.attention_in", ["wq", "wk", "wv"]),
                         ("layers.0.ffn_in", ["w1", "w3"])):
        for w in weights:
            meta["input:layers.0." + w] = tap
        tensors += [(tap + ".absmax", "F32", [c], floats(c)),
                    (tap + ".absmean", "F32", [c], floats(c)),
                    (tap + ".hessian", "F32", [c, c], floats(c * c, -1, 1))]
    tensors.append(("layers.0.key.mean", "F32", [c], floats(c, -1, 1)))
    h, data = safetensors(tensors)
    hdr = json.loads(h)
    hdr["__metadata__"] = meta
    h = json.dumps(hdr).encode()
    (out_dir / "calibration" / "tiny").write_bytes(
        struct.pack("<Q", len(h)) + h + data)


def artifact(out_dir, tok_seeds):
    for src in sorted(tok_seeds.glob("*.json")) if tok_seeds else []:
        tok = src.read_bytes()[1:]  # drop the 'J' mode byte
        if len(tok) > 200_000:
            continue
        vocab = len(json.loads(tok).get("pieces_hex", [])) or VOCAB
        for kv, elem in (("f32", 4), ("int8", 1)):
            layers, heads, hdim, seq = 2, 2, 8, 64
            kv_bytes = layers * 2 * seq * heads * (hdim * elem + (4 if elem == 1 else 0))
            weights = 4096
            m = {"format": "kiln-artifact", "version": 1, "target": "cpu",
                 "abi_version": 0, "recipe": {"dtype": "f32", "quant": "none"},
                 "model": {"name": src.stem, "vocab_size": vocab,
                           "max_seq_len": seq},
                 "runtime": {"arena_bytes": 65536, "max_prefill_tokens": 16,
                             "entry_points": {"prefill": "kiln_prefill",
                                              "decode": "kiln_decode"},
                             "kv_cache": {"layers": layers, "kv_heads": heads,
                                          "head_dim": hdim, "max_seq": seq,
                                          "dtype": kv, "bytes": kv_bytes}},
                 "files": {"model.so": {"bytes": 1024, "xxh3_64": "0" * 16},
                           "weights.bin": {"bytes": weights, "xxh3_64": "0" * 16},
                           "tokenizer.json": {"bytes": len(tok), "xxh3_64": "0" * 16}},
                 "weights": {"file": "weights.bin", "tensors": [
                     {"name": "tok_embeddings", "offset": 0, "bytes": 2048,
                      "dtype": "f32", "shape": [64, 8]},
                     {"name": "norm", "offset": 2048, "bytes": 32,
                      "dtype": "f32", "shape": [8]}]},
                 "tokenizer": {"file": "tokenizer.json"}}
            (out_dir / "artifact" / ("%s-%s" % (src.stem, kv))).write_bytes(
                json.dumps(m, indent=1).encode() + PART + tok)


def main():
    models, src_root, out = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    tok_seeds = Path(sys.argv[4]) if len(sys.argv) > 4 else None
    for t in ("gguf", "hf", "llama2c", "tokbin", "tokjson", "tokenizer",
              "calibration", "artifact", "ir"):
        (out / t).mkdir(parents=True, exist_ok=True)

    ggufs = {"stories260k": models / "stories260K/stories260K.gguf",
             "tinystories656k-q8_0": models / "tinystories-656k/gguf/TinyStories-656K-Q8_0.gguf",
             "smollm2-q4_1": models / "smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf",
             "kquant-mix": models / "kquant-fixtures/tiny-kq-mix.gguf",
             "kquant-q4_k_m": models / "kquant-fixtures/tiny-kq-q4_k_m.gguf"}
    for name, path in ggufs.items():
        if not path.exists():
            note("%s missing, skipped" % path)
            continue
        shrink_gguf(path, out / "gguf" / name)
    # The committed byte-level BPE fixtures (tokenizer-only GGUFs and
    # Hugging Face tokenizer.json, test/Inputs/bytelevel).
    bytelevel = src_root / "test/Inputs/bytelevel"
    for name in ("llama3", "qwen2", "gpt2", "smollm"):
        if (bytelevel / (name + ".gguf")).exists():
            (out / "gguf" / ("bytelevel-" + name)).write_bytes(
                (bytelevel / (name + ".gguf")).read_bytes())
            (out / "tokjson" / ("bytelevel-" + name)).write_bytes(
                (bytelevel / name / "tokenizer.json").read_bytes())

    s260 = models / "stories260K"
    if (s260 / "stories260K.bin").exists() and (s260 / "tok512.bin").exists():
        small_tok = shrink_llama2c(s260 / "stories260K.bin", s260 / "tok512.bin", out)
        (out / "tokbin" / "tok512").write_bytes((s260 / "tok512.bin").read_bytes())
        (out / "tokbin" / "tok512-tiny").write_bytes(small_tok)
    else:
        note("stories260K llama2.c files missing, skipped")
    llama_tok = models / "llama2-tokenizer/tokenizer.bin"
    if llama_tok.exists():
        raw = llama_tok.read_bytes()
        r = Reader(raw)
        r.take("<i")
        for _ in range(1500):
            r.take("<f")
            n = r.take("<i")
            r.pos += n
        (out / "tokbin" / "llama2-first1500").write_bytes(raw[:r.pos])

    hf = models / "tinystories-656k/hf"
    if (hf / "config.json").exists():
        shrink_hf(hf, out)
    else:
        note("%s missing, skipped" % hf)

    calibration(out)

    texts = [b"Once upon a time, there was a little girl named Lily.",
             b"Hello world! 123 <s> </s> <unk>",
             "caf\u00e9 na\u00efve \u2581\u2581 \U0001f642 \u4f60\u597d".encode(),
             b"\xff\xfe\x00\x80 invalid utf-8 \xc3",
             b"<|im_start|>user\nHi<|im_end|>\n", b""]
    for i in range(5):
        for j, text in enumerate(texts):
            (out / "tokenizer" / ("t%d-%d" % (i, j))).write_bytes(
                bytes([i | (0x80 if j % 2 else 0)]) + text)
    if tok_seeds:
        for src in sorted(tok_seeds.glob("*.json")):
            if src.stat().st_size <= 200_000:
                (out / "tokenizer" / ("json-" + src.stem)).write_bytes(src.read_bytes())
    artifact(out, tok_seeds)

    for path in sorted(src_root.glob("test/**/*.mlir")):
        text = path.read_bytes()
        for i, chunk in enumerate(text.split(b"// -----")):
            if chunk.strip() and len(chunk) <= 65536:
                rel = str(path.relative_to(src_root / "test")).replace("/", "_")
                (out / "ir" / ("%s-%d" % (rel, i))).write_bytes(chunk)


if __name__ == "__main__":
    main()
