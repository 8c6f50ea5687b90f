#!/usr/bin/env python3
"""Per-layer output reconstruction error of quantized Kiln artifacts on real
calibration activations: for every linear weight W with input Hessian
H = X^T X / N (from the calibration file),

    err(W_hat) = trace((W - W_hat) H (W - W_hat)^T)
               = mean over calibration tokens of ||x W^T - x W_hat^T||^2.

W is the original weight (llama_ref's loaders); W_hat is what the artifact's
4-bit tensors mean in the original model's coordinates: scales * (q - zeros)
for RTN and GPTQ, and for AWQ the same divided column-wise by the scale s
Kiln folded in (and row-wise by the 1/s of the next group folded into the
rows of w3 and wv) (read from `kiln-compile --emit=kiln --fuse=none` output of the same
compile, whose recipes hold the "scale" transforms).

usage: layer_error.py --model M --calibration C --group-size G --rtn DIR
                      [--gptq DIR] [--awq DIR --awq-ir FILE]

Requires, for every linear, GPTQ's error < RTN's, and for every group of
linears sharing an input (AWQ chooses one scale per group), AWQ's summed
error <= RTN's (AWQ's search includes s = 1, i.e. RTN). The 1e-3 relative
slack: the rows of w3 and wv also carry the next group's 1/s, and RTN is
row-scale-equivariant only up to float32 rounding, which can flip near-tie
codes after the search compared the alphas. Prints a table and PASS, or exits 1.
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import awq_ref  # noqa: E402
import calib_file  # noqa: E402
import gptq_ref  # noqa: E402
import llama_ref  # noqa: E402


def deq(art, name, cols, G):
    Q, S, Z = gptq_ref.read_artifact4(art, name)
    return gptq_ref.expand(Q[:, :cols], S, Z, G).astype(np.float64)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--calibration", required=True)
    ap.add_argument("--group-size", type=int, default=128)
    ap.add_argument("--rtn", required=True)
    ap.add_argument("--gptq")
    ap.add_argument("--awq")
    ap.add_argument("--awq-ir")
    a = ap.parse_args(argv)
    model = llama_ref.load_model(a.model)
    meta, calib = calib_file.read_calibration(a.calibration)
    scales = awq_ref.parse_ir_scales(open(a.awq_ir).read()) if a.awq_ir else {}
    ok = True
    n_gptq_better = n = 0
    group_sums = {}
    print("%-16s %12s %12s %12s" % ("weight", "rtn", "gptq", "awq"))
    for l, L in enumerate(model.layers):
        for k in calib_file.LINEARS:
            name = "layers.%d.%s" % (l, k)
            W = L[k].astype(np.float32).astype(np.float64)
            tap = meta["input:" + name]
            H = calib[tap + ".hessian"]
            cols = W.shape[1]
            e_rtn = gptq_ref.output_error(W, deq(a.rtn, name, cols, a.group_size), H)
            e_gptq = e_awq = float("nan")
            if a.gptq:
                e_gptq = gptq_ref.output_error(W, deq(a.gptq, name, cols, a.group_size), H)
                n_gptq_better += e_gptq < e_rtn
                if not e_gptq < e_rtn:
                    print("  FAIL: GPTQ error not below RTN's for %s" % name)
                    ok = False
            if a.awq:
                s, r = np.ones(cols), np.ones(W.shape[0])
                for axis, f in scales.get(name, []):
                    if axis == 1:
                        s *= f.astype(np.float64)
                    else:
                        r *= f.astype(np.float64)
                e_awq = gptq_ref.output_error(
                    W, deq(a.awq, name, cols, a.group_size) / s[None, :] / r[:, None], H)
                g = group_sums.setdefault(tap, [0.0, 0.0])
                g[0] += e_rtn
                g[1] += e_awq
            n += 1
            print("%-16s %12.6g %12.6g %12.6g" % (name, e_rtn, e_gptq, e_awq))
    if a.gptq:
        print("layer_error: GPTQ below RTN on %d of %d linear layers" % (n_gptq_better, n))
    if a.awq:
        better = sum(1 for r, w in group_sums.values() if w < r)
        for tap, (r, w) in group_sums.items():
            if w > r * (1 + 1e-3):
                print("  FAIL: AWQ error %.6g above RTN's %.6g for the group reading %s" % (w, r, tap))
                ok = False
        print("layer_error: AWQ at or below RTN on all %d input groups (strictly below on %d)"
              % (len(group_sums), better) if ok else "layer_error: AWQ above RTN somewhere")
    print("layer_error: PASS" if ok else "layer_error: FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
