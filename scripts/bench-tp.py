#!/usr/bin/env python3
"""Tensor and pipeline parallelism on the CPU, measured (docs/parallelism.md).

usage: bench-tp.py ARTIFACT_TP1 ARTIFACT_TPN [ARTIFACT_TPN_B ...]
                   [--reps 5] [--prompt-tokens 128] [--decode-tokens 64]
                   [--markdown FILE]

Runs each artifact (tp x pp ranks from its manifest, under mpirun when
more than one) on
the same prompt of random token ids, greedy, on the session path, the
artifacts interleaved rep by rep so that machine drift hits all alike, and
reports the median TTFT and decode tokens/s with their ratios to the first
artifact. One more traced run per artifact (rank 0's kiln-run --trace)
gives the share of decode time in each op kind; the communication share
is the collectives' (all_reduce, all_gather, and with sequence parallelism
reduce_scatter, all_gather_rows, all_slice) and, with pipeline stages,
the transfers' (send, recv) plus the time rank 0 spends outside its own
kernels waiting for the later stages and their logits. Checks that every
artifact generates the same tokens.
"""
import argparse
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True  # keep scripts/ free of __pycache__
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ranks import MPIRUN, launch_env, ranks_of  # noqa: E402




def tp_of(art):
    tp, pp = ranks_of(art)
    return tp * pp


def run(kiln_run, art, tokens, n, extra=()):
    tp = tp_of(art)
    cmd = ([] if tp == 1 else MPIRUN + ["-np", str(tp)]) + [
        kiln_run, art, "--tokens=" + ",".join(map(str, tokens)),
        "--max-tokens", str(n), "--temperature", "0", "--no-engine",
        "--print-tokens"] + list(extra)
    env = launch_env()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env,
                       errors="replace")
    if p.returncode != 0:
        sys.exit("bench-tp: %s failed:\n%s" % (" ".join(cmd), p.stderr[-3000:]))
    ttft = float(re.search(r"TTFT: ([0-9.]+) ms", p.stderr).group(1))
    dec = float(re.search(r"decode: ([0-9.]+) tokens/s", p.stderr).group(1))
    ids = [l for l in p.stderr.splitlines() if re.fullmatch(r"[0-9 ]+", l)]
    return ttft, dec, ids[0] if ids else ""


def decode_shares(trace_path):
    """Decode time (the "decode" steps) and each op kind's share of it,
    from the kernel events of one-token calls."""
    with open(trace_path) as f:
        t = json.load(f)
    events = t["traceEvents"] if isinstance(t, dict) else t
    total = sum(e["dur"] for e in events if e.get("ph") == "X"
                and e.get("cat") == "step" and e.get("name") == "decode")
    kinds = {}
    for e in events:
        args = e.get("args", {})
        if e.get("ph") != "X" or e.get("cat") != "kernel" or \
                args.get("tokens") != 1:
            continue
        kinds[args["kind"]] = kinds.get(args["kind"], 0) + e["dur"]
    return total, {k: v / total for k, v in kinds.items()} if total else {}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("artifacts", nargs="+")
    ap.add_argument("--kiln-run", default=os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "build", "bin",
        "kiln-run"))
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--decode-tokens", type=int, default=64)
    ap.add_argument("--markdown")
    a = ap.parse_args()
    rng = random.Random(1)
    tokens = [rng.randrange(3, 500) for _ in range(a.prompt_tokens)]
    res = {art: [] for art in a.artifacts}
    ids = {}
    for _ in range(a.reps):
        for art in a.artifacts:
            ttft, dec, got = run(a.kiln_run, art, tokens, a.decode_tokens)
            res[art].append((ttft, dec))
            ids.setdefault(art, got)
    same = len(set(ids.values())) == 1
    base = None
    lines = ["| artifact | ranks | TTFT (ms, median) | decode (tokens/s, median) "
             "| decode vs first | decode time in communication | top op kinds |",
             "|---|---|---|---|---|---|---|"]
    for art in a.artifacts:
        ttft = statistics.median(r[0] for r in res[art])
        dec = statistics.median(r[1] for r in res[art])
        base = base or dec
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "trace.json")
            run(a.kiln_run, art, tokens, a.decode_tokens, ["--trace", path])
            _, shares = decode_shares(path)
        comm = sum(v for k, v in shares.items()
                   if k.startswith("all_") or k in ("send", "recv", "reduce_scatter"))
        if ranks_of(art)[1] > 1:  # waiting for the later stages
            comm += max(0.0, 1.0 - sum(shares.values()))
        top = ", ".join("%s %.0f%%" % (k, 100 * v) for k, v in
                        sorted(shares.items(), key=lambda kv: -kv[1])[:4])
        lines.append("| %s | %d | %.1f | %.1f | %.2fx | %.1f%% | %s |" % (
            os.path.basename(art.rstrip("/")), tp_of(art), ttft, dec,
            dec / base, 100 * comm, top))
    lines.append("")
    lines.append("Same greedy tokens from every artifact: %s." %
                 ("yes" if same else "NO"))
    text = "\n".join(lines)
    print(text)
    if a.markdown:
        with open(a.markdown, "w") as f:
            f.write(text + "\n")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
