#!/usr/bin/env python3
"""Write corrupted variants of the real checkpoints for importer error tests.

usage: make_bad_inputs.py OUTDIR [--shared DIR]

Every fixture is derived from a real file in shared/models (never modified in
place) and names the one thing that is wrong with it.  llama2.c fixtures get a
good copy of tok512.bin beside them (the importer looks for tok*.bin next to
the checkpoint) so that only the checkpoint is bad; the bad-tokenizer case is
a directory of its own.  Hugging Face fixtures are whole directories.

Prints one line per generated path (relative to OUTDIR) with what is wrong.
"""

import argparse
import json
import os
import shutil
import struct
import sys


def find_shared(arg):
    here = os.path.dirname(os.path.abspath(__file__))
    for cand in (arg, os.environ.get("KILN_SHARED"), os.path.join(here, "..", "..", "..", "shared"),
                 "/work/shared"):
        if cand and os.path.isdir(os.path.join(cand, "models")):
            return os.path.abspath(cand)
    sys.exit("make_bad_inputs: cannot find the shared folder (pass --shared)")


# ----------------------------------------------------------------------------
# GGUF layout walker: byte offsets of every field we want to corrupt
# ----------------------------------------------------------------------------

_SCALAR_SIZE = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def gguf_layout(raw):
    """Returns dict with header fields, kv entries and tensor-info entries,
    each with the byte offsets of their parts."""
    pos = 0

    def u32():
        nonlocal pos
        v = struct.unpack_from("<I", raw, pos)[0]
        pos += 4
        return v

    def u64():
        nonlocal pos
        v = struct.unpack_from("<Q", raw, pos)[0]
        pos += 8
        return v

    def string():
        nonlocal pos
        n = u64()
        s = raw[pos:pos + n]
        start = pos
        pos += n
        return s.decode("utf-8"), start

    def skip_value(t):
        nonlocal pos
        if t in _SCALAR_SIZE:
            pos += _SCALAR_SIZE[t]
        elif t == 8:
            string()
        elif t == 9:
            et = u32()
            n = u64()
            for _ in range(n):
                skip_value(et)
        else:
            raise ValueError("bad gguf value type %d" % t)

    assert raw[:4] == b"GGUF"
    pos = 4
    version = u32()
    n_tensors = u64()
    n_kv = u64()
    kvs = {}
    for _ in range(n_kv):
        kstart = pos
        key, _ = string()
        t = u32()
        vstart = pos
        skip_value(t)
        kvs[key] = dict(start=kstart, type=t, value_start=vstart, end=pos)
    kv_end = pos
    tensors = {}
    order = []
    for _ in range(n_tensors):
        istart = pos
        name, name_start = string()
        nd = u32()
        dims_start = pos
        dims = [u64() for _ in range(nd)]
        type_pos = pos
        ttype = u32()
        off_pos = pos
        off = u64()
        tensors[name] = dict(start=istart, name_start=name_start, dims=dims, dims_start=dims_start,
                             type=ttype, type_pos=type_pos, offset=off, offset_pos=off_pos)
        order.append(name)
    info_end = pos
    return dict(version=version, kv=kvs, kv_end=kv_end, tensors=tensors, order=order,
                info_end=info_end)


# ----------------------------------------------------------------------------
# safetensors helpers
# ----------------------------------------------------------------------------

def st_read(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    hdr = json.loads(raw[8:8 + n])
    return hdr, raw[8 + n:]


def st_write(path, hdr, data):
    js = json.dumps(hdr, separators=(",", ":")).encode()
    js += b" " * (-len(js) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(js)) + js + data)


def st_rebuild(hdr, data, edit):
    """edit(name, info, bytes) -> None (drop) or (info, bytes). Re-packs data
    contiguously so the result is a well-formed file apart from the edit."""
    meta = hdr.get("__metadata__")
    out_hdr, blobs, off = {}, [], 0
    if meta is not None:
        out_hdr["__metadata__"] = meta
    for name, info in sorted(((k, v) for k, v in hdr.items() if k != "__metadata__"),
                             key=lambda kv: kv[1]["data_offsets"][0]):
        b, e = info["data_offsets"]
        r = edit(name, dict(info), data[b:e])
        if r is None:
            continue
        info, blob = r
        info["data_offsets"] = [off, off + len(blob)]
        off += len(blob)
        out_hdr[name] = info
        blobs.append(blob)
    return out_hdr, b"".join(blobs)


# ----------------------------------------------------------------------------
# fixtures
# ----------------------------------------------------------------------------

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("outdir")
    ap.add_argument("--shared", default=None)
    a = ap.parse_args(argv)
    shared = find_shared(a.shared)
    M = os.path.join(shared, "models")
    out = a.outdir
    os.makedirs(out, exist_ok=True)
    made = []

    def put(name, data, why):
        p = os.path.join(out, name)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb") as f:
            f.write(data)
        made.append((name, why))

    # ---- llama2.c ----------------------------------------------------------
    s2 = os.path.join(M, "stories260K")
    binraw = open(os.path.join(s2, "stories260K.bin"), "rb").read()
    tokraw = open(os.path.join(s2, "tok512.bin"), "rb").read()
    hdr = list(struct.unpack("<7i", binraw[:28]))
    body = binraw[28:]

    def with_header(**kw):
        h = list(hdr)
        names = ["dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "seq_len"]
        for k, v in kw.items():
            h[names.index(k)] = v
        return struct.pack("<7i", *h) + body

    # a good tokenizer beside the bad checkpoints
    with open(os.path.join(out, "tok512.bin"), "wb") as f:
        f.write(tokraw)
    half = len(binraw) // 2 // 4 * 4
    put("llama2c-truncated-half.bin", binraw[:half],
        "first half of stories260K.bin (%d of %d bytes)" % (half, len(binraw)))
    put("llama2c-header-only.bin", binraw[:28], "only the 28-byte header")
    put("llama2c-short-header.bin", binraw[:20], "20 bytes: header itself truncated")
    put("llama2c-dim-zero.bin", with_header(dim=0), "header dim = 0")
    put("llama2c-negative-layers.bin", with_header(n_layers=-5), "header n_layers = -5")
    put("llama2c-heads-not-dividing-dim.bin", with_header(n_heads=7),
        "header n_heads = 7 does not divide dim = 64")
    put("llama2c-kv-heads-not-dividing-heads.bin", with_header(n_kv_heads=3),
        "header n_kv_heads = 3 does not divide n_heads = 8")
    put("llama2c-size-minus-4.bin", binraw[:-4], "file 4 bytes shorter than the header implies")
    put("llama2c-size-plus-4.bin", binraw + b"\0\0\0\0", "file 4 bytes longer than the header implies")
    put("llama2c-vocab-int-min.bin", with_header(vocab_size=-2**31), "header vocab_size = INT32_MIN")
    put("llama2c-huge-hidden-dim.bin", with_header(hidden_dim=2**31 - 1), "header hidden_dim = 2^31 - 1")
    put("llama2c-no-tokenizer/stories260K.bin", binraw, "good checkpoint, no tok*.bin beside it")
    put("llama2c-truncated-tokenizer/stories260K.bin", binraw, "good checkpoint (bad tokenizer beside it)")
    put("llama2c-truncated-tokenizer/tok512.bin", tokraw[:len(tokraw) // 2],
        "tok512.bin cut to %d of %d bytes" % (len(tokraw) // 2, len(tokraw)))

    # ---- GGUF (stories260K.gguf, F32) --------------------------------------
    g = open(os.path.join(s2, "stories260K.gguf"), "rb").read()
    L = gguf_layout(g)

    def patch(raw, pos, new):
        return raw[:pos] + new + raw[pos + len(new):]

    put("gguf-bad-magic.gguf", patch(g, 0, b"GGUX"), "magic 'GGUX' instead of 'GGUF'")
    put("gguf-version-4.gguf", patch(g, 4, struct.pack("<I", 4)), "GGUF version 4")
    put("gguf-version-1.gguf", patch(g, 4, struct.pack("<I", 1)), "GGUF version 1")
    tk = L["kv"]["tokenizer.ggml.tokens"]
    cut = (tk["value_start"] + tk["end"]) // 2
    put("gguf-truncated-kv.gguf", g[:cut],
        "cut at byte %d, inside the tokenizer.ggml.tokens array (KV section ends at %d)"
        % (cut, L["kv_end"]))
    cut = L["info_end"] - 20
    put("gguf-truncated-tensor-info.gguf", g[:cut], "cut at byte %d, inside the tensor infos" % cut)
    align = 32
    data_start = (L["info_end"] + align - 1) // align * align
    cut = (data_start + len(g)) // 2
    put("gguf-truncated-data.gguf", g[:cut],
        "cut at byte %d, inside tensor data (data starts at %d, file is %d)" % (cut, data_start, len(g)))
    # tensor offset past EOF: the last tensor in the file
    last = max(L["tensors"], key=lambda n: L["tensors"][n]["offset"])
    t = L["tensors"][last]
    bad_off = (len(g) - data_start + 4096) // 32 * 32
    put("gguf-offset-past-eof.gguf", patch(g, t["offset_pos"], struct.pack("<Q", bad_off)),
        "tensor %s offset %d (+data start %d) past EOF %d" % (last, bad_off, data_start, len(g)))
    t = L["tensors"]["blk.3.ffn_up.weight"]
    name_pos = t["name_start"] + len("blk.3.ffn_u")
    assert g[name_pos:name_pos + 1] == b"p"
    put("gguf-missing-tensor.gguf", patch(g, name_pos, b"q"),
        "tensor blk.3.ffn_up.weight renamed blk.3.ffn_uq.weight")
    t = L["tensors"]["blk.0.attn_q.weight"]
    assert t["dims"] == [64, 64], t["dims"]
    put("gguf-wrong-shape.gguf", patch(g, t["dims_start"] + 8, struct.pack("<Q", 32)),
        "blk.0.attn_q.weight dims [64, 32] instead of [64, 64]")
    t = L["tensors"]["blk.1.attn_v.weight"]
    assert t["type"] == 0
    put("gguf-unsupported-dtype.gguf", patch(g, t["type_pos"], struct.pack("<I", 2)),
        "blk.1.attn_v.weight type 2 (Q4_0)")
    a_kv = L["kv"]["general.architecture"]
    vpos = a_kv["value_start"] + 8
    assert g[vpos:vpos + 5] == b"llama"
    put("gguf-wrong-architecture.gguf", patch(g, vpos, b"mamba"),
        "general.architecture = 'mamba'")
    k = L["kv"]["llama.attention.head_count"]
    assert k["type"] == 4
    put("gguf-head-count-zero.gguf", patch(g, k["value_start"], struct.pack("<I", 0)),
        "llama.attention.head_count = 0")
    # a required key missing: rename llama.block_count -> llama.block_cnt? (lengths differ) use a byte
    k = L["kv"]["llama.block_count"]
    kp = k["start"] + 8 + len("llama.block_")
    put("gguf-missing-key.gguf", patch(g, kp, b"k"), "key llama.block_count renamed llama.block_kount")

    # tensor data layout: offsets must be aligned, spans packed without overlap
    t = L["tensors"]["token_embd.weight"]
    assert t["offset"] == 0
    put("gguf-misaligned-offset.gguf", patch(g, t["offset_pos"], struct.pack("<Q", 3)),
        "token_embd.weight data offset 3 (alignment 32)")
    t = L["tensors"]["output_norm.weight"]
    assert t["offset"] == 131072
    put("gguf-overlapping-tensors.gguf", patch(g, t["offset_pos"], struct.pack("<Q", 32)),
        "output_norm.weight data offset 32, inside token_embd.weight [0, 131072)")
    t = L["tensors"]["blk.0.attn_q.weight"]
    put("gguf-f32-as-f16.gguf", patch(g, t["type_pos"], struct.pack("<I", 1)),
        "blk.0.attn_q.weight type F32 relabelled F16 (span halves, leaving a hole)")
    put("gguf-f32-as-bf16.gguf", patch(g, t["type_pos"], struct.pack("<I", 30)),
        "blk.0.attn_q.weight type F32 relabelled BF16 (span halves, leaving a hole)")
    # general.alignment = 48: rename llama.block_count (same length) in place
    k = L["kv"]["llama.block_count"]
    assert len("llama.block_count") == len("general.alignment") and k["type"] == 4
    ga = patch(g, k["start"] + 8, b"general.alignment")
    put("gguf-alignment-48.gguf", patch(ga, k["value_start"], struct.pack("<I", 48)),
        "general.alignment = 48 (not a power of two)")
    put("gguf-alignment-0.gguf", patch(ga, k["value_start"], struct.pack("<I", 0)),
        "general.alignment = 0")
    k = L["kv"]["tokenizer.ggml.tokens"]
    kp = k["start"] + 8 + len("tokenizer.ggml.token")
    put("gguf-no-tokenizer.gguf", patch(g, kp, b"z"),
        "key tokenizer.ggml.tokens renamed tokenizer.ggml.tokenz (no vocabulary)")

    # ---- GGUF Q8_0 (tinystories-656k) --------------------------------------
    q = open(os.path.join(M, "tinystories-656k", "gguf", "TinyStories-656K-Q8_0.gguf"), "rb").read()
    LQ = gguf_layout(q)
    qds = (LQ["info_end"] + 31) // 32 * 32
    cut = (qds + len(q)) // 2
    put("gguf-q8-truncated-data.gguf", q[:cut], "Q8_0 file cut at byte %d, inside tensor data" % cut)

    # ---- Hugging Face ------------------------------------------------------
    hf = os.path.join(M, "tinystories-656k", "hf")
    sthdr, stdata = st_read(os.path.join(hf, "model.safetensors"))
    cfg = json.load(open(os.path.join(hf, "config.json")))

    def hf_dir(name, why, config=None, st=None, drop=()):
        d = os.path.join(out, name)
        if os.path.exists(d):
            shutil.rmtree(d)
        os.makedirs(d)
        for f in os.listdir(hf):
            if f not in ("config.json", "model.safetensors") + tuple(drop):
                shutil.copyfile(os.path.join(hf, f), os.path.join(d, f))
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(config if config is not None else cfg, f, indent=2)
        if st is None:
            shutil.copyfile(os.path.join(hf, "model.safetensors"), os.path.join(d, "model.safetensors"))
        elif isinstance(st, bytes):
            with open(os.path.join(d, "model.safetensors"), "wb") as f:
                f.write(st)
        else:
            st_write(os.path.join(d, "model.safetensors"), *st)
        made.append((name + "/", why))

    c = dict(cfg)
    c["architectures"] = ["GPT2LMHeadModel"]
    c["model_type"] = "gpt2"
    hf_dir("hf-wrong-architecture", "config.json architectures = [GPT2LMHeadModel], model_type gpt2", config=c)

    hf_dir("hf-missing-tensor", "model.layers.1.mlp.up_proj.weight absent from model.safetensors",
           st=st_rebuild(sthdr, stdata,
                         lambda n, i, b: None if n == "model.layers.1.mlp.up_proj.weight" else (i, b)))

    h2 = json.loads(json.dumps(sthdr))
    e = h2["model.norm.weight"]["data_offsets"]
    h2["model.norm.weight"]["data_offsets"] = [len(stdata) + 512, len(stdata) + 1024]
    assert e[1] == len(stdata)
    hf_dir("hf-offset-past-end", "model.norm.weight data_offsets [%d, %d] past the data size %d"
           % (len(stdata) + 512, len(stdata) + 1024, len(stdata)), st=(h2, stdata))

    raw = open(os.path.join(hf, "model.safetensors"), "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    assert raw[8:9] == b"{"
    js = raw[8:8 + n]
    p = js.index(b'"lm_head.weight"')
    bad = raw[:8] + js[:p] + b"#" + js[p + 1:] + raw[8 + n:]  # same length, invalid JSON
    hf_dir("hf-bad-json-header", "safetensors JSON header has '#' at byte %d" % (8 + p), st=bad)

    hf_dir("hf-header-length-past-end", "safetensors header length field = 2**40",
           st=struct.pack("<Q", 1 << 40) + raw[8:])

    def to_i8(n_, i, b):
        if n_ == "model.norm.weight":
            i["dtype"] = "I8"
            return i, bytes(len(b) // 4)
        return i, b
    hf_dir("hf-dtype-i8", "model.norm.weight stored as dtype I8 (well-formed, unsupported)",
           st=st_rebuild(sthdr, stdata, to_i8))

    def bad_shape(n_, i, b):
        if n_ == "model.layers.0.self_attn.k_proj.weight":
            i["shape"] = [32, 128]
            return i, b[:len(b) // 2]
        return i, b
    hf_dir("hf-wrong-shape", "model.layers.0.self_attn.k_proj.weight shape [32, 128] instead of [64, 128]",
           st=st_rebuild(sthdr, stdata, bad_shape))

    c = dict(cfg)
    del c["hidden_size"]
    hf_dir("hf-config-missing-field", "config.json without hidden_size", config=c)

    hf_dir("hf-no-tokenizer", "no tokenizer.json or tokenizer.model", drop=("tokenizer.json",
                                                                          "tokenizer.model"))

    # data_offsets that keep each tensor's length but break the layout
    first = min((k for k in sthdr if k != "__metadata__"), key=lambda k: sthdr[k]["data_offsets"][0])
    b, e = sthdr[first]["data_offsets"]
    assert b == 0
    h2 = json.loads(json.dumps(sthdr))
    h2[first]["data_offsets"] = [1, e + 1]
    hf_dir("hf-offsets-shifted", "%s data_offsets [1, %d] (byte 0 unindexed)" % (first, e + 1),
           st=(h2, stdata))
    second = min((k for k in sthdr if k != "__metadata__" and k != first),
                 key=lambda k: sthdr[k]["data_offsets"][0])
    b, e = sthdr[second]["data_offsets"]
    h2 = json.loads(json.dumps(sthdr))
    h2[second]["data_offsets"] = [b - 4, e - 4]
    hf_dir("hf-offsets-overlap", "%s data_offsets [%d, %d] overlap %s" % (second, b - 4, e - 4, first),
           st=(h2, stdata))
    hf_dir("hf-trailing-data", "8 bytes after the last tensor's data", st=(sthdr, stdata + bytes(8)))

    # not checkpoints: passed where a model is expected
    put("notes.txt", b"Once upon a time there was a little model.\n", "a text file")

    for name, why in made:
        print("%-48s %s" % (name, why))
    return 0


if __name__ == "__main__":
    sys.exit(main())
