#!/usr/bin/env python3
"""Independent float64 numpy reference of the Llama forward pass.

Written from the Llama / Llama-2 papers' equations and Meta's original
`model.py` conventions (as also followed by llama2.c `run.c`):

    h0      = E[token]
    x'      = x + Wo . Attn(RoPE(Wq . n1(x)), RoPE(Wk . n1(x)), Wv . n1(x))
    x''     = x' + W2 . (silu(W1 . n2(x')) * (W3 . n2(x')))
    logits  = Wcls . n_f(x_L)
    n(x)    = x / sqrt(mean(x^2) + eps) * g                        (RMSNorm)
    RoPE    : rotate adjacent pairs (x[2i], x[2i+1]) of every head by
              pos * theta^(-2i/head_dim)                           (Meta layout)
    Attn    : softmax(q k^T / sqrt(head_dim) + causal mask) v, with
              grouped-query attention: query head h uses kv head h // (Hq/Hkv)

It reads the checkpoint files itself and shares no code with Kiln's C++
importers.  Supported inputs:

  * llama2.c `.bin` (legacy version-0 layout: 7 int32 header, f32 weights,
    freq_cis tables that are skipped, negative vocab => untied wcls at the end)
  * GGUF v2/v3 (F32, F16, Q8_0, Q4_0 tensors decoded here; Q4_1, Q5_0,
    Q5_1, Q2_K..Q6_K by gguf-py's gguf.quants.dequantize; ggml dims reversed; llama.cpp
    stores Q/K already in adjacent-pair order)
  * Hugging Face directory (config.json + model.safetensors[.index.json];
    tied lm_head alias via __metadata__; q/k rows are in "rotate-half" order
    and are permuted to adjacent-pair order on load); GPTQ and AWQ
    checkpoints (config.json quantization_config) are dequantized from the
    formats' specs (see dequant_gptq / dequant_awq)

Public API:
  load_model(path) -> Model
  logits_for(model_path_or_Model, tokens) -> np.ndarray [n, vocab] float64
  greedy(model, prompt_tokens, n_new) -> list of generated ids

CLI:
  llama_ref.py MODEL --tokens 1,403,407 --out FILE.npy
  llama_ref.py MODEL --tokens 1 --greedy 200
  llama_ref.py --self-check [--shared DIR]
"""

import argparse
import json
import os
import re
import struct
import sys

import numpy as np


class RefError(Exception):
    pass


# ----------------------------------------------------------------------------
# Model container
# ----------------------------------------------------------------------------

class Model:
    """Weights in Meta layout (row-major [out, in]), float64.

    rope_style is "pair" (adjacent pairs, Meta/llama2.c/GGUF) or "half"
    (HF rotate_half) and says how q/k rows of wq/wk are ordered.
    """

    def __init__(self):
        self.cfg = {}
        self.tok_emb = None
        self.layers = []  # dicts: attn_norm, wq, wk, wv, wo, ffn_norm, w1, w2, w3
        self.final_norm = None
        self.wcls = None
        self.rope_style = "pair"
        self.source_format = None
        self.path = "<model>"
        self.names = {}  # (layer, key) -> tensor name in the source file (for messages)

    def check(self):
        c = self.cfg
        D, F, V = c["dim"], c["hidden_dim"], c["vocab_size"]
        H, KV = c["n_heads"], c["n_kv_heads"]
        if D <= 0 or H <= 0 or KV <= 0 or D % H or H % KV:
            raise RefError("%s: bad config %r" % (self.path, c))
        hd = D // H
        exp = {"attn_norm": (D,), "wq": (D, D), "wk": (KV * hd, D),
               "wv": (KV * hd, D), "wo": (D, D), "ffn_norm": (D,),
               "w1": (F, D), "w2": (D, F), "w3": (F, D)}
        for what, got, want in (("token embedding", self.tok_emb.shape, (V, D)),
                                ("final norm", self.final_norm.shape, (D,)),
                                ("classifier", self.wcls.shape, (V, D)),
                                ("layer count", (len(self.layers),), (c["n_layers"],))):
            if got != want:
                raise RefError("%s: %s shape %r != %r" % (self.path, what, got, want))
        for i, L in enumerate(self.layers):
            for k, s in exp.items():
                if L[k].shape != s:
                    src = self.names.get((i, k), "layer %d %s" % (i, k))
                    raise RefError("%s: tensor %s has shape %r, expected %r"
                                   % (self.path, src, L[k].shape, s))
        return self


def _f64(a):
    return np.ascontiguousarray(a, dtype=np.float64)


# ----------------------------------------------------------------------------
# llama2.c .bin
# ----------------------------------------------------------------------------

def load_llama2c(path):
    raw = open(path, "rb").read()
    if len(raw) < 28:
        raise RefError("%s: too small for a llama2.c header" % path)
    dim, hidden, n_layers, n_heads, n_kv, vocab, seq_len = struct.unpack("<7i", raw[:28])
    shared = vocab > 0
    vocab = abs(vocab)
    for name, v in (("dim", dim), ("hidden_dim", hidden), ("n_layers", n_layers),
                    ("n_heads", n_heads), ("n_kv_heads", n_kv), ("seq_len", seq_len)):
        if v <= 0:
            raise RefError("%s: header field %s = %d must be positive" % (path, name, v))
    if dim % n_heads:
        raise RefError("%s: header n_heads = %d does not divide dim = %d" % (path, n_heads, dim))
    if n_heads % n_kv:
        raise RefError("%s: header n_kv_heads = %d does not divide n_heads = %d" % (path, n_kv, n_heads))
    hs = dim // n_heads
    kvd = n_kv * hs
    data = np.frombuffer(raw, dtype="<f4", offset=28, count=(len(raw) - 28) // 4)
    pos = [0]

    def take(*shape):
        n = int(np.prod(shape))
        if pos[0] + n > data.size:
            raise RefError("%s: truncated: header implies at least %d bytes, file has %d"
                           % (path, 28 + 4 * (pos[0] + n), len(raw)))
        a = data[pos[0]:pos[0] + n].reshape(shape)
        pos[0] += n
        return _f64(a)

    m = Model()
    m.source_format = "llama2c"
    m.path = path
    tok = take(vocab, dim)
    rms_att = take(n_layers, dim)
    wq = take(n_layers, dim, dim)
    wk = take(n_layers, kvd, dim)
    wv = take(n_layers, kvd, dim)
    wo = take(n_layers, dim, dim)
    rms_ffn = take(n_layers, dim)
    w1 = take(n_layers, hidden, dim)
    w2 = take(n_layers, dim, hidden)
    w3 = take(n_layers, hidden, dim)
    rms_final = take(dim)
    take(seq_len, hs // 2)  # freq_cis_real (skipped, we compute RoPE ourselves)
    take(seq_len, hs // 2)  # freq_cis_imag
    wcls = tok if shared else take(vocab, dim)
    if pos[0] != data.size or (len(raw) - 28) % 4:
        raise RefError("%s: file size %d bytes, header implies %d (%d trailing bytes)"
                       % (path, len(raw), 28 + 4 * pos[0], len(raw) - 28 - 4 * pos[0]))
    m.cfg = dict(dim=dim, hidden_dim=hidden, n_layers=n_layers, n_heads=n_heads,
                 n_kv_heads=n_kv, vocab_size=vocab, max_seq_len=seq_len,
                 rms_norm_eps=1e-5, rope_theta=10000.0, tied=shared)
    m.tok_emb = tok
    m.final_norm = rms_final
    m.wcls = wcls
    for l in range(n_layers):
        m.layers.append(dict(attn_norm=rms_att[l], wq=wq[l], wk=wk[l], wv=wv[l], wo=wo[l],
                             ffn_norm=rms_ffn[l], w1=w1[l], w2=w2[l], w3=w3[l]))
    return m.check()


# ----------------------------------------------------------------------------
# GGUF
# ----------------------------------------------------------------------------

GGML_F32, GGML_F16, GGML_Q4_0, GGML_Q8_0 = 0, 1, 2, 8
GGML_NAMES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 6: "Q5_0", 7: "Q5_1", 8: "Q8_0",
              9: "Q8_1", 10: "Q2_K", 11: "Q3_K", 12: "Q4_K", 13: "Q5_K", 14: "Q6_K",
              15: "Q8_K", 30: "BF16"}

# GGML block formats: type -> (elements, bytes) per block (ggml-common.h).
GGML_BLOCKS = {2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34),
               10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176),
               14: (256, 210)}

_GGUF_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
                10: "<Q", 11: "<q", 12: "<d"}


class _Reader:
    def __init__(self, raw, path):
        self.raw, self.pos, self.path = raw, 0, path

    def need(self, n, what):
        if self.pos + n > len(self.raw):
            raise RefError("%s: truncated while reading %s at offset %d" % (self.path, what, self.pos))

    def unpack(self, fmt, what):
        n = struct.calcsize(fmt)
        self.need(n, what)
        v = struct.unpack_from(fmt, self.raw, self.pos)
        self.pos += n
        return v[0] if len(v) == 1 else v

    def string(self, what):
        n = self.unpack("<Q", what)
        self.need(n, what)
        s = self.raw[self.pos:self.pos + n]
        self.pos += n
        return s.decode("utf-8", errors="replace")

    def value(self, t, what):
        if t in _GGUF_SCALAR:
            return self.unpack(_GGUF_SCALAR[t], what)
        if t == 8:
            return self.string(what)
        if t == 9:
            et = self.unpack("<I", what)
            n = self.unpack("<Q", what)
            if et in _GGUF_SCALAR:
                fmt = _GGUF_SCALAR[et]
                sz = struct.calcsize(fmt)
                self.need(n * sz, what)
                a = np.frombuffer(self.raw, dtype=np.dtype(fmt), count=n, offset=self.pos)
                self.pos += n * sz
                return a
            return [self.value(et, what) for _ in range(n)]
        raise RefError("%s: unknown GGUF value type %d for %s" % (self.path, t, what))


def parse_gguf(path):
    """Returns (version, kv dict, tensor infos {name: (shape_numpy, type, abs_offset, nbytes)}, raw)."""
    raw = open(path, "rb").read()
    r = _Reader(raw, path)
    magic = r.unpack("<4s", "magic")
    if magic != b"GGUF":
        raise RefError("%s: bad magic %r" % (path, magic))
    version = r.unpack("<I", "version")
    if version not in (2, 3):
        raise RefError("%s: unsupported GGUF version %d" % (path, version))
    n_tensors = r.unpack("<Q", "tensor count")
    n_kv = r.unpack("<Q", "kv count")
    kv = {}
    for _ in range(n_kv):
        key = r.string("kv key")
        t = r.unpack("<I", "kv type of " + key)
        kv[key] = r.value(t, key)
    infos = []
    for _ in range(n_tensors):
        name = r.string("tensor name")
        nd = r.unpack("<I", "n_dims of " + name)
        dims = [r.unpack("<Q", "dims of " + name) for _ in range(nd)]
        t = r.unpack("<I", "type of " + name)
        off = r.unpack("<Q", "offset of " + name)
        infos.append((name, dims, t, off))
    align = int(kv.get("general.alignment", 32))
    data_start = (r.pos + align - 1) // align * align
    tensors = {}
    for name, dims, t, off in infos:
        n = int(np.prod(dims)) if dims else 1
        if t == GGML_F32:
            nb = 4 * n
        elif t == GGML_F16:
            nb = 2 * n
        elif t in GGML_BLOCKS:
            elems, size = GGML_BLOCKS[t]
            if dims[0] % elems:
                raise RefError("%s: %s tensor %s row not multiple of %d" %
                               (path, GGML_NAMES[t], name, elems))
            nb = n // elems * size
        else:
            raise RefError("%s: tensor %s has unsupported type %s" % (path, name, GGML_NAMES.get(t, t)))
        a = data_start + off
        if a + nb > len(raw):
            raise RefError("%s: tensor %s data past end of file" % (path, name))
        tensors[name] = (tuple(reversed(dims)), t, a, nb)
    return version, kv, tensors, raw


def dequant(raw, shape, t, off, nb):
    n = int(np.prod(shape))
    if t == GGML_F32:
        a = np.frombuffer(raw, dtype="<f4", count=n, offset=off)
    elif t == GGML_F16:
        a = np.frombuffer(raw, dtype="<f2", count=n, offset=off)
    elif t == GGML_Q8_0:
        blk = np.frombuffer(raw, dtype=np.uint8, count=nb, offset=off).reshape(-1, 34)
        d = blk[:, :2].copy().view("<f2").astype(np.float64)  # [nblk, 1]
        q = blk[:, 2:].copy().view(np.int8).astype(np.float64)  # [nblk, 32]
        a = (d * q).reshape(-1)
    elif t == GGML_Q4_0:
        # ggml dequantize_row_q4_0: block = f16 d, 16 bytes; byte j holds
        # element j (low nibble) and j + 16 (high nibble); w = d * (q - 8).
        blk = np.frombuffer(raw, dtype=np.uint8, count=nb, offset=off).reshape(-1, 18)
        d = blk[:, :2].copy().view("<f2").astype(np.float64)
        qs = blk[:, 2:].astype(np.int64)
        q = np.concatenate([qs & 15, qs >> 4], axis=1) - 8  # [nblk, 32]
        a = (d * q).reshape(-1)
    elif t in GGML_BLOCKS:
        # Q4_1, Q5_0, Q5_1 and the K-quants: gguf-py's decoder (PyPI `gguf`),
        # independent of Kiln's.
        from gguf import GGMLQuantizationType
        from gguf.quants import dequantize as gguf_dequantize
        blk = np.frombuffer(raw, dtype=np.uint8, count=nb, offset=off)
        a = gguf_dequantize(blk, GGMLQuantizationType(t)).reshape(-1)
    else:
        raise RefError("unsupported type %d" % t)
    return _f64(a).reshape(shape)


def load_gguf(path):
    version, kv, tensors, raw = parse_gguf(path)
    arch = kv.get("general.architecture")
    if arch != "llama":
        raise RefError("%s: unsupported architecture %r" % (path, arch))

    def g(k, default=None):
        v = kv.get("llama." + k, default)
        if v is None:
            raise RefError("%s: missing key llama.%s" % (path, k))
        return v

    def T(name):
        if name not in tensors:
            raise RefError("%s: missing tensor %s" % (path, name))
        shape, t, off, nb = tensors[name]
        return dequant(raw, shape, t, off, nb)

    m = Model()
    m.source_format = "gguf"
    dim = int(g("embedding_length"))
    n_heads = int(g("attention.head_count"))
    n_kv = int(g("attention.head_count_kv", n_heads))
    n_layers = int(g("block_count"))
    hidden = int(g("feed_forward_length"))
    if dim <= 0 or n_heads <= 0 or n_kv <= 0 or n_layers <= 0 or dim % n_heads:
        raise RefError("%s: bad hyper-parameters dim=%d heads=%d kv_heads=%d layers=%d"
                       % (path, dim, n_heads, n_kv, n_layers))
    tok = T("token_embd.weight")
    vocab = tok.shape[0]
    rope_dim = int(kv.get("llama.rope.dimension_count", dim // n_heads))
    if rope_dim != dim // n_heads:
        raise RefError("%s: partial rotary (%d of %d) not supported" % (path, rope_dim, dim // n_heads))
    m.cfg = dict(dim=dim, hidden_dim=hidden, n_layers=n_layers, n_heads=n_heads, n_kv_heads=n_kv,
                 vocab_size=vocab, max_seq_len=int(g("context_length")),
                 rms_norm_eps=float(g("attention.layer_norm_rms_epsilon")),
                 rope_theta=float(kv.get("llama.rope.freq_base", 10000.0)),
                 tied="output.weight" not in tensors)
    m.tok_emb = tok
    m.final_norm = T("output_norm.weight")
    m.wcls = T("output.weight") if "output.weight" in tensors else tok
    m.path = path
    gnames = dict(attn_norm="attn_norm", wq="attn_q", wk="attn_k", wv="attn_v", wo="attn_output",
                  ffn_norm="ffn_norm", w1="ffn_gate", w2="ffn_down", w3="ffn_up")
    for l in range(n_layers):
        p = "blk.%d." % l
        for k, v in gnames.items():
            m.names[(l, k)] = p + v + ".weight"
        m.layers.append(dict(attn_norm=T(p + "attn_norm.weight"), wq=T(p + "attn_q.weight"),
                             wk=T(p + "attn_k.weight"), wv=T(p + "attn_v.weight"),
                             wo=T(p + "attn_output.weight"), ffn_norm=T(p + "ffn_norm.weight"),
                             w1=T(p + "ffn_gate.weight"), w2=T(p + "ffn_down.weight"),
                             w3=T(p + "ffn_up.weight")))
    return m.check()


# ----------------------------------------------------------------------------
# Hugging Face safetensors directory
# ----------------------------------------------------------------------------

_ST_DTYPES = {"F32": "<f4", "F16": "<f2", "F64": "<f8"}
_ST_INTS = {"I32": "<i4", "I64": "<i8"}  # kept as int64 (GPTQ/AWQ packed words)


def _bf16_to_f32(u16):
    return (u16.astype(np.uint32) << 16).view(np.float32)


def read_safetensors(path):
    raw = open(path, "rb").read()
    if len(raw) < 8:
        raise RefError("%s: too small" % path)
    n = struct.unpack("<Q", raw[:8])[0]
    if 8 + n > len(raw):
        raise RefError("%s: header length past end" % path)
    try:
        hdr = json.loads(raw[8:8 + n])
    except ValueError as e:
        raise RefError("%s: bad JSON header: %s" % (path, e))
    meta = hdr.pop("__metadata__", {}) or {}
    base = 8 + n
    out = {}
    for name, info in hdr.items():
        dt = info["dtype"]
        shape = tuple(info["shape"])
        b, e = info["data_offsets"]
        if base + e > len(raw) or b > e:
            raise RefError("%s: tensor %s data_offsets past end" % (path, name))
        cnt = int(np.prod(shape)) if shape else 1
        if dt in _ST_DTYPES:
            a = np.frombuffer(raw, dtype=_ST_DTYPES[dt], count=cnt, offset=base + b)
        elif dt == "BF16":
            a = _bf16_to_f32(np.frombuffer(raw, dtype="<u2", count=cnt, offset=base + b))
        elif dt in _ST_INTS:
            a = np.frombuffer(raw, dtype=_ST_INTS[dt], count=cnt, offset=base + b)
            if a.nbytes != e - b:
                raise RefError("%s: tensor %s size mismatch" % (path, name))
            out[name] = a.astype(np.int64).reshape(shape)
            continue
        else:
            raise RefError("%s: tensor %s unsupported dtype %s" % (path, name, dt))
        if a.nbytes != e - b:
            raise RefError("%s: tensor %s size mismatch" % (path, name))
        out[name] = _f64(a).reshape(shape)
    return out, meta


def hf_to_pair(w, n_heads):
    """Reorder q/k rows from HF rotate-half to Meta adjacent-pair order.

    Within one head, HF row j (j < hd/2) is the "real" part of pair j and row
    j + hd/2 its "imaginary" part; Meta interleaves them: 2j, 2j+1.
    (Same as llama.cpp's convert permute.)
    """
    out_dim = w.shape[0]
    hd = out_dim // n_heads
    return _f64(w.reshape(n_heads, 2, hd // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape))


def _unpack_nibbles(words, axis, order=range(8)):
    """int32 words -> 4-bit values, eight per word along `axis`; nibble p
    (bits 4p..4p+3) of a word holds element order[p] of its eight."""
    u = np.asarray(words, np.int64) & 0xFFFFFFFF
    parts = [None] * 8
    for p, k in enumerate(order):
        parts[k] = (u >> (4 * p)) & 15
    st = np.stack(parts, axis=axis + 1)  # [..., n, 8, ...]
    shape = list(u.shape)
    shape[axis] *= 8
    return st.reshape(shape)


def dequant_gptq(T, prefix, qc, in_features, out_features):
    """AutoGPTQ / GPTQModel QuantLinear: qweight int32 [in/8, out] (LSB
    first along in), qzeros int32 [G, out/8] (LSB first along out; stored
    zero - 1 when checkpoint_format is "gptq"), scales [G, out], g_idx [in];
    W[o, i] = scales[g_idx[i], o] * (q[i, o] - zero[g_idx[i], o])."""
    if qc.get("bits") != 4:
        raise RefError("GPTQ bits %r not supported by the reference" % qc.get("bits"))
    q = _unpack_nibbles(T(prefix + "qweight"), 0)                 # [in, out]
    z = _unpack_nibbles(T(prefix + "qzeros"), 1)                  # [G, out]
    if qc.get("checkpoint_format", "gptq") == "gptq":
        z = z + 1
    s = T(prefix + "scales")                                      # [G, out]
    gs = qc.get("group_size", 128)
    gs = in_features if gs == -1 else gs
    try:
        g = T(prefix + "g_idx").astype(np.int64)
    except RefError:
        g = np.arange(in_features) // gs
    w = s[g, :] * (q - z[g, :])                                   # [in, out]
    return _f64(w.T)


_AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]


def dequant_awq(T, prefix, qc, in_features, out_features):
    """AutoAWQ GEMM: qweight int32 [in, out/8], qzeros int32 [G, out/8],
    nibble p of a word holding column 8c + [0, 2, 4, 6, 1, 3, 5, 7][p];
    scales [G, out]; W[o, i] = scales[i // gs, o] * (q[i, o] - zero[i // gs, o])."""
    if qc.get("bits", qc.get("w_bit")) != 4:
        raise RefError("AWQ bits not supported by the reference")
    q = _unpack_nibbles(T(prefix + "qweight"), 1, _AWQ_ORDER)     # [in, out]
    z = _unpack_nibbles(T(prefix + "qzeros"), 1, _AWQ_ORDER)      # [G, out]
    s = T(prefix + "scales")
    g = np.arange(in_features) // qc.get("group_size", qc.get("q_group_size", 128))
    return _f64((s[g, :] * (q - z[g, :])).T)


def load_hf(path, keep_half=False):
    cfgp = os.path.join(path, "config.json")
    try:
        cfg = json.load(open(cfgp))
    except (OSError, ValueError) as e:
        raise RefError("%s: cannot read config.json: %s" % (path, e))
    archs = cfg.get("architectures") or []
    if "LlamaForCausalLM" not in archs and cfg.get("model_type") != "llama":
        raise RefError("%s: unsupported architecture %r" % (path, archs))
    if archs and archs[0] != "LlamaForCausalLM":
        raise RefError("%s: unsupported architecture %r" % (path, archs))
    if cfg.get("rope_scaling"):
        raise RefError("%s: rope_scaling not supported by reference" % path)
    files = []
    idx = os.path.join(path, "model.safetensors.index.json")
    if os.path.exists(idx):
        files = sorted(set(json.load(open(idx))["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    W, meta = {}, {}
    for f in files:
        w, md = read_safetensors(os.path.join(path, f))
        W.update(w)
        meta.update(md)
    # aliases recorded in __metadata__ (tied weights saved once)
    for k, v in meta.items():
        if k not in W and isinstance(v, str) and v in W:
            W[k] = W[v]

    qc = cfg.get("quantization_config")
    method = (qc or {}).get("quant_method")
    if qc and method not in ("gptq", "awq"):
        raise RefError("%s: quant_method %r not supported by the reference" % (path, method))

    def T(n):
        if n not in W:
            if qc and n.endswith(".weight") and n[:-len(".weight")] + ".qweight" in W:
                p = n[:-len(".weight")] + "."
                deq = dequant_gptq if method == "gptq" else dequant_awq
                in_f = (W[p + "qweight"].shape[0] * (8 if method == "gptq" else 1))
                out_f = W[p + "scales"].shape[1]
                return deq(T, p, qc, in_f, out_f)
            raise RefError("%s: missing tensor %s" % (path, n))
        return W[n]

    for k in ("hidden_size", "num_attention_heads", "intermediate_size", "num_hidden_layers",
              "vocab_size"):
        if k not in cfg:
            raise RefError("%s: config.json lacks %s" % (path, k))
    D = cfg["hidden_size"]
    H = cfg["num_attention_heads"]
    KV = cfg.get("num_key_value_heads") or H
    tied = bool(cfg.get("tie_word_embeddings", False))
    m = Model()
    m.source_format = "hf"
    m.rope_style = "half" if keep_half else "pair"
    if "model.embed_tokens.weight" in W:
        tok = W["model.embed_tokens.weight"]
    elif tied and "lm_head.weight" in W:
        tok = W["lm_head.weight"]
    else:
        tok = T("model.embed_tokens.weight")
    if "lm_head.weight" in W:
        wcls = W["lm_head.weight"]
    elif tied:
        wcls = tok
    else:
        wcls = T("lm_head.weight")
    m.cfg = dict(dim=D, hidden_dim=cfg["intermediate_size"], n_layers=cfg["num_hidden_layers"],
                 n_heads=H, n_kv_heads=KV, vocab_size=cfg["vocab_size"],
                 max_seq_len=cfg.get("max_position_embeddings", 2048),
                 rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
                 rope_theta=float(cfg.get("rope_theta", 10000.0)), tied=tied)
    m.tok_emb, m.wcls = tok, wcls
    m.final_norm = T("model.norm.weight")
    m.path = path
    hnames = dict(attn_norm="input_layernorm", wq="self_attn.q_proj", wk="self_attn.k_proj",
                  wv="self_attn.v_proj", wo="self_attn.o_proj", ffn_norm="post_attention_layernorm",
                  w1="mlp.gate_proj", w2="mlp.down_proj", w3="mlp.up_proj")
    for l in range(m.cfg["n_layers"]):
        p = "model.layers.%d." % l
        for k, v in hnames.items():
            m.names[(l, k)] = p + v + ".weight"
        wq = T(p + "self_attn.q_proj.weight")
        wk = T(p + "self_attn.k_proj.weight")
        if not keep_half:
            wq, wk = hf_to_pair(wq, H), hf_to_pair(wk, KV)
        m.layers.append(dict(attn_norm=T(p + "input_layernorm.weight"), wq=wq, wk=wk,
                             wv=T(p + "self_attn.v_proj.weight"), wo=T(p + "self_attn.o_proj.weight"),
                             ffn_norm=T(p + "post_attention_layernorm.weight"),
                             w1=T(p + "mlp.gate_proj.weight"), w2=T(p + "mlp.down_proj.weight"),
                             w3=T(p + "mlp.up_proj.weight")))
    return m.check()


def load_model(path, **kw):
    if isinstance(path, Model):
        return path
    if os.path.isdir(path):
        return load_hf(path, **kw)
    with open(path, "rb") as f:
        head = f.read(4)
    if head == b"GGUF" or path.endswith(".gguf"):
        return load_gguf(path)
    return load_llama2c(path)


# ----------------------------------------------------------------------------
# Forward pass
# ----------------------------------------------------------------------------

def rmsnorm(x, g, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * g


def rope(x, positions, theta, style):
    """x: [n, heads, hd]; positions: [n]."""
    hd = x.shape[-1]
    i = np.arange(0, hd, 2, dtype=np.float64)          # 0, 2, 4, ...
    inv = theta ** (-i / hd)                           # [hd/2]
    ang = positions[:, None].astype(np.float64) * inv[None, :]  # [n, hd/2]
    c = np.cos(ang)[:, None, :]
    s = np.sin(ang)[:, None, :]
    if style == "pair":
        a, b = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2] = a * c - b * s
        out[..., 1::2] = a * s + b * c
        return out
    # HF rotate_half: pair j is (x[j], x[j + hd/2])
    a, b = x[..., :hd // 2], x[..., hd // 2:]
    return np.concatenate([a * c - b * s, a * s + b * c], axis=-1)


def silu(x):
    return x / (1.0 + np.exp(-x))


class KVCache:
    def __init__(self, model):
        c = model.cfg
        self.k = [None] * c["n_layers"]
        self.v = [None] * c["n_layers"]
        self.pos = 0


def int8_per_block(x):
    """What a linear with act_quant = "int8_per_block" reads of its input x
    [n, C] (kernel_abi.h kiln_k_linear_blocks_a8): per 32 elements, in
    float32, d = max|x| / 127, q = clamp(roundf(x / d), -127, 127) (round
    half away from zero; 0 where d = 0); returns d * q in float64."""
    n, C = x.shape
    b = np.asarray(x, dtype=np.float32).reshape(n, C // 32, 32)
    d = (np.abs(b).max(axis=-1, keepdims=True) / np.float32(127)).astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        v = np.where(d == 0, np.float32(0), b / np.where(d == 0, np.float32(1), d))
    v = v.astype(np.float64)
    q = np.clip(np.sign(v) * np.floor(np.abs(v) + 0.5), -127, 127)
    return (d.astype(np.float64) * q).reshape(n, C)


def forward(model, tokens, cache=None, observe=None, kv_quant=None,
            key_quant=None, act_quant=None, observe_probs=None):
    """Run tokens at positions cache.pos .. cache.pos+n-1; returns logits [n, vocab].

    observe(tap, x), if given, sees the input x [n, C] of every linear layer
    group: tap "layers.i.attn_in" (wq/wk/wv), "layers.i.attn_out" (wo),
    "layers.i.ffn_in" (w1/w3), "layers.i.ffn_down_in" (w2); and the pre-RoPE
    key, tap "layers.i.key" [n, n_kv_heads * head_dim], always in Kiln's
    adjacent-pair layout (for rope_style "half", pair j = (x[j], x[j + hd/2])
    is stored at channels 2j, 2j+1 of its head, as Kiln's importer permutes
    HF's k_proj rows).

    kv_quant, if given, maps the new keys / values [n, n_kv_heads, head_dim]
    (keys after RoPE) to what a quantized KV cache returns when read back
    (quantize + dequantize); they are stored and attended to in that form.
    key_quant(layer, k, positions), if given, does the same for the keys
    alone (and sees the layer and the absolute positions [n], e.g. for key
    centering); kv_quant then applies to the values only.

    act_quant, if given, maps the input of every linear and of the
    classifier to what the linear reads (e.g. int8_per_block).

    observe_probs(layer, p), if given, sees every layer's attention
    probabilities p [n_heads, n, cache.pos + n] (rows: the new tokens).
    """
    aq = act_quant if act_quant is not None else (lambda a: a)
    c = model.cfg
    D, H, KV = c["dim"], c["n_heads"], c["n_kv_heads"]
    hd = D // H
    rep = H // KV
    eps, theta = c["rms_norm_eps"], c["rope_theta"]
    if cache is None:
        cache = KVCache(model)
    tokens = np.asarray(tokens, dtype=np.int64)
    n = tokens.size
    if n == 0:
        return np.zeros((0, c["vocab_size"]))
    if tokens.min() < 0 or tokens.max() >= c["vocab_size"]:
        raise RefError("token id out of range [0, %d)" % c["vocab_size"])
    p0 = cache.pos
    positions = np.arange(p0, p0 + n)
    total = p0 + n
    x = model.tok_emb[tokens].copy()  # [n, D]
    # causal mask: query at position p0+i sees keys 0..p0+i
    mask = np.where(np.arange(total)[None, :] <= positions[:, None], 0.0, -np.inf)  # [n, total]
    for l, L in enumerate(model.layers):
        h = rmsnorm(x, L["attn_norm"], eps)
        if observe:
            observe("layers.%d.attn_in" % l, h)
        hq = aq(h)
        q = (hq @ L["wq"].T).reshape(n, H, hd)
        k = (hq @ L["wk"].T).reshape(n, KV, hd)
        v = (hq @ L["wv"].T).reshape(n, KV, hd)
        if observe:
            kp = k
            if model.rope_style == "half":
                kp = np.stack([k[..., :hd // 2], k[..., hd // 2:]], axis=-1)
            observe("layers.%d.key" % l, kp.reshape(n, KV * hd))
        q = rope(q, positions, theta, model.rope_style)
        k = rope(k, positions, theta, model.rope_style)
        if key_quant is not None:
            k = key_quant(l, k, positions)
        elif kv_quant is not None:
            k = kv_quant(k)
        if kv_quant is not None:
            v = kv_quant(v)
        if cache.k[l] is None:
            cache.k[l], cache.v[l] = k, v
        else:
            cache.k[l] = np.concatenate([cache.k[l], k], axis=0)
            cache.v[l] = np.concatenate([cache.v[l], v], axis=0)
        K = np.repeat(cache.k[l], rep, axis=1)  # [total, H, hd]; head h -> kv head h // rep
        Vv = np.repeat(cache.v[l], rep, axis=1)
        s = np.einsum("nhd,thd->hnt", q, K) / np.sqrt(hd) + mask[None]
        s = s - s.max(axis=-1, keepdims=True)
        p = np.exp(s)
        p /= p.sum(axis=-1, keepdims=True)
        if observe_probs:
            observe_probs(l, p)
        o = np.einsum("hnt,thd->nhd", p, Vv).reshape(n, H * hd)
        if observe:
            observe("layers.%d.attn_out" % l, o)
        x = x + aq(o) @ L["wo"].T
        h = rmsnorm(x, L["ffn_norm"], eps)
        if observe:
            observe("layers.%d.ffn_in" % l, h)
        hq = aq(h)
        g = silu(hq @ L["w1"].T) * (hq @ L["w3"].T)
        if observe:
            observe("layers.%d.ffn_down_in" % l, g)
        x = x + aq(g) @ L["w2"].T
    cache.pos = total
    x = rmsnorm(x, model.final_norm, eps)
    return aq(x) @ model.wcls.T


def logits_for(model_path, tokens, act_quant=None):
    """Logits for every position of `tokens` (one full prefill), float64 [n, vocab]."""
    m = load_model(model_path)
    return forward(m, list(tokens), act_quant=act_quant)


def greedy(model, prompt, n_new, stop_at_eos=False, eos=2):
    """Greedy decoding with a KV cache. Returns the generated ids (prompt excluded)."""
    m = load_model(model)
    cache = KVCache(m)
    logits = forward(m, list(prompt), cache)
    out = []
    for _ in range(n_new):
        t = int(np.argmax(logits[-1]))
        out.append(t)
        if stop_at_eos and t == eos:
            break
        logits = forward(m, [t], cache)
    return out


# ----------------------------------------------------------------------------
# Minimal detokenizers (only to tie greedy ids to the *published* texts)
# ----------------------------------------------------------------------------

def llama2c_vocab(path):
    raw = open(path, "rb").read()
    pos = 4
    out = []
    while pos < len(raw):
        _score, n = struct.unpack_from("<fi", raw, pos)
        pos += 8
        out.append(raw[pos:pos + n])
        pos += n
    return out


def gguf_vocab(path):
    _v, kv, _t, _raw = parse_gguf(path)
    return [t.encode("utf-8") for t in kv["tokenizer.ggml.tokens"]]


def detok(pieces, ids, prev=1):
    """run.c / llama.cpp style decoding: '\u2581' -> ' ', <0xXX> -> byte,
    strip the leading space of the piece right after BOS, skip BOS/EOS."""
    out = b""
    for t in ids:
        p = pieces[t].replace("\u2581".encode("utf-8"), b" ")
        if t in (1, 2):
            p = b""
        mm = re.fullmatch(rb"<0x([0-9A-Fa-f]{2})>", p)
        if mm:
            p = bytes([int(mm.group(1), 16)])
        if prev == 1 and p.startswith(b" "):
            p = p[1:]
        out += p
        prev = t
    return out.decode("utf-8", errors="replace")


# ----------------------------------------------------------------------------
# Self-checks against the published / independently derived reference data
# ----------------------------------------------------------------------------

def _default_shared():
    here = os.path.dirname(os.path.abspath(__file__))
    for cand in (os.environ.get("KILN_SHARED"), os.path.join(here, "..", "..", "..", "shared"),
                 "/work/shared"):
        if cand and os.path.isdir(os.path.join(cand, "models")):
            return os.path.abspath(cand)
    return None


def self_check(shared, fast=False):
    ok = True

    def report(name, cond, detail=""):
        nonlocal ok
        ok &= bool(cond)
        print("%-4s %s %s" % ("PASS" if cond else "FAIL", name, detail))

    M = os.path.join(shared, "models")
    s2 = os.path.join(M, "stories260K")
    ref = json.load(open(os.path.join(s2, "reference_outputs.json")))
    d = ref["derived_independently"]
    want_logits = np.array(d["logits_pos0_after_BOS"])
    want_ids = d["greedy_ids_200"]
    models = {}
    for f in ("stories260K.bin", "stories260K.gguf"):
        m = load_model(os.path.join(s2, f))
        models[f] = m
        lg = logits_for(m, [1])[0]
        err = np.max(np.abs(lg - want_logits))
        report("stories260K/%s logits after BOS" % f, err < 1e-5, "max|diff|=%.3g" % err)
        n = 40 if fast else 200
        ids = greedy(m, [1], n)
        nmatch = next((i for i, (a, b) in enumerate(zip(ids, want_ids)) if a != b), n)
        report("stories260K/%s greedy %d ids" % (f, n), ids == want_ids[:n],
               "first mismatch at %d" % nmatch if ids != want_ids[:n] else "exact")
        if not fast:
            voc = llama2c_vocab(os.path.join(s2, "tok512.bin")) if f.endswith(".bin") \
                else gguf_vocab(os.path.join(s2, f))
            txt = detok(voc, ids)
            report("stories260K/%s greedy 200 text == published run.c text" % f,
                   txt == ref["published"]["expected_text"], "exact" if txt == ref["published"]["expected_text"] else repr(txt))
    # the bin and gguf must agree in full (prefill of the greedy sequence)
    seq = [1] + want_ids[:63]
    a = logits_for(models["stories260K.bin"], seq)
    b = logits_for(models["stories260K.gguf"], seq)
    report("stories260K bin vs gguf logits 64 positions", np.max(np.abs(a - b)) < 1e-9,
           "max|diff|=%.3g" % np.max(np.abs(a - b)))
    # prefill vs incremental decoding consistency
    m = models["stories260K.bin"]
    cache = KVCache(m)
    inc = [forward(m, seq[:10], cache)]
    for t in seq[10:]:
        inc.append(forward(m, [t], cache))
    inc = np.concatenate(inc)
    report("stories260K prefill vs KV-cache decode", np.max(np.abs(inc - a)) < 1e-10,
           "max|diff|=%.3g" % np.max(np.abs(inc - a)))

    t6 = os.path.join(M, "tinystories-656k")
    ref6 = json.load(open(os.path.join(t6, "reference_outputs.json")))
    hf = os.path.join(t6, "hf")
    mh = load_model(hf)
    mh_half = load_hf(hf, keep_half=True)
    cases = ref6["derived_independently_hf_f32"]["cases"]
    for c in cases:
        if "logits_after_BOS" in c:
            lg = logits_for(mh, [1])[0]
            err = np.max(np.abs(lg - np.array(c["logits_after_BOS"])))
            report("tinystories-656k/hf logits after BOS", err < 1e-5, "max|diff|=%.3g" % err)
    seq6 = cases[0]["prompt_ids"] + cases[0]["generated_ids"][:40]
    a = logits_for(mh, seq6)
    b = logits_for(mh_half, seq6)
    report("tinystories-656k/hf permuted-pair vs rotate-half RoPE", np.max(np.abs(a - b)) < 1e-10,
           "max|diff|=%.3g" % np.max(np.abs(a - b)))
    for c in cases:
        n = min(len(c["generated_ids"]), 20 if fast else 60)
        ids = greedy(mh, c["prompt_ids"], n)
        report("tinystories-656k/hf greedy %d ids from %r" % (n, c["prompt"]),
               ids == c["generated_ids"][:n], "exact" if ids == c["generated_ids"][:n] else str(ids))
    mq = load_model(os.path.join(t6, "gguf", "TinyStories-656K-Q8_0.gguf"))
    for c in ref6["derived_independently_q8_0_gguf"]["cases"]:
        ids = greedy(mq, c["prompt_ids"], len(c["generated_ids"]))
        report("tinystories-656k/Q8_0 greedy %d ids from %r" % (len(ids), c["prompt"]),
               ids == c["generated_ids"], "exact" if ids == c["generated_ids"] else str(ids))
    voc = gguf_vocab(os.path.join(t6, "gguf", "TinyStories-656K-Q8_0.gguf"))
    for c in ref6["published_q8_0_gguf"]["cases"]:
        ids = greedy(mq, ref6["derived_independently_q8_0_gguf"]["cases"][0]["prompt_ids"],
                     c["max_new_tokens"])
        # llama.cpp prints generated pieces only (prompt not echoed): no BOS-strip
        txt = detok(voc, ids, prev=None)
        report("tinystories-656k/Q8_0 greedy text == published llama.cpp text (%r)" % c["prompt"],
               txt == c["expected_generated_text"], "exact" if txt == c["expected_generated_text"] else repr(txt))
    # Q8_0 dequantised weights vs f32 safetensors (after permute both are in pair layout)
    dmax = max(np.max(np.abs(mq.layers[l][k] - mh.layers[l][k]))
               for l in range(len(mq.layers)) for k in mq.layers[l])
    dmax = max(dmax, np.max(np.abs(mq.tok_emb - mh.tok_emb)))
    report("tinystories-656k Q8_0 vs f32 weights", dmax < 0.02, "max|diff|=%.3g" % dmax)
    return ok


# ----------------------------------------------------------------------------
# CLI
# ----------------------------------------------------------------------------

def _parse_tokens(s):
    return [int(t) for t in s.replace(" ", "").split(",") if t != ""]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model", nargs="?", help="llama2.c .bin, .gguf or HF directory")
    ap.add_argument("--tokens", help="comma separated token ids")
    ap.add_argument("--out", help="write float64 logits [n, vocab] to this .npy file")
    ap.add_argument("--greedy", type=int, default=0, help="greedy-decode N tokens after --tokens")
    ap.add_argument("--self-check", action="store_true", help="validate against shared reference data")
    ap.add_argument("--fast", action="store_true", help="shorter self-check")
    ap.add_argument("--shared", default=None, help="shared folder (default: autodetect)")
    a = ap.parse_args(argv)
    if a.self_check:
        shared = a.shared or _default_shared()
        if not shared:
            print("cannot find shared/models; pass --shared", file=sys.stderr)
            return 2
        ok = self_check(shared, fast=a.fast)
        print("self-check:", "OK" if ok else "FAILED")
        return 0 if ok else 1
    if not a.model or not a.tokens:
        ap.error("MODEL and --tokens are required (or --self-check)")
    try:
        m = load_model(a.model)
        toks = _parse_tokens(a.tokens)
        if a.greedy:
            ids = greedy(m, toks, a.greedy)
            print(",".join(map(str, ids)))
            return 0
        lg = logits_for(m, toks)
    except RefError as e:
        print("llama_ref: error: %s" % e, file=sys.stderr)
        return 1
    if a.out:
        np.save(a.out, lg)
    else:
        np.set_printoptions(precision=6, suppress=True, linewidth=120)
        for i, row in enumerate(lg):
            print("pos %d argmax %d max %.6f" % (i, int(np.argmax(row)), row.max()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
