#!/usr/bin/env python3
"""Logits of a quantized Kiln artifact against a float64 numpy forward pass
over the *dequantized* weights it stores, so the check isolates Kiln's
quantized kernels and storage layout from the (expected) quantization error.

usage: quant_logits.py --model MODEL --artifact DIR --tokens 1,403,...
                       --kiln-logits FILE [--group-size G] [--tol 1e-4]

The model's other weights come from MODEL through llama_ref's own loaders;
each `layers.i.<w>.qweight` in DIR replaces weight <w> of layer i with
scales * q (8-bit: [out] scales, q int8) or scales[g] * (q - zeros[g])
(4-bit: two values per byte, element 2j in the low nibble, groups of G).
FILE is kiln-run --dump-logits output (rows for positions k-1..n-1,
k = (n + 1) // 2). Exits 1 if any row's max|kiln - ref| / max|ref| > tol.
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_ref  # noqa: E402


def dequantized(tensors, blob, base, rows, cols, group):
    t = tensors[base + "qweight"]
    if base + "zeros" not in tensors:
        q = np.frombuffer(blob, np.int8, rows * cols, t["offset"]).reshape(rows, cols)
        s = np.frombuffer(blob, "<f4", rows, tensors[base + "scales"]["offset"])
        return s.astype(np.float64)[:, None] * q
    groups = -(-cols // group)
    packed = np.frombuffer(blob, np.uint8, t["bytes"], t["offset"]).reshape(rows, -1)
    q = np.zeros((rows, packed.shape[1] * 2), np.int64)
    q[:, 0::2], q[:, 1::2] = packed & 15, packed >> 4
    q = q[:, :cols]
    s = np.frombuffer(blob, "<f4", rows * groups, tensors[base + "scales"]["offset"]).reshape(rows, groups)
    z = np.frombuffer(blob, np.uint8, rows * groups, tensors[base + "zeros"]["offset"]).reshape(rows, groups)
    g = np.arange(cols) // group
    return s[:, g].astype(np.float64) * (q - z[:, g].astype(np.int64))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--artifact", required=True)
    ap.add_argument("--tokens", required=True)
    ap.add_argument("--kiln-logits", required=True)
    ap.add_argument("--group-size", type=int, default=128)
    ap.add_argument("--tol", type=float, default=1e-4)
    a = ap.parse_args()
    model = llama_ref.load_model(a.model)
    manifest = json.load(open(os.path.join(a.artifact, "manifest.json")))
    blob = open(os.path.join(a.artifact, manifest["weights"]["file"]), "rb").read()
    tensors = {t["name"]: t for t in manifest["weights"]["tensors"]}
    replaced = 0
    for i, layer in enumerate(model.layers):
        for key in ("wq", "wk", "wv", "wo", "w1", "w2", "w3"):
            base = "layers.%d.%s." % (i, key)
            if base + "qweight" in tensors:
                rows, cols = layer[key].shape
                layer[key] = dequantized(tensors, blob, base, rows, cols, a.group_size)
                replaced += 1
    if not replaced:
        sys.exit("quant_logits: no quantized weights in %s" % a.artifact)
    tokens = [int(t) for t in a.tokens.split(",")]
    ref = np.asarray(llama_ref.forward(model, tokens))
    n, k = len(tokens), (len(tokens) + 1) // 2
    got = np.fromfile(a.kiln_logits, "<f4")
    if got.size != (n - k + 1) * ref.shape[-1]:
        sys.exit("quant_logits: %s has %d floats, expected %d rows of %d"
                 % (a.kiln_logits, got.size, n - k + 1, ref.shape[-1]))
    got = got.reshape(n - k + 1, -1)
    worst = max(float(np.abs(got[r] - ref[p]).max() / np.abs(ref[p]).max())
                for r, p in enumerate(range(k - 1, n)))
    print("quant_logits: %d dequantized weights, %d rows, max rel_err %.3e, tol %.1e"
          % (replaced, n - k + 1, worst, a.tol))
    if not np.isfinite(worst) or worst > a.tol:
        sys.exit("quant_logits: FAIL")
    print("quant_logits: PASS")


if __name__ == "__main__":
    main()
