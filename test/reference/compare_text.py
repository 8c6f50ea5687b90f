#!/usr/bin/env python3
"""Byte-exact comparison of a program's output with an expected text file.

usage: compare_text.py EXPECTED ACTUAL [--keep-trailing-newline]

EXPECTED is compared byte for byte with ACTUAL; unless --keep-trailing-newline
is given, one final "\\n" of ACTUAL is dropped first (kiln-run, like
llama2.c run.c, ends its output with a newline; the expected files hold the
text only). On a mismatch prints the first differing
offset, both sides around it and a unified diff; exits 1.
"""
import argparse
import difflib
import sys


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("expected")
    ap.add_argument("actual")
    ap.add_argument("--keep-trailing-newline", action="store_true",
                    help="do not drop one trailing newline of ACTUAL")
    a = ap.parse_args(argv)
    exp = open(a.expected, "rb").read()
    act = open(a.actual, "rb").read()
    if not a.keep_trailing_newline and act.endswith(b"\n"):
        act = act[:-1]
    if exp == act:
        print("compare_text: identical (%d bytes)" % len(exp))
        return 0
    i = next((k for k in range(min(len(exp), len(act))) if exp[k] != act[k]), min(len(exp), len(act)))
    print("compare_text: MISMATCH: expected %d bytes, got %d; first difference at byte %d"
          % (len(exp), len(act), i))
    print("  expected: %r" % exp[max(0, i - 40):i + 40])
    print("  actual:   %r" % act[max(0, i - 40):i + 40])
    for line in difflib.unified_diff(exp.decode("utf-8", "replace").splitlines(True),
                                     act.decode("utf-8", "replace").splitlines(True),
                                     a.expected, a.actual):
        sys.stdout.write(line if line.endswith("\n") else line + "\n")
    return 1


if __name__ == "__main__":
    sys.exit(main())
