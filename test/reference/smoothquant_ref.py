#!/usr/bin/env python3
"""Independent numpy reference of SmoothQuant (Xiao et al. 2023, "SmoothQuant:
Accurate and Efficient Post-Training Quantization for Large Language
Models", eq. 4) and the checks of Kiln's `--quant=smoothquant`.

For each group of linears sharing one input (as AWQ: wq/wk/wv, wo, w1/w3,
w2 of every layer):

    s_j = max|X_j|^alpha / max(max|W_j|, 1e-5)^(1 - alpha),  s_j >= 1e-5
    (max|X_j| = the tap's absmax; max|W_j| over column j of all the group's
    weights; channels with absmax 0 keep s_j = 1; under grouped-query
    attention the query heads that read one value head share s: max over
    them of both statistics)
    W <- W diag(s);  the producer (RMSNorm weight / rows of w3 / rows of wv)
    is multiplied by 1/s.

W8A8: int8 weights, symmetric per output channel (quant_ref.quantize);
activations int8 per token (dynamic) or per tensor with the static scale
act_scale = max_j (absmax_j / s_j) / 127.

usage: smoothquant_ref.py --model M --calibration C --artifact DIR
                          [--alpha 0.5] [--kiln-ir FILE]
  requires the artifact's RMSNorm weights to equal the reference's folded
  ones to 1e-6 relative and every int8 weight tensor's codes to equal
  quantize(W diag(s)) except rare 1-step differences (<= 0.5%, float32
  near-ties) with scales to 1e-5; with --kiln-ir (`--emit=kiln --fuse=none` output of
  the same compile, static act-scales) every kiln.quantized_linear's
  act_scale must equal the reference's to 1e-5.
"""
import argparse
import json
import os
import re
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import awq_ref  # noqa: E402
import calib_file  # noqa: E402
import llama_ref  # noqa: E402
import quant_ref  # noqa: E402


def smooth(model, meta, calib, alpha):
    layers = [{k: v.astype(np.float32) for k, v in L.items()} for L in model.layers]
    act_scales = {}
    for l, L in enumerate(layers):
        for tap_sfx, names, prod, kind in awq_ref.layer_groups(model):
            tap = "layers.%d.%s" % (l, tap_sfx)
            C = L[names[0]].shape[1]
            tie, ntied = awq_ref.tie_map(model, kind, C)
            xmax = np.zeros(ntied)
            np.maximum.at(xmax, tie, calib[tap + ".absmax"])
            wmax = np.zeros(ntied)
            for n in names:
                np.maximum.at(wmax, tie, np.abs(L[n].astype(np.float64)).max(axis=0))
            wmax = np.maximum(wmax, 1e-5)
            with np.errstate(divide="ignore"):
                s = np.where(xmax > 0, xmax ** alpha / wmax ** (1 - alpha), 1.0)
            s = np.maximum(s, 1e-5)
            sc = s[tie].astype(np.float32)
            inv = (np.float32(1) / s.astype(np.float32)).astype(np.float32)
            for n in names:
                L[n] = (L[n] * sc[None, :]).astype(np.float32)
                act_scales["layers.%d.%s" % (l, n)] = float(
                    np.max(calib[tap + ".absmax"] / sc.astype(np.float64)) / 127)
            if kind == "vector":
                L[prod] = (L[prod] * inv).astype(np.float32)
            else:
                L[prod] = (L[prod] * inv[:, None]).astype(np.float32)
    return layers, act_scales


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--calibration", required=True)
    ap.add_argument("--artifact", required=True)
    ap.add_argument("--alpha", type=float, default=0.5)
    ap.add_argument("--kiln-ir")
    a = ap.parse_args(argv)
    model = llama_ref.load_model(a.model)
    meta, calib = calib_file.read_calibration(a.calibration)
    layers, act_scales = smooth(model, meta, calib, a.alpha)
    man = json.load(open(os.path.join(a.artifact, "manifest.json")))
    blob = np.fromfile(os.path.join(a.artifact, "weights.bin"), dtype=np.uint8)
    tensors = {x["name"]: x for x in man["weights"]["tensors"]}

    def get(name, dt):
        x = tensors[name]
        return blob[x["offset"]:x["offset"] + x["bytes"]].view(dt).reshape(x["shape"])
    ok, worst, n = True, 0.0, 0
    for l, L in enumerate(layers):
        for k, kiln in (("attn_norm", "attention_norm"), ("ffn_norm", "ffn_norm")):
            got = get("layers.%d.%s" % (l, kiln), np.float32)
            if not np.allclose(got, L[k], rtol=1e-6, atol=0):
                print("layers.%d.%s: FAIL folded norm differs" % (l, kiln))
                ok = False
        for k in calib_file.LINEARS:
            name = "layers.%d.%s" % (l, k)
            q_ref, s_ref = quant_ref.quantize(L[k])
            q = get(name + ".qweight", np.int8).astype(np.int64)
            s = get(name + ".scales", np.float32)
            diff = np.abs(q - q_ref.astype(np.int64))
            frac = float((diff > 0).mean())
            worst = max(worst, frac)
            n += 1
            if diff.max() > 1 or frac > 0.005 or not np.allclose(s, s_ref, rtol=1e-5, atol=0):
                print("%s: FAIL int8 codes differ in %.3f%% (max %d)" % (name, 100 * frac, diff.max()))
                ok = False
    if a.kiln_ir:
        refs, checked = {}, 0
        for line in open(a.kiln_ir):
            m = re.match(r"\s*(%\w+) = kiln\.weight_ref @([\w.]+)\.qweight", line)
            if m:
                refs[m.group(1)] = m.group(2)
            m = re.search(r"kiln\.quantized_linear %\w+, (%\w+), .*act_scale = ([-+0-9.eE]+) : f32", line)
            if m:
                name = refs[m.group(1)]
                got, want = float(m.group(2)), act_scales[name]
                checked += 1
                if abs(got - want) > 1e-5 * want:
                    print("%s: FAIL act_scale %.8g, reference %.8g" % (name, got, want))
                    ok = False
        print("smoothquant_ref: %d static act_scale values checked" % checked)
        ok = ok and checked > 0
    print("smoothquant_ref: %d int8 weights, codes differ in at most %.4f%%" % (n, 100 * worst))
    print("smoothquant_ref: PASS" if ok else "smoothquant_ref: FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
