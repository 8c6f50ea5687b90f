#!/usr/bin/env python3
"""Compares two `kiln-run --dump-logits` files (raw little-endian float32):
max |a - b| / max |a| must be <= --tol. Prints the ratio and PASS/FAIL.

usage: compare_logit_files.py A B [--tol 1e-5]
"""
import argparse
import sys

import numpy as np


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--tol", type=float, default=1e-5)
    a = ap.parse_args(argv)
    x = np.fromfile(a.a, dtype="<f4").astype(np.float64)
    y = np.fromfile(a.b, dtype="<f4").astype(np.float64)
    if x.size == 0 or x.size != y.size:
        print("compare_logit_files: FAIL: sizes %d and %d" % (x.size, y.size))
        return 1
    rel = float(np.max(np.abs(x - y)) / np.max(np.abs(x)))
    print("compare_logit_files: %d logits, max rel diff %.3g (tol %g)" % (x.size, rel, a.tol))
    ok = rel <= a.tol
    print("compare_logit_files: PASS" if ok else "compare_logit_files: FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
