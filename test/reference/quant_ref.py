#!/usr/bin/env python3
"""Independent check of Kiln's quantized weights against numpy, from the
original checkpoint: W8A16 (symmetric per-output-channel int8) and W4A16 RTN
(asymmetric 4-bit groups, GPTQ's quantizer without error compensation).

usage: quant_ref.py --model MODEL --artifact DIR [--group-size G]

For every `<weight>.qweight` / `<weight>.scales` pair in DIR/manifest.json,
quantizes the original float weight (read by llama_ref's own loaders, not
Kiln's) with the textbook formula, in float32 as the spec says:

    scale[o] = max_i |w[o, i]| / 127          q[o, i] = round(w[o, i] / scale[o])

(round half away from zero, clamped to [-127, 127]) and requires the
artifact's bytes to be identical. It also checks the defining property of
round-to-nearest: |w - scale * q| <= scale / 2 for every weight.

For 4-bit weights (a `<weight>.zeros` tensor exists), per group of G inputs
(the last one shorter when G does not divide the row): lo = min(w, 0),
hi = max(w, 0) (both 0: -1, 1), scale = (hi - lo) / 15,
zero = round(-lo / scale), q = clamp(round(w / scale) + zero, 0, 15), with
round-half-to-even (torch.round, as GPTQ's Quantizer); q packed two per byte,
element 2j in the low nibble. Requires identical bytes and
|w - scale * (q - zero)| <= scale / 2 where q was not clamped.

Prints one summary line and PASS, or exits 1 naming the first mismatching
tensor.
"""
import argparse
import json
import os
import re
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_ref  # noqa: E402

KEYS = {"wq": "wq", "wk": "wk", "wv": "wv", "wo": "wo", "w1": "w1", "w2": "w2", "w3": "w3"}


def quantize(w):
    w = w.astype(np.float32)
    scale = (np.abs(w).max(axis=1) / np.float32(127)).astype(np.float32)
    safe = np.where(scale > 0, scale, np.float32(1))
    x = (w / safe[:, None]).astype(np.float32).astype(np.float64)
    q = np.sign(x) * np.floor(np.abs(x) + 0.5)
    q = np.where(scale[:, None] > 0, q, 0)
    return np.clip(q, -127, 127).astype(np.int8), scale


def quantize4(w, group):
    w = w.astype(np.float32)
    rows, cols = w.shape
    groups = -(-cols // group)
    q = np.zeros((rows, cols), np.int64)
    scales = np.zeros((rows, groups), np.float32)
    zeros = np.zeros((rows, groups), np.int64)
    for g in range(groups):
        blk = w[:, g * group:(g + 1) * group]
        lo = np.minimum(blk.min(axis=1), np.float32(0))
        hi = np.maximum(blk.max(axis=1), np.float32(0))
        both = (lo == 0) & (hi == 0)
        lo = np.where(both, np.float32(-1), lo).astype(np.float32)
        hi = np.where(both, np.float32(1), hi).astype(np.float32)
        scale = ((hi - lo) / np.float32(15)).astype(np.float32)
        zero = np.round((-lo / scale).astype(np.float32))
        qq = np.round((blk / scale[:, None]).astype(np.float32)) + zero[:, None]
        q[:, g * group:(g + 1) * group] = np.clip(qq, 0, 15)
        scales[:, g], zeros[:, g] = scale, zero
    padded = np.zeros((rows, cols + cols % 2), np.int64)
    padded[:, :cols] = q
    packed = (padded[:, 0::2] | (padded[:, 1::2] << 4)).astype(np.uint8)
    return packed, scales, zeros.astype(np.uint8), q


def check4(name, w, tensors, blob, group):
    base = name[:-len("qweight")]
    packed_ref, s_ref, z_ref, q = quantize4(w, group)
    t, st, zt = tensors[name], tensors[base + "scales"], tensors[base + "zeros"]
    packed = np.frombuffer(blob, np.uint8, packed_ref.size, t["offset"]).reshape(packed_ref.shape)
    s = np.frombuffer(blob, "<f4", s_ref.size, st["offset"]).reshape(s_ref.shape)
    z = np.frombuffer(blob, np.uint8, z_ref.size, zt["offset"]).reshape(z_ref.shape)
    for what, got, want in (("scales", s, s_ref), ("zeros", z, z_ref), ("qweight", packed, packed_ref)):
        if not np.array_equal(got, want):
            idx = tuple(np.argwhere(got != want)[0])
            sys.exit("quant_ref: %s: %s%r = %r, numpy %r" % (name, what, idx, got[idx], want[idx]))
    cols = w.shape[1]
    gidx = np.arange(cols) // group
    deq = s[:, gidx] * (q - z[:, gidx].astype(np.int64))
    err = np.abs(w.astype(np.float32) - deq)
    inside = (q > 0) & (q < 15)
    bound = s[:, gidx] / 2 * (1 + 1e-4) + 1e-30
    worst = float((err / bound)[inside].max()) if inside.any() else 0.0
    if worst > 1.0:
        sys.exit("quant_ref: %s: |w - dequant| exceeds scale/2" % name)
    return worst


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--artifact", required=True)
    ap.add_argument("--group-size", type=int, default=128)
    a = ap.parse_args()
    model = llama_ref.load_model(a.model)
    manifest = json.load(open(os.path.join(a.artifact, "manifest.json")))
    blob = open(os.path.join(a.artifact, manifest["weights"]["file"]), "rb").read()
    tensors = {t["name"]: t for t in manifest["weights"]["tensors"]}
    checked, worst = 0, 0.0
    for name, t in sorted(tensors.items()):
        m = re.fullmatch(r"layers\.(\d+)\.(\w+)\.qweight", name)
        if not m:
            continue
        layer, key = int(m.group(1)), m.group(2)
        w = model.layers[layer][KEYS[key]]
        if name[:-len("qweight")] + "zeros" in tensors:
            worst = max(worst, check4(name, w, tensors, blob, a.group_size))
            checked += 1
            continue
        q_ref, s_ref = quantize(w)
        s_t = tensors[name[:-len("qweight")] + "scales"]
        q = np.frombuffer(blob, np.int8, q_ref.size, t["offset"]).reshape(q_ref.shape)
        s = np.frombuffer(blob, "<f4", s_ref.size, s_t["offset"])
        if t["dtype"] != "i8" or s_t["dtype"] != "f32":
            sys.exit("quant_ref: %s: dtypes %s/%s, expected i8/f32" % (name, t["dtype"], s_t["dtype"]))
        if not np.array_equal(s, s_ref):
            i = int(np.argmax(s != s_ref))
            sys.exit("quant_ref: %s: scale[%d] = %r, numpy %r" % (name, i, s[i], s_ref[i]))
        if not np.array_equal(q, q_ref):
            o, i = np.argwhere(q != q_ref)[0]
            sys.exit("quant_ref: %s: q[%d, %d] = %d, numpy %d" % (name, o, i, q[o, i], q_ref[o, i]))
        err = np.abs(w.astype(np.float32) - s[:, None] * q.astype(np.float32))
        bound = s[:, None] / 2 * (1 + 1e-5) + 1e-30
        worst = max(worst, float((err / bound).max()))
        if (err > bound).any():
            sys.exit("quant_ref: %s: |w - scale*q| exceeds scale/2" % name)
        checked += 1
    if checked == 0:
        sys.exit("quant_ref: no quantized tensors in %s" % a.artifact)
    print("quant_ref: %d quantized tensors identical to numpy; max |w - dequant(q)| / (scale/2) = %.4f"
          % (checked, worst))
    print("quant_ref: PASS")


if __name__ == "__main__":
    main()
