#!/usr/bin/env python3
"""Speculative decoding in kiln-serve (docs/speculative.md): decode tokens/s
of streamed greedy completions with the request field "speculative" set to
off, ngram and suffix, on one server, for the templated workload
(scripts/speculative-workload/) and open text cut from ../shared/data; one
request at a time (the latency case) and CONCURRENCY at once (aggregate
tokens/s). Median of REPS rounds, the modes interleaved. Not a CI step.

usage: scripts/speculative-serve-bench.py ARTIFACT [--tokens 96] [--reps 3]
       [--concurrency 4] [--threads N]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.environ.get("KILN_SHARED_DIR", os.path.join(ROOT, "..", "shared"))


def workload():
    w = {}
    d = os.path.join(ROOT, "scripts", "speculative-workload")
    for name in sorted(os.listdir(d)):
        if name.endswith(".txt"):
            w[name[:-4]] = open(os.path.join(d, name), encoding="utf-8").read()
    wiki = open(os.path.join(SHARED, "data", "wiki.test.raw.406"),
                encoding="utf-8").read()
    start = wiki.find(" = ", 20000)
    para = wiki[start:start + 1500]
    w["open-wiki"] = para[:para.rfind(".") + 1].strip() + " "
    story = open(os.path.join(SHARED, "data", "tinystories_sample.txt"),
                 encoding="utf-8").read()
    w["open-story"] = story[:700].rsplit(".", 1)[0] + ". "
    return w


def stream(base, prompt, mode, tokens):
    """(decode tokens/s, tokens) of one streamed greedy completion."""
    body = {"prompt": prompt, "max_tokens": tokens, "temperature": 0,
            "stream": True, "speculative": mode}
    req = urllib.request.Request(base + "/v1/completions",
                                 json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    times = []
    with urllib.request.urlopen(req, timeout=600) as r:
        for line in r:
            line = line.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk["choices"] and chunk["choices"][0].get("text"):
                times.append(time.perf_counter())
    n = len(times)
    if n < 2:
        return 0.0, n
    return (n - 1) / (times[-1] - times[0]), n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("artifact")
    ap.add_argument("--tokens", type=int, default=96)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--threads", type=int, default=0)
    a = ap.parse_args()
    flags = ["--port", "0", "--speculative=off"]
    if a.threads:
        flags += ["--threads", str(a.threads)]
    proc = subprocess.Popen([os.path.join(ROOT, "build", "bin", "kiln-serve"),
                             a.artifact] + flags, stderr=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, text=True)
    port = None
    for line in proc.stderr:
        m = re.search(r"serving .* on http://[^:]+:(\d+) ", line)
        if m:
            port = int(m.group(1))
            break
    if port is None:
        sys.exit("kiln-serve did not start")
    threading.Thread(target=lambda: [None for _ in proc.stderr],
                     daemon=True).start()
    base = "http://127.0.0.1:%d" % port
    modes = ["off", "ngram", "suffix"]
    print("| prompt | clients | off (tokens/s) | ngram | ratio | suffix | ratio |")
    print("|---|---|---|---|---|---|---|")
    for name, prompt in workload().items():
        stream(base, prompt, "off", 8)  # warm-up
        for clients in (1, a.concurrency):
            rates = {m: [] for m in modes}
            for _ in range(a.reps):
                for m in modes:
                    if clients == 1:
                        rates[m].append(stream(base, prompt, m, a.tokens)[0])
                        continue
                    out = [None] * clients
                    def one(i):
                        out[i] = stream(base, prompt, m, a.tokens)
                    t0 = time.perf_counter()
                    ts = [threading.Thread(target=one, args=(i,))
                          for i in range(clients)]
                    for t in ts:
                        t.start()
                    for t in ts:
                        t.join()
                    total = sum(n for _, n in out)
                    rates[m].append(total / (time.perf_counter() - t0))
            med = {m: statistics.median(rates[m]) for m in modes}
            print("| %s | %d | %.1f | %.1f | %.2fx | %.1f | %.2fx |" % (
                name, clients, med["off"], med["ngram"],
                med["ngram"] / med["off"], med["suffix"],
                med["suffix"] / med["off"]), flush=True)
    with urllib.request.urlopen(base + "/metrics") as r:
        for line in r.read().decode().splitlines():
            if "spec_decode" in line and not line.startswith("#"):
                print(line)
    proc.terminate()
    proc.wait(timeout=60)


if __name__ == "__main__":
    main()
