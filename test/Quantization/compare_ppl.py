#!/usr/bin/env python3
"""compare_ppl.py BASELINE.txt CANDIDATE.txt --max-rel R: reads the
`perplexity:` and `tokens:` lines kiln-eval prints last, requires the same
token count and |ppl_c - ppl_b| / ppl_b <= R; prints both and the delta."""
import argparse
import re
import sys


def read(path):
    text = open(path).read()
    ppl = re.findall(r"^perplexity: ([0-9.]+)$", text, re.M)
    tok = re.findall(r"^tokens: ([0-9]+)$", text, re.M)
    if not ppl or not tok:
        sys.exit("compare_ppl: %s has no perplexity/tokens lines" % path)
    return float(ppl[-1]), int(tok[-1])


ap = argparse.ArgumentParser()
ap.add_argument("baseline")
ap.add_argument("candidate")
ap.add_argument("--max-rel", type=float, required=True)
a = ap.parse_args()
(pb, tb), (pc, tc) = read(a.baseline), read(a.candidate)
print("baseline perplexity %.4f over %d tokens" % (pb, tb))
print("candidate perplexity %.4f over %d tokens" % (pc, tc))
rel = (pc - pb) / pb
print("delta %+.4f (%+.2f%%)" % (pc - pb, 100 * rel))
if tb != tc:
    sys.exit("compare_ppl: token counts differ (%d vs %d)" % (tb, tc))
if abs(rel) > a.max_rel:
    sys.exit("compare_ppl: FAIL: |delta| %.2f%% > %.2f%%" % (100 * abs(rel), 100 * a.max_rel))
print("compare_ppl: PASS")
