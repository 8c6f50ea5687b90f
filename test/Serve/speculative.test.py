#!/usr/bin/env python3
"""kiln-serve with speculative decoding (docs/speculative.md): every decode
row of a request may carry a draft (prompt lookup or the suffix index),
verified in the same batched step; the accepted tokens are kept and the
rejected ones' KV blocks released.

Checked, for --speculative=MODE: greedy completions of several prompts equal
those of the same server with the request field "speculative": "off"
(alone, and 6 at once, each equal to its answer alone); the metrics count
draft tokens verified and accepted (some of each); a sampled request
completes; every KV block is free again at the end (kiln:kv_blocks_used 0);
a bad "speculative" value is a 400 naming the field.

usage: speculative.test.py KILN_SERVE ARTIFACT MODE [server flags...]
"""
import json
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

PROMPTS = [
    "Tom had a red ball. Tom had a red",
    "Once upon a time",
    "Sam said hello. Sam said hello. Sam said",
    "The dog ran to the park. The dog ran to the",
    "Lily and Ben went to the sea. Lily and Ben",
    "One day, a cat",
]


def fail(msg, lines=None):
    print("speculative: FAIL: " + msg)
    if lines:
        sys.stdout.write("--- kiln-serve stderr ---\n" + "".join(lines))
    sys.exit(1)


def main():
    exe, art, mode = sys.argv[1], sys.argv[2], sys.argv[3]
    proc = subprocess.Popen([exe, art, "--port", "0", "--speculative=" + mode]
                            + sys.argv[4:], stderr=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, text=True)
    lines, port = [], None
    deadline = time.time() + 120
    while time.time() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        lines.append(line)
        m = re.search(r"serving .* on http://[^:]+:(\d+) ", line)
        if m:
            port = int(m.group(1))
            break
    if port is None:
        proc.kill()
        fail("kiln-serve did not start", lines)
    threading.Thread(target=lambda: [lines.append(l) for l in proc.stderr],
                     daemon=True).start()
    base = "http://127.0.0.1:%d" % port

    def post(body):
        req = urllib.request.Request(base + "/v1/completions",
                                     json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=120) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    def complete(prompt, spec=None, temperature=0.0, seed=None):
        body = {"prompt": prompt, "max_tokens": 80, "temperature": temperature}
        if spec is not None:
            body["speculative"] = spec
        if seed is not None:
            body["seed"] = seed
        status, r = post(body)
        if status != 200:
            fail("status %d: %s" % (status, r), lines)
        return r["choices"][0]["text"]

    def metrics():
        with urllib.request.urlopen(base + "/metrics", timeout=30) as r:
            text = r.read().decode()
        out = {}
        for line in text.splitlines():
            m = re.match(r"([a-z_:]+)(\{[^}]*\})? ([0-9.e+-]+)$", line)
            if m:
                out[m.group(1)] = float(m.group(3))
        return out

    plain = {p: complete(p, "off") for p in PROMPTS}
    for p in PROMPTS:
        got = complete(p)
        if got != plain[p]:
            fail("%r: speculative %r != plain %r" % (p, got, plain[p]), lines)
    # Concurrent requests: drafts of several sequences in one step.
    results = {}
    threads = [threading.Thread(target=lambda p=p: results.__setitem__(
        p, complete(p))) for p in PROMPTS]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for p in PROMPTS:
        if results.get(p) != plain[p]:
            fail("%r concurrent: %r != %r" % (p, results.get(p), plain[p]), lines)
    sampled = complete(PROMPTS[0], temperature=0.8, seed=7)
    if not sampled:
        fail("a sampled request returned no text", lines)
    status, err = post({"prompt": "Hi", "max_tokens": 4, "speculative": "medusa"})
    if status != 400 or "speculative" not in json.dumps(err):
        fail("bad mode: %d %s" % (status, err), lines)
    m = metrics()
    drafted = m.get("vllm:spec_decode_num_draft_tokens_total", 0)
    accepted = m.get("vllm:spec_decode_num_accepted_tokens_total", 0)
    if not (drafted > 0 and 0 < accepted <= drafted):
        fail("metrics: %d drafted, %d accepted" % (drafted, accepted), lines)
    if m.get("kiln:kv_blocks_used", -1) != 0:
        fail("KV blocks still used: %s" % m.get("kiln:kv_blocks_used"), lines)
    proc.terminate()
    proc.wait(timeout=60)
    print("speculative: %s: %d prompts, greedy text equal to plain decoding "
          "alone and concurrent" % (mode, len(PROMPTS)))
    print("speculative: %s: drafted and accepted tokens counted; sampled "
          "request ok; bad mode 400; blocks free" % mode)


if __name__ == "__main__":
    main()
