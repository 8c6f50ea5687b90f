#!/usr/bin/env python3
"""Checks a Kiln artifact against a model's published reference outputs.

usage: check_reference_outputs.py KILN_RUN ARTIFACT REFERENCE.json [--tol T]
                                  [--launcher "mpirun -np N"]

REFERENCE.json is a ../shared/models/*/reference_outputs.json with "cases":
each gives the rendered prompt, its token ids, the greedy continuation ids
(computed by Hugging Face transformers in float32; a trailing end-of-text id
is where generation stopped) and the top-5 logits at the last prompt
position. For every case this runs KILN_RUN (kiln-run) on ARTIFACT:
  * --prompt RENDERED --print-prompt-tokens: the ids Kiln's tokenizer gives
    the rendered text (special tokens recognised) must equal prompt_ids;
  * --tokens PROMPT_IDS --temperature 0 --max-tokens N --print-tokens: the
    greedy ids must equal greedy_ids (kiln-run stops before printing the
    end-of-text id; the reference lists it);
  * --tokens PROMPT_IDS --dump-logits: at the last prompt position, each of
    the reference's top-5 ids must have a logit within --tol (absolute,
    default 1e-3) of the reference's, and the argmax must agree.
Prints one line per check and "reference outputs: PASS" or exits 1.
--launcher runs every kiln-run under it (the ranks of a partitioned
artifact, docs/parallelism.md).
"""

import json
import os
import subprocess
import sys
import tempfile

import numpy as np


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        print("FAIL: %s exited %d: %s" % (" ".join(cmd[:3]), p.returncode, p.stderr[-2000:]))
        sys.exit(1)
    return p


def main(argv):
    tol = 1e-3
    if "--tol" in argv:
        i = argv.index("--tol")
        tol = float(argv[i + 1])
        del argv[i:i + 2]
    launcher = []
    if "--launcher" in argv:
        i = argv.index("--launcher")
        launcher = argv[i + 1].split()
        del argv[i:i + 2]
    if len(argv) != 3:
        sys.exit(__doc__)
    kiln_run, art, ref_path = argv
    kiln_run = launcher + [kiln_run]
    ref = json.load(open(ref_path))
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for n, case in enumerate(ref["cases"]):
            ids = case["prompt_ids"]
            tag = "case %d (%s%r)" % (n, "chat " if case.get("chat") else "", case["prompt"])
            # Tokenization of the rendered prompt.
            p = run(kiln_run + [art, "--prompt", case["rendered_prompt"], "--max-tokens", "0",
                     "--print-prompt-tokens"])
            line = [l for l in p.stderr.splitlines() if l.startswith("prompt:")]
            got = [int(t) for t in line[0][len("prompt:"):].split()] if line else None
            if got != ids:
                print("FAIL: %s: prompt ids %s, reference %s" % (tag, got, ids))
                ok = False
            else:
                print("%s: %d prompt ids equal" % (tag, len(ids)))
            # Greedy continuation.
            toks = ",".join(map(str, ids))
            p = run(kiln_run + [art, "--tokens=" + toks, "--temperature", "0",
                     "--max-tokens", str(case["max_new_tokens"]), "--print-tokens"])
            lines = [l for l in p.stderr.splitlines() if l and all(c.isdigit() or c == " " for c in l)]
            got = [int(t) for t in lines[0].split()] if lines else []
            want = list(case["greedy_ids"])
            stopped = len(want) < case["max_new_tokens"]
            if stopped:
                want = want[:-1]  # the end-of-text id generation stopped at
            if got != want:
                first = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b),
                             min(len(got), len(want)))
                print("FAIL: %s: greedy ids differ at %d: kiln %s, reference %s" %
                      (tag, first, got[first:first + 8], want[first:first + 8]))
                ok = False
            else:
                print("%s: %d greedy ids equal%s" % (tag, len(got), ", stopped at end-of-text" if stopped else ""))
            # Logits at the last prompt position.
            f = os.path.join(tmp, "logits%d" % n)
            run(kiln_run + [art, "--tokens=" + toks, "--dump-logits=" + f])
            rows = np.fromfile(f, dtype="<f4")
            top = case["last_position_top5"]
            vocab = rows.size // (len(ids) - (len(ids) + 1) // 2 + 1)
            last = rows[-vocab:]
            errs = [abs(float(last[i]) - v) for i, v in top]
            if int(np.argmax(last)) != top[0][0] or max(errs) > tol:
                print("FAIL: %s: top-5 logits off by up to %.2e (argmax kiln %d, reference %d)" %
                      (tag, max(errs), int(np.argmax(last)), top[0][0]))
                ok = False
            else:
                print("%s: top-5 logits within %.1e (max %.2e)" % (tag, tol, max(errs)))
    print("reference outputs: %s" % ("PASS" if ok else "FAIL"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
