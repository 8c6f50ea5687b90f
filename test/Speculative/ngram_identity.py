#!/usr/bin/env python3
"""kiln-run --speculative=ngram against plain greedy decoding on the same
artifact: the generated token ids (--print-tokens) must be identical for
every prompt; prints the prompts checked and the draft tokens accepted.

usage: ngram_identity.py ARTIFACT   (kiln-run on PATH)
"""
import re
import subprocess
import sys

PROMPTS = [
    "Once upon a time",
    "One day, Lily met a cat. The cat",
    "Tom had a red ball. Tom had a red",
    "The dog ran to the park. The dog ran to the",
    "Sam said hello. Sam said hello. Sam said",
    "A little bird sat on a tree and sang a song about the sun and the",
]


def tokens(args):
    out = subprocess.run(["kiln-run"] + args, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit("ngram_identity: kiln-run failed: " + out.stderr)
    lines = [l for l in out.stderr.splitlines() if re.fullmatch(r"[0-9 ]+", l)]
    m = re.search(r"(\d+) draft tokens, (\d+) accepted", out.stderr)
    return (lines[0] if lines else ""), m


def main():
    art = sys.argv[1]
    drafted = accepted = 0
    for p in PROMPTS:
        base = ["--prompt", p, "--temperature", "0", "--max-tokens", "100",
                "--print-tokens"]
        plain, _ = tokens([art] + base + ["--no-engine"])
        spec, m = tokens([art] + base + ["--speculative=ngram"])
        if not plain or plain != spec:
            sys.exit(f"ngram_identity: FAIL on {p!r}:\n plain {plain}\n spec  {spec}")
        drafted += int(m.group(1))
        accepted += int(m.group(2))
    print(f"ngram_identity: {len(PROMPTS)} prompts, greedy tokens identical "
          "with and without --speculative=ngram")
    print(f"ngram_identity: accepted {accepted} of {drafted} draft tokens")


if __name__ == "__main__":
    main()
