#!/usr/bin/env python3
"""kiln-run --speculative=ngram against plain greedy decoding on the same
artifact: the generated token ids (--print-tokens) must be identical for
every prompt; prints the prompts checked and the draft tokens accepted.

usage: ngram_identity.py ARTIFACT [MODE]   (kiln-run on PATH; MODE: the
--speculative value, default ngram)
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
    m = re.search(r"(\d+) verify steps, (\d+) draft tokens, (\d+) accepted",
                  out.stderr)
    plain = re.search(r"adaptive, (\d+) plain decode steps", out.stderr)
    return (lines[0] if lines else ""), m, plain


def main():
    art = sys.argv[1]
    mode = sys.argv[2] if len(sys.argv) > 2 else "ngram"
    drafted = accepted = 0
    wrong_verify = wrong_plain = 0
    for p in PROMPTS:
        base = ["--prompt", p, "--temperature", "0", "--max-tokens", "100",
                "--print-tokens"]
        plain, _, _ = tokens([art] + base + ["--no-engine"])
        for extra in ([], ["--draft-adaptive=false"], ["--draft-test-wrong"]):
            spec, m, steps = tokens([art] + base + ["--speculative=" + mode] + extra)
            if not plain or plain != spec:
                sys.exit(f"ngram_identity: FAIL on {p!r} {extra}:\n"
                         f" plain {plain}\n spec  {spec}")
            if extra == ["--draft-test-wrong"]:
                # Drafts that are always wrong: the controller falls back
                # to plain decode steps after a few verify steps.
                wrong_verify += int(m.group(1))
                wrong_plain += int(steps.group(1))
            else:  # adaptive and fixed draft lengths
                drafted += int(m.group(2))
                accepted += int(m.group(3))
    print(f"ngram_identity: {len(PROMPTS)} prompts, greedy tokens identical "
          f"with and without --speculative={mode} (adaptive, fixed, wrong drafts)")
    print(f"ngram_identity: accepted {accepted} of {drafted} draft tokens")
    share = wrong_plain / max(1, wrong_plain + wrong_verify)
    print(f"ngram_identity: always-wrong drafts: {wrong_verify} verify steps, "
          f"{wrong_plain} plain decode steps ({100 * share:.0f}% plain)")
    if share < 0.8:
        sys.exit("ngram_identity: FAIL: the adaptive controller kept "
                 "drafting although every draft was wrong")


if __name__ == "__main__":
    main()
