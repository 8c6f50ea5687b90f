#!/usr/bin/env python3
"""Independent check of Kiln's W8A16 weights (symmetric per-output-channel
int8, round to nearest) against numpy, from the original checkpoint.

usage: quant_ref.py --model MODEL --artifact DIR

For every `<weight>.qweight` / `<weight>.scales` pair in DIR/manifest.json,
quantizes the original float weight (read by llama_ref's own loaders, not
Kiln's) with the textbook formula, in float32 as the spec says:

    scale[o] = max_i |w[o, i]| / 127          q[o, i] = round(w[o, i] / scale[o])

(round half away from zero, clamped to [-127, 127]) and requires the
artifact's bytes to be identical. It also checks the defining property of
round-to-nearest: |w - scale * q| <= scale / 2 for every weight. Prints one
summary line and PASS, or exits 1 naming the first mismatching tensor.
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--artifact", required=True)
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
    print("quant_ref: %d quantized tensors identical to numpy; max |w - scale*q| / (scale/2) = %.4f"
          % (checked, worst))
    print("quant_ref: PASS")


if __name__ == "__main__":
    main()
