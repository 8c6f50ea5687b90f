#!/usr/bin/env python3
"""Checks a kiln-calibrate file against the calibration file contract
(docs/quantization.md, "Calibration") without a reference model:

  check_calib_file.py FILE --layers L --dim D --hidden F --kv-dim K
                      [--samples N --ctx C --seed S]

* safetensors layout: u64 LE header length, JSON header (8-byte aligned),
  F32 tensors whose data_offsets tile the data section exactly;
* metadata: format, version, model, text, seed, samples, ctx, tokens
  (= samples * ctx), and "input:layers.i.<w>" = the contract's tap for
  every linear weight wq wk wv wo w1 w2 w3 of every layer, nothing else;
* tensors: <tap>.absmax [C], .absmean [C], .hessian [C, C] for the 4
  linear-input taps of every layer (C = dim, except ffn_down_in: hidden),
  and layers.i.key.absmax, .absmean, .mean [K] (the pre-RoPE key, K =
  n_kv_heads * head_dim; no Hessian), and only those;
* consistency of the statistics: finite, hessian symmetric,
  0 <= absmean <= absmax, diag(H) = mean(x^2) >= absmean^2 (Jensen)
  and <= absmax^2, and |mean| <= absmean for the keys.
Exit 1 with one message per problem.
"""

import argparse
import json
import struct
import sys

import numpy as np

TAP_OF = {"wq": "attn_in", "wk": "attn_in", "wv": "attn_in", "wo": "attn_out",
          "w1": "ffn_in", "w3": "ffn_in", "w2": "ffn_down_in"}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--layers", type=int, required=True)
    ap.add_argument("--dim", type=int, required=True)
    ap.add_argument("--hidden", type=int, required=True)
    ap.add_argument("--kv-dim", type=int, required=True,
                    help="n_kv_heads * head_dim (width of the key taps)")
    ap.add_argument("--samples", type=int)
    ap.add_argument("--ctx", type=int)
    ap.add_argument("--seed")
    args = ap.parse_args()
    errors = []
    blob = open(args.file, "rb").read()
    (n,) = struct.unpack("<Q", blob[:8])
    if n % 8:
        errors.append("header length %d is not a multiple of 8" % n)
    header = json.loads(blob[8:8 + n])
    data = blob[8 + n:]
    meta = header.pop("__metadata__", {})
    for k, v in meta.items():
        if not isinstance(v, str):
            errors.append("metadata %s is not a string" % k)
    for k in ["format", "version", "model", "text", "seed", "samples", "ctx",
              "tokens"]:
        if k not in meta:
            errors.append("metadata %s missing" % k)
    if meta.get("format") != "kiln-calibration" or meta.get("version") != "1":
        errors.append("format/version %r/%r" % (meta.get("format"), meta.get("version")))
    if int(meta.get("tokens", -1)) != int(meta.get("samples", 0)) * int(meta.get("ctx", 0)):
        errors.append("tokens %s != samples %s * ctx %s" % (
            meta.get("tokens"), meta.get("samples"), meta.get("ctx")))
    for key, want in (("samples", args.samples), ("ctx", args.ctx), ("seed", args.seed)):
        if want is not None and meta.get(key) != str(want):
            errors.append("metadata %s = %r, expected %r" % (key, meta.get(key), str(want)))
    want_inputs = {}
    want_tensors = {}
    for i in range(args.layers):
        for w, tap in TAP_OF.items():
            want_inputs["input:layers.%d.%s" % (i, w)] = "layers.%d.%s" % (i, tap)
        for tap, c in (("attn_in", args.dim), ("attn_out", args.dim),
                       ("ffn_in", args.dim), ("ffn_down_in", args.hidden)):
            t = "layers.%d.%s" % (i, tap)
            want_tensors[t + ".absmax"] = [c]
            want_tensors[t + ".absmean"] = [c]
            want_tensors[t + ".hessian"] = [c, c]
        for s in ("absmax", "absmean", "mean"):
            want_tensors["layers.%d.key.%s" % (i, s)] = [args.kv_dim]
    got_inputs = {k: v for k, v in meta.items() if k.startswith("input:")}
    if got_inputs != want_inputs:
        errors.append("input: metadata differs: missing %s, extra %s, wrong %s" % (
            sorted(set(want_inputs) - set(got_inputs)),
            sorted(set(got_inputs) - set(want_inputs)),
            sorted(k for k in want_inputs if k in got_inputs and got_inputs[k] != want_inputs[k])))
    if set(header) != set(want_tensors):
        errors.append("tensors differ: missing %s, extra %s" % (
            sorted(set(want_tensors) - set(header)), sorted(set(header) - set(want_tensors))))
    spans = []
    tensors = {}
    for name, info in header.items():
        if info["dtype"] != "F32":
            errors.append("%s: dtype %s" % (name, info["dtype"]))
        if name in want_tensors and info["shape"] != want_tensors[name]:
            errors.append("%s: shape %s, expected %s" % (name, info["shape"], want_tensors[name]))
        b, e = info["data_offsets"]
        spans.append((b, e))
        if e - b != 4 * int(np.prod(info["shape"])):
            errors.append("%s: %d bytes for shape %s" % (name, e - b, info["shape"]))
        tensors[name] = np.frombuffer(data[b:e], dtype="<f4").reshape(info["shape"])
    spans.sort()
    pos = 0
    for b, e in spans:
        if b != pos:
            errors.append("data_offsets leave a gap or overlap at byte %d" % pos)
        pos = e
    if pos != len(data):
        errors.append("data section is %d bytes, tensors cover %d" % (len(data), pos))
    for name in sorted(tensors):
        if not name.endswith(".hessian"):
            continue
        t = name[:-len(".hessian")]
        h, amax, amean = tensors[name], tensors.get(t + ".absmax"), tensors.get(t + ".absmean")
        if amax is None or amean is None:
            continue
        if not (np.all(np.isfinite(h)) and np.all(np.isfinite(amax)) and np.all(np.isfinite(amean))):
            errors.append("%s: non-finite statistics" % t)
            continue
        if not np.array_equal(h, h.T):
            errors.append("%s: hessian is not symmetric" % t)
        if np.any(amean < 0) or np.any(amean > amax * (1 + 1e-6)):
            errors.append("%s: absmean outside [0, absmax]" % t)
        d = np.diag(h).astype(np.float64)
        if np.any(d < amean.astype(np.float64) ** 2 * (1 - 1e-5)):
            errors.append("%s: diag(H) < absmean^2" % t)
        if np.any(d > amax.astype(np.float64) ** 2 * (1 + 1e-5)):
            errors.append("%s: diag(H) > absmax^2" % t)
    for name in sorted(tensors):
        if not name.endswith(".key.mean"):
            continue
        t = name[:-len(".mean")]
        mean, amax, amean = tensors[name], tensors.get(t + ".absmax"), tensors.get(t + ".absmean")
        if amax is None or amean is None:
            continue
        if not (np.all(np.isfinite(mean)) and np.all(np.isfinite(amax)) and np.all(np.isfinite(amean))):
            errors.append("%s: non-finite statistics" % t)
            continue
        if np.any(amean < 0) or np.any(amean > amax * (1 + 1e-6)):
            errors.append("%s: absmean outside [0, absmax]" % t)
        if np.any(np.abs(mean) > amean * (1 + 1e-6)):
            errors.append("%s: |mean| > absmean" % t)
    if errors:
        sys.stderr.write("\n".join("%s: %s" % (args.file, e) for e in errors) + "\n")
        sys.exit(1)
    print("check_calib_file: %s ok (%d tensors, %d inputs, %s positions)" % (
        args.file, len(tensors), len(got_inputs), meta.get("tokens")))


if __name__ == "__main__":
    main()
