#!/usr/bin/env python3
"""Run a command with one argument taken from a text file (lit's internal
shell has no command substitution, and some arguments are too long to spell
out in a RUN line).

usage: run_with_text_arg.py TEXTFILE [--words N] -- CMD ARG... @TEXT@ ARG...

Every argument equal to @TEXT@ is replaced by the file's text (its first N
whitespace-separated words, joined by single spaces, with --words). The
command's stdout/stderr pass through and its exit status is returned.
"""
import subprocess
import sys


def main(argv):
    if "--" not in argv:
        sys.exit(__doc__)
    i = argv.index("--")
    opts, cmd = argv[:i], argv[i + 1:]
    path = opts[0]
    text = open(path, encoding="utf-8").read()
    if "--words" in opts:
        n = int(opts[opts.index("--words") + 1])
        words = text.split()
        if len(words) < n:
            sys.exit("run_with_text_arg: %s has only %d words" % (path, len(words)))
        text = " ".join(words[:n])
    cmd = [text if c == "@TEXT@" else c for c in cmd]
    sys.stdout.flush()
    return subprocess.call(cmd)


if __name__ == "__main__":
    r = main(sys.argv[1:])
    if r < 0:  # child died of a signal: die of the same one, so `not` sees a crash
        import os
        import signal
        signal.signal(-r, signal.SIG_DFL)
        os.kill(os.getpid(), -r)
    sys.exit(r)
