#!/usr/bin/env python3
"""Writes and reads Kiln calibration files (the format kiln-calibrate writes,
docs/quantization.md "Calibration file"), from numpy arrays.

A calibration file is safetensors (https://huggingface.co/docs/safetensors:
8-byte little-endian header length, JSON header, raw little-endian data)
with `__metadata__` format = "kiln-calibration", version = "1", model,
text, seed, samples, ctx, tokens and one "input:<W>" = "<tap>" per linear
weight; per tap T with C channels, F32 tensors T.absmax [C] (max_t |x_c|),
T.absmean [C] (mean_t |x_c|) and, for a linear-layer input, T.hessian
[C, C] ((1/N) sum_t x_t x_t^T, accumulated in float64) or, for a pre-RoPE
key tap layers.<l>.key (C = n_kv_heads * head_dim; no "input:" entry),
T.mean [C] ((1/N) sum_t x_t[c]).

Library:
    write_calibration(path, meta, tensors)     tensors: name -> array (F32)
    read_calibration(path) -> (meta, tensors)  tensors as float64
    stats(X) -> (absmax, absmean, hessian)     X: [N, C] activations
    key_stats(X) -> (absmax, absmean, mean)     X: [N, C] pre-RoPE keys

Command line (test helpers):
    calib_file.py capture MODEL -o FILE [--samples N] [--ctx L] [--seed S]
                          [--windows FILE]
        real activation statistics from calib_ref.py (the lead's float64
        reference of kiln-calibrate) over token windows: those of
        --windows (one window per line, ids separated by spaces, as
        `kiln-calibrate --dump-tokens` writes) or N windows of BOS then
        text the model samples itself at temperature 1 with seed S
        (self-generated calibration text, until kiln-calibrate lands);
    calib_file.py random MODEL -o FILE [--seed S] [--tokens N] [--no-keys]
        random activations (correlated channels, a few outliers) for every
        tap, shapes taken from MODEL: for algorithm tests that need a
        well-conditioned, non-diagonal Hessian; random pre-RoPE keys with
        per-channel offsets (a few large ones) for the key taps, drawn from
        a generator of their own, so the linear taps are those of a file
        without keys; --no-keys leaves the key taps out (a file as
        kiln-calibrate wrote before key taps existed);
    calib_file.py identity MODEL -o FILE
        H = I and unit absmax/absmean for every tap (GPTQ then has nothing
        to compensate and must equal RTN), key means 0 (centering is a
        no-op);
    calib_file.py bad KIND IN -o OUT
        a broken copy for error tests (KIND: format, version, notap,
        shape, notensor, truncated; keymean: no layers.0.key.mean;
        keyshape: layers.0.key.mean one channel short).
"""
import argparse
import json
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_ref  # noqa: E402
import calib_ref  # noqa: E402

LINEARS = ("wq", "wk", "wv", "wo", "w1", "w2", "w3")
TAP_OF = {"wq": "attn_in", "wk": "attn_in", "wv": "attn_in", "wo": "attn_out",
          "w1": "ffn_in", "w3": "ffn_in", "w2": "ffn_down_in"}


def write_calibration(path, meta, tensors):
    header = {"__metadata__": {k: str(v) for k, v in meta.items()}}
    blobs, off = [], 0
    for name in sorted(tensors):
        a = np.ascontiguousarray(np.asarray(tensors[name], dtype="<f4"))
        b = a.tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape),
                        "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def read_calibration(path):
    tensors, meta = llama_ref.read_safetensors(path)
    return meta, tensors


def stats(X):
    X = np.asarray(X, dtype=np.float64)
    return (np.abs(X).max(axis=0), np.abs(X).mean(axis=0),
            X.T @ X / X.shape[0])


def key_stats(X):
    X = np.asarray(X, dtype=np.float64)
    return np.abs(X).max(axis=0), np.abs(X).mean(axis=0), X.mean(axis=0)


def tap_tensors(model, taps):
    out = {}
    for name, X in taps.items():
        if calib_ref.is_key_tap(name):
            amax, amean, mean = key_stats(X)
            out[name + ".absmax"], out[name + ".absmean"], out[name + ".mean"] = amax, amean, mean
            continue
        amax, amean, hess = stats(X)
        out[name + ".absmax"], out[name + ".absmean"], out[name + ".hessian"] = amax, amean, hess
    meta = {"format": "kiln-calibration", "version": "1"}
    for l in range(model.cfg["n_layers"]):
        for w in LINEARS:
            meta["input:layers.%d.%s" % (l, w)] = "layers.%d.%s" % (l, TAP_OF[w])
    return meta, out


def sample_windows(model, samples, ctx, seed):
    rng = np.random.default_rng(seed)
    windows = []
    for _ in range(samples):
        toks = [1]
        cache = llama_ref.KVCache(model)
        logits = llama_ref.forward(model, [1], cache)[-1]
        while len(toks) < ctx:
            p = np.exp(logits - logits.max())
            p /= p.sum()
            t = int(rng.choice(len(p), p=p))
            toks.append(t)
            logits = llama_ref.forward(model, [t], cache)[-1]
        windows.append(toks)
    return windows


def random_taps(model, seed, n, keys=True):
    rng = np.random.default_rng(seed)
    c = model.cfg
    dims = {"attn_in": c["dim"], "attn_out": c["dim"], "ffn_in": c["dim"],
            "ffn_down_in": c["hidden_dim"]}
    taps = {}
    for l in range(c["n_layers"]):
        for t, C in dims.items():
            mix = rng.standard_normal((C, C)) / np.sqrt(C) + np.eye(C)
            X = rng.standard_normal((n, C)) @ mix
            X[:, rng.choice(C, size=max(1, C // 16), replace=False)] *= 8.0  # outliers
            taps["layers.%d.%s" % (l, t)] = X
    if not keys:
        return taps
    # Pre-RoPE keys: unit noise around per-channel offsets, a few of them
    # large (as in stories260K). Own generator: the taps above stay those of
    # a file without keys.
    krng = np.random.default_rng([seed, 1])
    kv = c["n_kv_heads"] * (c["dim"] // c["n_heads"])
    for l in range(c["n_layers"]):
        mu = krng.standard_normal(kv) * 0.5
        big = krng.choice(kv, size=max(1, kv // 16), replace=False)
        mu[big] = krng.choice([-1.0, 1.0], size=big.size) * krng.uniform(5.0, 15.0, size=big.size)
        taps["layers.%d.key" % l] = mu + krng.standard_normal((n, kv))
    return taps


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["capture", "random", "identity", "bad"])
    ap.add_argument("model", help="model (capture/random) or kind (bad)")
    ap.add_argument("input", nargs="?", help="bad: the file to break")
    ap.add_argument("-o", required=True)
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--ctx", type=int, default=128)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--windows")
    ap.add_argument("--no-keys", action="store_true")
    a = ap.parse_args(argv)
    if a.mode == "bad":
        meta, tensors = read_calibration(a.input)
        kind = a.model
        if kind == "format":
            meta["format"] = "something-else"
        elif kind == "version":
            meta["version"] = "99"
        elif kind == "notap":
            meta = {k: v for k, v in meta.items() if k != "input:layers.0.wq"}
        elif kind == "shape":
            tensors["layers.0.attn_in.hessian"] = tensors["layers.0.attn_in.hessian"][:-1, :-1]
            tensors["layers.0.attn_in.absmean"] = tensors["layers.0.attn_in.absmean"][:-1]
            tensors["layers.0.attn_in.absmax"] = tensors["layers.0.attn_in.absmax"][:-1]
        elif kind == "notensor":
            for s in ("absmax", "absmean", "hessian"):
                tensors.pop("layers.0.attn_in." + s)
        elif kind == "keymean":
            tensors.pop("layers.0.key.mean")
        elif kind == "keyshape":
            tensors["layers.0.key.mean"] = tensors["layers.0.key.mean"][:-1]
        if kind == "truncated":
            raw = open(a.input, "rb").read()
            open(a.o, "wb").write(raw[:len(raw) // 2])
        else:
            write_calibration(a.o, meta, tensors)
        return 0
    model = llama_ref.load_model(a.model)
    if a.mode == "capture":
        if a.windows:
            windows = calib_ref.read_windows(a.windows)
        else:
            windows = sample_windows(model, a.samples, min(a.ctx, model.cfg.get("max_seq_len", a.ctx)), a.seed)
        tensors, meta = calib_ref.statistics(model, windows)
        meta.update({"model": a.model, "text": a.windows or "self-generated (seed %d)" % a.seed,
                     "seed": a.seed, "samples": len(windows), "ctx": len(windows[0])})
        taps = {k[:-len(".absmax")] for k in tensors if k.endswith(".absmax")}
    else:
        taps = random_taps(model, a.seed, a.tokens, keys=not a.no_keys)
        meta, tensors = tap_tensors(model, taps)
        if a.mode == "identity":
            for k in tensors:
                C = tensors[k].shape[0]
                tensors[k] = (np.eye(C) if k.endswith(".hessian") else
                              np.zeros(C) if k.endswith(".mean") else np.ones(C))
        meta.update({"model": a.model, "text": "random", "seed": a.seed,
                     "samples": 1, "ctx": a.tokens, "tokens": a.tokens})
    write_calibration(a.o, meta, tensors)
    print("calib_file: wrote %s (%d taps, %s tokens)" % (a.o, len(taps), meta["tokens"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
