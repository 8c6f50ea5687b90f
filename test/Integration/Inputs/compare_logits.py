#!/usr/bin/env python3
"""compare_logits.py A B TOL: the float32 logits two `kiln-run --dump-logits`
runs wrote agree within TOL, measured as max |a - b| / max |b| over every
position and vocabulary entry. Prints "NAME: rel X: PASS" (or FAIL) and
exits 1 on failure, on different sizes, on an empty file or on a non-finite
value."""
import sys

import numpy as np


def main():
    if len(sys.argv) != 5:
        sys.exit("usage: compare_logits.py NAME A B TOL")
    name, pa, pb, tol = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    a = np.fromfile(pa, dtype="<f4").astype(np.float64)
    b = np.fromfile(pb, dtype="<f4").astype(np.float64)
    if a.size == 0 or a.size != b.size:
        print("%s: FAIL (%d and %d logits)" % (name, a.size, b.size))
        return 1
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        print("%s: FAIL (non-finite logits)" % name)
        return 1
    rel = float(np.abs(a - b).max() / np.abs(b).max())
    ok = rel <= tol
    print("%s: rel %.1e: %s" % (name, rel, "PASS" if ok else "FAIL"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
