#!/usr/bin/env python3
"""Independent numpy reference of GPTQ (Frantar et al. 2022, "GPTQ: Accurate
Post-Training Quantization for Generative Pre-trained Transformers",
Algorithm 1) with GPTQ's asymmetric 4-bit group quantizer, and the check of
Kiln's GPTQ weights against it.

Algorithm (written from the paper, not from Kiln's C++; the C++ uses lazy
batch updates and a Cholesky-based inverse, this file the plain column
loop with numpy's inverse, so the two agree up to float64 rounding):

    H    = hessian; dead inputs (H_ii = 0): H_ii = 1, W[:, i] = 0
    act-order: columns visited in descending diag(H) (stable), and every
         group's scale/zero computed from the original weights first
         ("static groups"; groups stay contiguous in the original order)
    H   += damp * mean(diag H) * I
    U    = upper Cholesky factor of H^-1   (H^-1 = U^T U)
    for each column i (in visiting order):
        group start (no act-order): scale/zero from the current W[:, group]
        q_i  = clamp(round(w_i / scale) + zero, 0, 15)
        e    = (w_i - scale * (q_i - zero)) / U_ii
        W[:, later] -= e U[i, later]

Quantizer (GPTQ's Quantizer, sym=False, maxq=15), float32: lo = min(w, 0),
hi = max(w, 0) (both 0: -1, 1), scale = (hi - lo)/15, zero = round(-lo/scale),
round half to even.

usage: gptq_ref.py --model MODEL --calibration FILE --artifact DIR
                   --group-size G [--act-order] [--rtn-artifact DIR]
                   [--damp 0.01]

For each `<w>.qweight` in DIR/manifest.json: runs the reference on the
original weight (llama_ref's loaders) with the Hessian the calibration file
names for it, and requires
  * the 4-bit codes to agree except for rare 1-step differences (at most
    1% of a tensor's codes, none larger than one step; see
    docs/quantization.md: near-ties of round() flip under float64 rounding
    differences of ~1e-13 and the error feedback carries a flip to later
    columns of its row), scales within 1e-4 relative, zero points within 1;
  * Kiln's output error trace(dW H dW^T) within 1% of the reference's;
  * Kiln's error <= RTN's (computed here, and read from --rtn-artifact if
    given) for every weight.
Prints one line per weight and PASS, or exits 1.
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import calib_file  # noqa: E402
import llama_ref  # noqa: E402


def find_params(values):
    """values: [rows, n] -> (scale, zero) float32 [rows]."""
    v = np.asarray(values, dtype=np.float32)
    lo = np.minimum(v.min(axis=1), np.float32(0))
    hi = np.maximum(v.max(axis=1), np.float32(0))
    both = (lo == 0) & (hi == 0)
    lo = np.where(both, np.float32(-1), lo).astype(np.float32)
    hi = np.where(both, np.float32(1), hi).astype(np.float32)
    scale = ((hi - lo) / np.float32(15)).astype(np.float32)
    zero = np.round((-lo / scale).astype(np.float32)).astype(np.float32)
    return scale, zero


def quant(w, scale, zero):
    w = np.asarray(w, dtype=np.float32)
    return np.clip(np.round((w / scale).astype(np.float32)) + zero, 0, 15).astype(np.float32)


def dequant(q, scale, zero):
    return (scale * (q - zero)).astype(np.float32)


def rtn(W, group):
    W = np.asarray(W, dtype=np.float32)
    rows, cols = W.shape
    G = -(-cols // group)
    Q = np.zeros((rows, cols), np.float32)
    S = np.zeros((rows, G), np.float32)
    Z = np.zeros((rows, G), np.float32)
    for g in range(G):
        sl = slice(g * group, min(cols, (g + 1) * group))
        S[:, g], Z[:, g] = find_params(W[:, sl])
        Q[:, sl] = quant(W[:, sl], S[:, g:g + 1], Z[:, g:g + 1])
    return Q, S, Z


def gptq(W, H, group, act_order=False, damp=0.01):
    """Returns codes Q [rows, cols], scales and zeros [rows, groups]."""
    W = np.array(W, dtype=np.float64)
    H = np.array(H, dtype=np.float64)
    rows, cols = W.shape
    G = -(-cols // group)
    dead = np.diag(H) == 0
    H[dead, dead] = 1.0
    W[:, dead] = 0.0
    S = np.zeros((rows, G), np.float32)
    Z = np.zeros((rows, G), np.float32)
    if act_order:
        for g in range(G):
            sl = slice(g * group, min(cols, (g + 1) * group))
            S[:, g], Z[:, g] = find_params(W[:, sl])
        perm = np.argsort(-np.diag(H), kind="stable")
    else:
        perm = np.arange(cols)
    W = W[:, perm]
    H = H[perm][:, perm]
    H[np.diag_indices(cols)] += damp * np.mean(np.diag(H))
    U = np.linalg.cholesky(np.linalg.inv(H)).T
    Q = np.zeros((rows, cols), np.float32)
    for i in range(cols):
        orig = perm[i]
        g = orig // group
        if not act_order and i % group == 0:
            S[:, g], Z[:, g] = find_params(W[:, i:min(cols, i + group)])
        q = quant(W[:, i], S[:, g], Z[:, g])
        Q[:, orig] = q
        e = (W[:, i] - dequant(q, S[:, g], Z[:, g]).astype(np.float64)) / U[i, i]
        W[:, i + 1:] -= np.outer(e, U[i, i + 1:])
    return Q, S, Z


def expand(Q, S, Z, group):
    cols = Q.shape[1]
    idx = np.arange(cols) // group
    return dequant(Q, S[:, idx], Z[:, idx])


def output_error(W, Wq, H):
    d = np.asarray(W, np.float64) - np.asarray(Wq, np.float64)
    return float(np.einsum("ri,ij,rj->", d, H, d))


def read_artifact4(art, base):
    man = json.load(open(os.path.join(art, "manifest.json")))
    blob = np.fromfile(os.path.join(art, "weights.bin"), dtype=np.uint8)
    t = {x["name"]: x for x in man["weights"]["tensors"]}

    def get(name, dt):
        x = t[name]
        return blob[x["offset"]:x["offset"] + x["bytes"]].view(dt).reshape(x["shape"])
    packed = get(base + ".qweight", np.uint8)
    S = get(base + ".scales", np.float32)
    Z = get(base + ".zeros", np.uint8).astype(np.float32)
    Q = np.empty((packed.shape[0], packed.shape[1] * 2), np.float32)
    Q[:, 0::2] = packed & 15
    Q[:, 1::2] = packed >> 4
    return Q, S, Z


def original_weights(model):
    out = {}
    for l, L in enumerate(model.layers):
        for k in calib_file.LINEARS:
            out["layers.%d.%s" % (l, k)] = L[k].astype(np.float32)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--calibration", required=True)
    ap.add_argument("--artifact", required=True)
    ap.add_argument("--rtn-artifact")
    ap.add_argument("--group-size", type=int, default=128)
    ap.add_argument("--act-order", action="store_true")
    ap.add_argument("--damp", type=float, default=0.01)
    a = ap.parse_args(argv)
    model = llama_ref.load_model(a.model)
    meta, calib = calib_file.read_calibration(a.calibration)
    weights = original_weights(model)
    man = json.load(open(os.path.join(a.artifact, "manifest.json")))
    names = [x["name"][:-len(".qweight")] for x in man["weights"]["tensors"]
             if x["name"].endswith(".qweight")]
    ok, worst_frac, n = True, 0.0, 0
    for name in names:
        W = weights[name]
        H = calib[meta["input:" + name] + ".hessian"]
        cols = W.shape[1]
        Qr, Sr, Zr = gptq(W, H, a.group_size, a.act_order, a.damp)
        Qk, Sk, Zk = read_artifact4(a.artifact, name)
        Qk = Qk[:, :cols]
        diff = np.abs(Qk - Qr)
        frac = float((diff > 0).mean())
        worst_frac = max(worst_frac, frac)
        err_k = output_error(W, expand(Qk, Sk, Zk, a.group_size), H)
        err_r = output_error(W, expand(Qr, Sr, Zr, a.group_size), H)
        err_rtn = output_error(W, expand(*rtn(W, a.group_size), a.group_size), H)
        line = "%s: codes differing %.4f%%, error kiln %.6g ref %.6g rtn %.6g" % (
            name, 100 * frac, err_k, err_r, err_rtn)
        bad = []
        if diff.max() > 1 or frac > 0.01:
            bad.append("codes differ (max %d steps)" % diff.max())
        if not np.allclose(Sk, Sr, rtol=1e-4, atol=0) or np.abs(Zk - Zr).max() > 1:
            bad.append("scales/zeros differ (max rel %.3g)" %
                       float(np.max(np.abs(Sk - Sr) / np.abs(Sr))))
        if abs(err_k - err_r) > 0.01 * err_r:
            bad.append("error differs from the reference's by more than 1%")
        if err_k > err_rtn * (1 + 1e-9):
            bad.append("GPTQ error above RTN's")
        if a.rtn_artifact:
            Qa, Sa, Za = read_artifact4(a.rtn_artifact, name)
            err_rtn_k = output_error(W, expand(Qa[:, :cols], Sa, Za, a.group_size), H)
            if err_k > err_rtn_k * (1 + 1e-9):
                bad.append("GPTQ error above the RTN artifact's")
        print(line + ("  FAIL: " + "; ".join(bad) if bad else ""))
        ok = ok and not bad
        n += 1
    print("gptq_ref: %d weights, at most %.4f%% codes differ by one step" % (n, 100 * worst_frac))
    print("gptq_ref: PASS" if ok else "gptq_ref: FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
