#!/usr/bin/env python3
"""Write real-format pre-quantized checkpoints of the shared models (numpy).

usage: make_prequant.py OUTDIR [--shared DIR] [--bad]

Quantizes the real models with plain round-to-nearest (RTN), each format in
its own conventions, and writes them as the quantization libraries do
(written from the formats' specs, sharing no code with Kiln):

  gptq/        TinyStories-656K HF -> GPTQ (AutoGPTQ QuantLinear,
               checkpoint_format "gptq" = v1: zeros stored minus 1), 4 bits,
               group 32, asymmetric (sym false), desc_act false, trivial g_idx
  gptq-v2/     GPTQ checkpoint_format "gptq_v2", one group per row
               (group_size -1), symmetric (zero point 8)
  gptq-actorder/  like gptq/ with desc_act true and a permuted g_idx (the
               group of input column i is perm[i] // 32): not representable
               with contiguous groups
  gptq-actorder-trivial/  desc_act true but the trivial g_idx (exact)
  awq/         AutoAWQ GEMM (version "gemm", zero_point true), 4 bits,
               group 32: qweight [in, out/8] and qzeros packed along out in
               the order [0, 2, 4, 6, 1, 3, 5, 7]
  stories260K-Q4_0.gguf  stories260K GGUF (F32) with every 2-D tensor whose
               rows are a multiple of 32 long (all but ffn_down, 172 wide)
               converted to Q4_0 (ggml quantize_row_q4_0_ref); GGUF v3

HF directories get config.json (+ quantization_config) and model.safetensors
written here and the tokenizer files symlinked from the shared model.

With --bad, also writes malformed variants (bad-*/, bad-*.gguf) for error
tests; each prints one line saying what is wrong.

Quantizers (per output row o and group g of input columns, torch.round =
numpy round half to even, scales stored f16 and the integers computed with
the stored f16 scale, as the packers do):
  GPTQ asym: lo = min(w, 0), hi = max(w, 0) (both 0: -1, 1),
             s = (hi - lo) / 15, z = round(-lo / s), q = clamp(round(w/s) + z, 0, 15)
  GPTQ sym:  m = max|w| (0: 1), s = 2m / 15, z = 8
  AWQ:       s = max(max(w) - min(w), 1e-5) / 15, z = clamp(-round(min(w) / s), 0, 15)
  Q4_0:      m = the value of largest magnitude, d = m / -8, q = min(15, trunc(w / d + 8.5))
"""

import argparse
import json
import os
import struct
import sys

import numpy as np

sys.dont_write_bytecode = True


def find_shared(arg):
    here = os.path.dirname(os.path.abspath(__file__))
    for cand in (arg, os.environ.get("KILN_SHARED"), os.path.join(here, "..", "..", "..", "shared"),
                 "/work/shared"):
        if cand and os.path.isdir(os.path.join(cand, "models")):
            return os.path.abspath(cand)
    sys.exit("make_prequant: cannot find the shared folder (pass --shared)")


# ----------------------------------------------------------------------------
# safetensors
# ----------------------------------------------------------------------------

_DT = {"F32": "<f4", "F16": "<f2", "I32": "<i4", "I64": "<i8"}


def st_read(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    hdr = json.loads(raw[8:8 + n])
    meta = hdr.pop("__metadata__", None) or {}
    out = {}
    for name, info in hdr.items():
        b, e = info["data_offsets"]
        out[name] = np.frombuffer(raw[8 + n + b:8 + n + e], _DT[info["dtype"]]).reshape(info["shape"])
    for k, v in meta.items():
        if isinstance(v, str) and v in out and k not in out:
            out[k] = out[v]
    return out


def st_write(path, tensors, dtypes=None):
    """tensors: ordered {name: ndarray}; dtypes overrides the safetensors
    dtype string of a tensor (e.g. to mislabel one)."""
    names = {np.dtype("<f4"): "F32", np.dtype("<f2"): "F16", np.dtype("<i4"): "I32",
             np.dtype("<i8"): "I64"}
    hdr, blobs, off = {}, [], 0
    for name, a in tensors.items():
        a = np.ascontiguousarray(a)
        blob = a.tobytes()
        hdr[name] = {"dtype": (dtypes or {}).get(name, names[a.dtype.newbyteorder("<")]),
                     "shape": list(a.shape), "data_offsets": [off, off + len(blob)]}
        off += len(blob)
        blobs.append(blob)
    js = json.dumps(hdr, separators=(",", ":")).encode()
    js += b" " * (-len(js) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(js)) + js + b"".join(blobs))


# ----------------------------------------------------------------------------
# quantizers (w: [out, in] float64, HF layout)
# ----------------------------------------------------------------------------

def rtn_groups(w, group, scheme):
    """Returns q [out, in] ints 0..15, scales [out, G] (f16-representable
    float64), zeros [out, G] ints."""
    out, cols = w.shape
    G = -(-cols // group)
    q = np.zeros((out, cols), np.int64)
    S = np.zeros((out, G))
    Z = np.zeros((out, G), np.int64)
    for g in range(G):
        blk = w[:, g * group:(g + 1) * group]
        if scheme == "gptq-asym":
            lo, hi = np.minimum(blk.min(1), 0), np.maximum(blk.max(1), 0)
            both = (lo == 0) & (hi == 0)
            lo, hi = np.where(both, -1, lo), np.where(both, 1, hi)
            s = (hi - lo) / 15
            z = np.round(-lo / s)
        elif scheme == "gptq-sym":
            m = np.abs(blk).max(1)
            m = np.where(m == 0, 1, m)
            s = 2 * m / 15
            z = np.full(out, 8.0)
        elif scheme == "awq":
            s = np.maximum(blk.max(1) - blk.min(1), 1e-5) / 15
            z = np.clip(-np.round(blk.min(1) / s), 0, 15)
        else:
            raise ValueError(scheme)
        s16 = s.astype(np.float16).astype(np.float64)
        q[:, g * group:(g + 1) * group] = np.clip(np.round(blk / s16[:, None]) + z[:, None], 0, 15)
        S[:, g], Z[:, g] = s16, z
    return q, S, Z


def pack_along_first(v):
    """[n, m] ints 0..15 -> int32 [n/8, m]: eight values along dim 0, LSB first."""
    n, m = v.shape
    out = np.zeros((n // 8, m), np.uint32)
    for k in range(8):
        out |= (v[k::8].astype(np.uint32) & 15) << (4 * k)
    return out.view(np.int32)


def pack_along_last(v, order=range(8)):
    """[n, m] ints 0..15 -> int32 [n, m/8]: nibble p of word c holds column
    8c + order[p]."""
    n, m = v.shape
    out = np.zeros((n, m // 8), np.uint32)
    for p, k in enumerate(order):
        out |= (v[:, k::8].astype(np.uint32) & 15) << (4 * p)
    return out.view(np.int32)


AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]

LINEARS = ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
           "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"]


def gptq_linear(w, group, sym, v1, perm=None):
    """AutoGPTQ QuantLinear tensors for W [out, in]. perm: act-order column
    order (g_idx[perm[k]] = k // group) or None (trivial g_idx)."""
    out, cols = w.shape
    gs = cols if group == -1 else group
    if perm is None:
        q, S, Z = rtn_groups(w, gs, "gptq-sym" if sym else "gptq-asym")
        g_idx = np.arange(cols) // gs
    else:
        # quantize in permuted column order; group k // gs holds perm[k]
        qp, S, Z = rtn_groups(w[:, perm], gs, "gptq-sym" if sym else "gptq-asym")
        q = np.zeros_like(qp)
        q[:, perm] = qp
        g_idx = np.zeros(cols, np.int64)
        g_idx[perm] = np.arange(cols) // gs
    zs = Z - 1 if v1 else Z
    if v1 and (Z == 0).any():
        raise SystemExit("make_prequant: a zero point of 0 would wrap in GPTQ v1")
    return {"qweight": pack_along_first(q.T),                  # [in/8, out]
            "qzeros": pack_along_last(zs.T & 15),             # [G, out/8]
            "scales": S.T.astype(np.float16),                 # [G, out]
            "g_idx": g_idx.astype(np.int32)}


def awq_linear(w, group):
    q, S, Z = rtn_groups(w, group, "awq")
    return {"qweight": pack_along_last(q.T, AWQ_ORDER),        # [in, out/8]
            "qzeros": pack_along_last(Z.T, AWQ_ORDER),        # [G, out/8]
            "scales": S.T.astype(np.float16)}                 # [G, out]


def write_hf(shared, outdir, name, qconfig, make_linear, edit=None, config_edit=None):
    src = os.path.join(shared, "models", "tinystories-656k", "hf")
    W = st_read(os.path.join(src, "model.safetensors"))
    cfg = json.load(open(os.path.join(src, "config.json")))
    d = os.path.join(outdir, name)
    os.makedirs(d, exist_ok=True)
    tensors = {}
    emb = W.get("model.embed_tokens.weight", W.get("lm_head.weight"))
    tensors["model.embed_tokens.weight"] = emb.astype("<f4")
    for l in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % l
        for n in ("input_layernorm", "post_attention_layernorm"):
            tensors[p + n + ".weight"] = W[p + n + ".weight"].astype("<f4")
        for lin in LINEARS:
            for part, a in make_linear(W[p + lin + ".weight"].astype(np.float64)).items():
                tensors[p + lin + "." + part] = a
    tensors["model.norm.weight"] = W["model.norm.weight"].astype("<f4")
    dtypes = {}
    if edit:
        edit(tensors, dtypes)
    st_write(os.path.join(d, "model.safetensors"), tensors, dtypes)
    cfg["quantization_config"] = dict(qconfig)
    cfg["torch_dtype"] = "float16"
    if config_edit:
        config_edit(cfg)
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"), indent=2)
    for f in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
              "generation_config.json"):
        dst = os.path.join(d, f)
        if not os.path.lexists(dst):
            os.symlink(os.path.join(src, f), dst)
    return d


def gptq_config(group, sym, desc_act, fmt):
    return {"quant_method": "gptq", "bits": 4, "group_size": group, "desc_act": desc_act,
            "sym": sym, "true_sequential": True, "checkpoint_format": fmt,
            "damp_percent": 0.01, "static_groups": False}


AWQ_CONFIG = {"quant_method": "awq", "bits": 4, "group_size": 32, "version": "gemm",
              "zero_point": True}


# ----------------------------------------------------------------------------
# GGUF
# ----------------------------------------------------------------------------

_SCALAR_SIZE = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def gguf_parse(raw):
    """Returns (version, n_kv, kv_bytes, alignment, infos [(name, dims, type,
    offset)], data_start)."""
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from(fmt, raw, pos)
        pos += struct.calcsize(fmt)
        return v[0]

    def string():
        nonlocal pos
        n = take("<Q")
        s = raw[pos:pos + n].decode()
        pos += n
        return s

    def skip_value(t):
        nonlocal pos
        if t in _SCALAR_SIZE:
            pos += _SCALAR_SIZE[t]
        elif t == 8:
            string()
        elif t == 9:
            et, n = take("<I"), take("<Q")
            for _ in range(n):
                skip_value(et)
        else:
            raise SystemExit("make_prequant: unknown GGUF value type %d" % t)

    assert raw[:4] == b"GGUF"
    pos = 4
    version = take("<I")
    n_t, n_kv = take("<Q"), take("<Q")
    kv_start = pos
    alignment = 32
    for _ in range(n_kv):
        key = string()
        t = take("<I")
        if key == "general.alignment":
            alignment = struct.unpack_from("<I", raw, pos)[0]
        skip_value(t)
    kv_bytes = raw[kv_start:pos]
    infos = []
    for _ in range(n_t):
        name = string()
        nd = take("<I")
        dims = [take("<Q") for _ in range(nd)]
        t = take("<I")
        off = take("<Q")
        infos.append((name, dims, t, off))
    data_start = -(-pos // alignment) * alignment
    return version, n_kv, kv_bytes, alignment, infos, data_start


def q4_0_blocks(x):
    """ggml quantize_row_q4_0_ref: x [n] float32, n % 32 == 0 -> bytes."""
    x = x.astype(np.float32).reshape(-1, 32)
    idx = np.abs(x).argmax(1)
    mx = x[np.arange(len(x)), idx]
    d = (mx / np.float32(-8)).astype(np.float32)
    with np.errstate(divide="ignore"):
        inv = np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
    q = np.minimum(15, np.trunc(x * inv[:, None] + np.float32(8.5))).astype(np.uint8)
    out = np.zeros((len(x), 18), np.uint8)
    out[:, :2] = d.astype("<f2").view(np.uint8).reshape(-1, 2)
    out[:, 2:] = q[:, :16] | (q[:, 16:] << 4)
    return out.tobytes()


def write_q4_0_gguf(shared, path, corrupt=None):
    src = os.path.join(shared, "models", "stories260K", "stories260K.gguf")
    raw = open(src, "rb").read()
    version, n_kv, kv_bytes, align, infos, data_start = gguf_parse(raw)
    sizes = {0: 4, 1: 2}
    new_infos, blobs, off = [], [], 0
    for name, dims, t, o in infos:
        n = int(np.prod(dims))
        if t not in sizes:
            raise SystemExit("make_prequant: %s: unexpected type %d in %s" % (name, t, src))
        data = raw[data_start + o:data_start + o + n * sizes[t]]
        if t == 0 and len(dims) == 2 and dims[0] % 32 == 0:
            data, t = q4_0_blocks(np.frombuffer(data, "<f4")), 2
        if corrupt:
            r = corrupt(name, dims, t, data)
            if r is not None:
                dims, t, data = r
        new_infos.append((name, dims, t, off))
        blobs.append(data + b"\0" * (-len(data) % align))
        off += len(blobs[-1])
    out = bytearray(b"GGUF" + struct.pack("<IQQ", 3, len(new_infos), n_kv) + kv_bytes)
    for name, dims, t, o in new_infos:
        nb = name.encode()
        out += struct.pack("<Q", len(nb)) + nb + struct.pack("<I", len(dims))
        out += b"".join(struct.pack("<Q", d) for d in dims) + struct.pack("<IQ", t, o)
    out += b"\0" * (-len(out) % align)
    out += b"".join(blobs)
    open(path, "wb").write(bytes(out))


# ----------------------------------------------------------------------------

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("outdir")
    ap.add_argument("--shared", default=None)
    ap.add_argument("--bad", action="store_true", help="also write malformed variants")
    a = ap.parse_args(argv)
    shared = find_shared(a.shared)
    os.makedirs(a.outdir, exist_ok=True)
    o = a.outdir

    gptq = lambda w: gptq_linear(w, 32, sym=False, v1=True)  # noqa: E731
    write_hf(shared, o, "gptq", gptq_config(32, False, False, "gptq"), gptq)
    write_hf(shared, o, "gptq-v2", gptq_config(-1, True, False, "gptq_v2"),
             lambda w: gptq_linear(w, -1, sym=True, v1=False))
    rng = np.random.default_rng(0)
    write_hf(shared, o, "gptq-actorder", gptq_config(32, False, True, "gptq"),
             lambda w: gptq_linear(w, 32, sym=False, v1=True, perm=rng.permutation(w.shape[1])))
    write_hf(shared, o, "gptq-actorder-trivial", gptq_config(32, False, True, "gptq"), gptq)
    write_hf(shared, o, "awq", AWQ_CONFIG, lambda w: awq_linear(w, 32))
    write_q4_0_gguf(shared, os.path.join(o, "stories260K-Q4_0.gguf"))
    print("make_prequant: wrote gptq, gptq-v2, gptq-actorder, gptq-actorder-trivial, awq, "
          "stories260K-Q4_0.gguf")
    if not a.bad:
        return 0

    # Malformed variants: each differs from a good fixture in one thing.
    L0 = "model.layers.0.self_attn.q_proj."

    def bad_hf(name, why, fmt="gptq", edit=None, config_edit=None):
        if fmt == "gptq":
            write_hf(shared, o, name, gptq_config(32, False, False, "gptq"), gptq, edit, config_edit)
        else:
            write_hf(shared, o, name, AWQ_CONFIG, lambda w: awq_linear(w, 32), edit, config_edit)
        print("%s: %s" % (name, why))

    def setitem(k, f):
        def edit(t, dt):
            t[k] = f(t[k])
        return edit

    def drop(k):
        def edit(t, dt):
            del t[k]
        return edit

    def relabel(k, dtype):
        def edit(t, dt):
            dt[k] = dtype
        return edit

    def cfg(**kw):
        def edit(c):
            c["quantization_config"].update(kw)
        return edit

    bad_hf("bad-gptq-qweight-shape", "q_proj.qweight is [16, 64] (out halved)",
           edit=setitem(L0 + "qweight", lambda a: a[:, :64]))
    bad_hf("bad-gptq-qweight-dtype", "q_proj.qweight is F32, not I32",
           edit=relabel(L0 + "qweight", "F32"))
    bad_hf("bad-gptq-qzeros-shape", "q_proj.qzeros has one group too few",
           edit=setitem(L0 + "qzeros", lambda a: a[:-1]))
    bad_hf("bad-gptq-scales-shape", "q_proj.scales is [4, 64]",
           edit=setitem(L0 + "scales", lambda a: a[:, :64]))
    bad_hf("bad-gptq-scales-dtype", "q_proj.scales is I32",
           edit=setitem(L0 + "scales", lambda a: a.astype(np.float32).view(np.int32)))
    bad_hf("bad-gptq-no-scales", "q_proj.scales missing", edit=drop(L0 + "scales"))
    bad_hf("bad-gptq-no-qzeros", "q_proj.qzeros missing", edit=drop(L0 + "qzeros"))
    bad_hf("bad-gptq-bits3", "quantization_config.bits = 3", config_edit=cfg(bits=3))
    bad_hf("bad-gptq-bits8", "quantization_config.bits = 8", config_edit=cfg(bits=8))
    bad_hf("bad-gptq-group-odd", "quantization_config.group_size = 33",
           config_edit=cfg(group_size=33))
    bad_hf("bad-gptq-group-mismatch", "group_size 64 in config, tensors have groups of 32",
           config_edit=cfg(group_size=64))
    bad_hf("bad-gptq-gidx-range", "q_proj.g_idx[5] = 99 (4 groups)",
           edit=setitem(L0 + "g_idx", lambda a: np.where(np.arange(len(a)) == 5, 99, a).astype(np.int32)))
    bad_hf("bad-gptq-scale-nan", "q_proj.scales[1, 3] is NaN",
           edit=setitem(L0 + "scales", lambda a: np.where(
               (np.arange(a.size) == 1 * a.shape[1] + 3).reshape(a.shape), np.float16("nan"), a)))
    bad_hf("bad-gptq-v1-zero-wrap", "q_proj.qzeros stores nibble 15 (zero point 16 in v1)",
           edit=setitem(L0 + "qzeros", lambda a: (a.view(np.uint32) | np.uint32(15)).view(np.int32)))
    bad_hf("bad-gptq-format", "checkpoint_format marlin", config_edit=cfg(checkpoint_format="marlin"))
    bad_hf("bad-method", "quant_method bitsandbytes", config_edit=cfg(quant_method="bitsandbytes"))
    bad_hf("bad-awq-gemv", "AWQ version gemv", fmt="awq", config_edit=cfg(version="gemv"))
    bad_hf("bad-awq-qweight-shape", "AWQ q_proj.qweight is [in/8, out] (GPTQ's shape)", fmt="awq",
           edit=setitem(L0 + "qweight", lambda a: a.reshape(16, 128)))

    def add_lm_head(t, dt):
        t["lm_head.qweight"] = np.zeros((16, 2048), np.int32)
    bad_hf("bad-gptq-lm-head", "a quantized classifier lm_head.qweight", edit=add_lm_head)

    def drop_gidx(t, dt):
        for k in [k for k in t if k.endswith(".g_idx")]:
            del t[k]
    bad_hf("bad-gptq-actorder-no-gidx", "desc_act true but no g_idx tensors",
           edit=drop_gidx, config_edit=cfg(desc_act=True))

    # Truncated data: the safetensors file ends inside its last tensor.
    d = os.path.join(o, "bad-gptq-truncated")
    write_hf(shared, o, "bad-gptq-truncated", gptq_config(32, False, False, "gptq"), gptq)
    p = os.path.join(d, "model.safetensors")
    raw = open(p, "rb").read()
    open(p, "wb").write(raw[:len(raw) - 100])
    print("bad-gptq-truncated: model.safetensors cut 100 bytes short")

    # Q4_0 tensor whose byte count is wrong: attn_q labelled Q4_0 with the
    # Q8_0 byte count of its blocks (34 per 32 weights, not 18).
    def q4_wrong(name, dims, t, data):
        if name == "blk.0.attn_q.weight":
            return dims, t, data + b"\0" * (len(data) // 18 * 16)
        return None
    write_q4_0_gguf(shared, os.path.join(o, "bad-q4_0-bytes.gguf"), q4_wrong)
    print("bad-q4_0-bytes.gguf: blk.0.attn_q.weight (Q4_0) followed by 16 extra bytes per block")

    def q4_row(name, dims, t, data):
        if name == "blk.0.ffn_down.weight":  # 172-wide rows: not whole Q4_0 blocks
            return dims, 2, data[:len(data) // 4 * 18 // 32]
        return None
    write_q4_0_gguf(shared, os.path.join(o, "bad-q4_0-row.gguf"), q4_row)
    print("bad-q4_0-row.gguf: blk.0.ffn_down.weight labelled Q4_0 with 172-wide rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
