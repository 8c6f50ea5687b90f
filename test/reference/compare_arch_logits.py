#!/usr/bin/env python3
"""Compares a `kiln-run --dump-logits` file with the expected logits of
make_arch_fixtures.py (an .npz with `rows`, `positions`, `logits`): for each
kept row, max |kiln - expected| / max |expected| over the whole set must be
<= --tol. Prints one line per row and PASS/FAIL.

usage: compare_arch_logits.py KILN_DUMP EXPECTED.npz [--tol 1e-4]
"""
import argparse
import sys

import numpy as np


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("dump")
    ap.add_argument("expected")
    ap.add_argument("--tol", type=float, default=1e-4)
    a = ap.parse_args(argv)
    ref = np.load(a.expected)
    exp = ref["logits"].astype(np.float64)
    vocab = exp.shape[1]
    got = np.fromfile(a.dump, dtype="<f4").astype(np.float64)
    if got.size == 0 or got.size % vocab:
        print("compare_arch_logits: FAIL: %d floats is not rows of %d" % (got.size, vocab))
        return 1
    got = got.reshape(-1, vocab)
    rows = ref["rows"]
    if rows.max() >= got.shape[0]:
        print("compare_arch_logits: FAIL: %d rows dumped, expected row %d" % (got.shape[0], rows.max()))
        return 1
    scale = np.abs(exp).max()
    worst = 0.0
    for i, (r, p) in enumerate(zip(rows, ref["positions"])):
        rel = float(np.abs(got[r] - exp[i]).max() / scale)
        worst = max(worst, rel)
        print("pos %3d rel %.3g argmax kiln %d ref %d" % (p, rel, int(got[r].argmax()), int(exp[i].argmax())))
    ok = worst <= a.tol
    print("compare_arch_logits: max rel diff %.3g (tol %g)" % (worst, a.tol))
    print("compare_arch_logits: PASS" if ok else "compare_arch_logits: FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
