#!/usr/bin/env python3
"""Pipeline micro-batches of the serving engine, measured (docs/parallelism.md).

usage: bench-pp-serve.py ARTIFACT [ARTIFACT ...] [--micro-batches 1,0]
                         [--concurrency 8] [--prompt-tokens 64]
                         [--max-tokens 32] [--reps 3] [--markdown FILE]

Starts `kiln-serve` on each artifact (under mpirun with tp x pp ranks when
partitioned; once per --micro-batches value for artifacts with pipeline
stages: 1 = every step whole, 0 = the default: one micro-batch per stage
for steps that prefill, decode-only steps whole), sends
--concurrency simultaneous completions of --prompt-tokens random token ids
each, greedy with ignore_eos so every one decodes --max-tokens tokens, and
reports the median over --reps rounds of the aggregate throughput (completion
tokens / wall seconds of the round) and its ratio to the first row. Every
configuration must return the same tokens for the same prompts.
"""
import argparse
import http.client
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import threading
import time

sys.dont_write_bytecode = True  # keep scripts/ free of __pycache__
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ranks import MPIRUN, launch_env, ranks_of  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))



def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(port, body):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    c.request("POST", "/v1/completions", json.dumps(body),
              {"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    c.close()
    if r.status != 200:
        raise RuntimeError("HTTP %d: %s" % (r.status, data[:200]))
    return json.loads(data)


def start(args, art, micro):
    tp, pp = ranks_of(art)
    port = free_port()
    cmd = [os.path.join(args.kiln_bin, "kiln-serve"), art, "--port", str(port),
           "--no-verify", "--max-batch", str(max(args.concurrency, 1))]
    if pp > 1:
        cmd += ["--pp-micro-batches", str(micro)]
    if tp * pp > 1:
        cmd = MPIRUN + ["-np", str(tp * pp)] + cmd
    env = launch_env()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    for _ in range(600):
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                return proc, port
        except OSError:
            pass
        if proc.poll() is not None:
            sys.exit("kiln-serve on %s exited: %s" % (art, proc.stderr.read().decode()))
        time.sleep(0.2)
    sys.exit("kiln-serve on %s did not start" % art)


def round_trip(args, port, prompts):
    outs = [None] * len(prompts)

    def one(i):
        r = post(port, {"prompt": prompts[i], "max_tokens": args.max_tokens,
                        "temperature": 0, "ignore_eos": True})
        outs[i] = (r["choices"][0]["text"], r["usage"]["completion_tokens"])

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(prompts))]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    if any(o is None for o in outs):
        sys.exit("a request failed")
    return sum(n for _, n in outs) / wall, [t for t, _ in outs]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("artifacts", nargs="+")
    ap.add_argument("--micro-batches", default="1,0")
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--prompt-tokens", type=int, default=64)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--markdown")
    ap.add_argument("--kiln-bin", default=os.path.join(ROOT, "build", "bin"))
    args = ap.parse_args()
    rng = random.Random(args.seed)
    with open(os.path.join(args.artifacts[0], "manifest.json")) as f:
        vocab = int(json.load(f)["model"]["vocab_size"])
    prompts = [[rng.randrange(3, vocab) for _ in range(args.prompt_tokens)]
               for _ in range(args.concurrency)]
    rows, reference = [], None
    for art in args.artifacts:
        tp, pp = ranks_of(art)
        for micro in ([int(m) for m in args.micro_batches.split(",")]
                      if pp > 1 else [None]):
            proc, port = start(args, art, micro)
            try:
                round_trip(args, port, prompts[:1])  # warm-up
                rates = []
                for _ in range(args.reps):
                    rate, texts = round_trip(args, port, prompts)
                    rates.append(rate)
                    if reference is None:
                        reference = texts
                    elif texts != reference:
                        print("warning: %s (micro-batches %s) generated other "
                              "tokens than the first configuration" % (art, micro))
            finally:
                proc.terminate()
                proc.wait(timeout=60)
            label = "%s (tp=%d, pp=%d%s)" % (
                os.path.basename(os.path.normpath(art)), tp, pp,
                "" if micro is None else ", micro-batches %s" %
                ("default" if micro == 0 else micro))
            rows.append((label, statistics.median(rates)))
            print("%-60s %8.1f tokens/s" % rows[-1], flush=True)
    base = rows[0][1]
    lines = ["| configuration | decode tokens/s (aggregate) | ratio |",
             "|---|---|---|"]
    lines += ["| %s | %.1f | %.2fx |" % (l, r, r / base) for l, r in rows]
    text = "\n".join(lines)
    print(text)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
