#!/usr/bin/env python3
"""Compare logits dumped by `kiln-run --dump-logits=FILE` with the numpy reference.

FILE layout (see kiln-run): raw little-endian float32, vocab_size floats per
row, one row for each position k-1 .. n-1, where n = len(tokens) and
k = (n + 1) // 2 (kiln-run prefills the first k tokens, then decodes the rest
one at a time; the first dumped row is the prefill's last position).

Per row: rel_err = max|kiln - ref| / max|ref|.  Exit status 0 when every row is
within --tol, 1 otherwise (or on a malformed file), 2 on usage errors.
"""

import argparse
import os
import sys

import numpy as np

sys.dont_write_bytecode = True  # keep test/reference free of __pycache__
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_ref  # noqa: E402


def fail(msg):
    print("check_logits: FAIL: %s" % msg)
    sys.exit(1)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="llama2.c .bin, .gguf or HF directory")
    ap.add_argument("--tokens", required=True, help="comma separated token ids (as given to kiln-run)")
    ap.add_argument("--kiln-logits", required=True, help="file written by kiln-run --dump-logits")
    ap.add_argument("--tol", type=float, default=1e-4, help="max relative error per row (default 1e-4)")
    ap.add_argument("--all-rows", action="store_true",
                    help="the file holds rows for all n positions instead of k-1..n-1")
    ap.add_argument("--quiet", action="store_true", help="print only the summary")
    ap.add_argument("--act-quant", choices=["none", "int8_per_block"], default="none",
                    help="quantize the input of every linear and of the classifier "
                         "as act_quant = int8_per_block does (kiln-compile "
                         "--act-quant=int8; every linear must be in a block format)")
    a = ap.parse_args(argv)

    try:
        tokens = [int(t) for t in a.tokens.replace(" ", "").split(",") if t != ""]
    except ValueError:
        print("check_logits: bad --tokens %r" % a.tokens, file=sys.stderr)
        return 2
    n = len(tokens)
    if n == 0:
        print("check_logits: --tokens is empty", file=sys.stderr)
        return 2
    k = (n + 1) // 2
    first = 0 if a.all_rows else k - 1
    want_rows = n - first

    try:
        model = llama_ref.load_model(a.model)
        ref = llama_ref.logits_for(
            model, tokens,
            act_quant=llama_ref.int8_per_block if a.act_quant == "int8_per_block" else None)
    except llama_ref.RefError as e:
        fail("reference: %s" % e)
    vocab = ref.shape[1]

    if not os.path.exists(a.kiln_logits):
        fail("%s: no such file" % a.kiln_logits)
    size = os.path.getsize(a.kiln_logits)
    if size % (vocab * 4):
        fail("%s: size %d bytes is not a multiple of vocab_size*4 = %d"
             % (a.kiln_logits, size, vocab * 4))
    rows = size // (vocab * 4)
    if rows != want_rows:
        fail("%s: has %d rows, expected %d (positions %d..%d of %d tokens)"
             % (a.kiln_logits, rows, want_rows, first, n - 1, n))
    kiln = np.fromfile(a.kiln_logits, dtype="<f4").astype(np.float64).reshape(rows, vocab)
    bad = ~np.isfinite(kiln)
    if bad.any():
        r, c = np.argwhere(bad)[0]
        fail("%s: %d non-finite values (first at row %d = position %d, vocab index %d: %r)"
             % (a.kiln_logits, int(bad.sum()), r, first + r, c, float(kiln[r, c])))

    worst = (0.0, -1)
    n_bad = 0
    for r in range(rows):
        pos = first + r
        want = ref[pos]
        denom = np.max(np.abs(want))
        if denom == 0:
            denom = 1.0
        err = np.max(np.abs(kiln[r] - want)) / denom
        ok = err <= a.tol
        n_bad += not ok
        if err > worst[0] or worst[1] < 0:
            worst = (err, pos)
        if not a.quiet or not ok:
            am_k, am_r = int(np.argmax(kiln[r])), int(np.argmax(want))
            print("pos %4d token %6d rel_err %.3e argmax kiln %d ref %d%s%s"
                  % (pos, tokens[pos], err, am_k, am_r,
                     "" if am_k == am_r else "  (argmax differs)",
                     "" if ok else "  > tol"))
    print("check_logits: %d rows (positions %d..%d), max rel_err %.3e at position %d, tol %.1e"
          % (rows, first, n - 1, worst[0], worst[1], a.tol))
    if n_bad:
        fail("%d of %d rows exceed tol %.1e (worst %.3e at position %d)"
             % (n_bad, rows, a.tol, worst[0], worst[1]))
    print("check_logits: PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
