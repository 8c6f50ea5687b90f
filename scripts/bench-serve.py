#!/usr/bin/env python3
"""Serving benchmark: kiln-serve against llama-server on the same GGUF.

  scripts/bench-serve.py [--gguf FILE] [--concurrency 1,4,16,32]
                         [--requests-per-client R] [--prompt-tokens P]
                         [--max-tokens N] [--threads T] [--markdown FILE]
                         [--csv FILE] [--plot FILE.png] [--kiln-bin DIR]
                         [--llama-bin DIR] [--cache DIR]

For each concurrency c, c clients each send R streaming completions
(temperature 0, ignore_eos, a distinct prompt of about P tokens, N tokens
out) to one server at a time, started fresh for that c with c slots
(kiln-serve --max-batch c; llama-server -np c, continuous batching). Reported
per server and c: output tokens/s and requests/s over the run, goodput
(requests/s meeting an SLO on TTFT and TPOT), TTFT p50/p99 (request sent to
first token), TPOT p50/p99 (per request: (last token - first token) /
(n - 1)), ITL p50/p99 (every gap between streamed tokens), and ratios
kiln/llama taken in the same run. A second scenario sends c
requests that share a system prompt of about 1,000 tokens (then a short
distinct question): TTFT and kiln's prefix-cache hit rate from /metrics.

The roofline column is the decode bound of a step: c sequences share one
read of the weights, so tokens/s <= c * bandwidth / weight bytes (bandwidth
measured here, numpy copy of 512 MiB; the bytes of kiln's weights.bin, what
one step reads), and no more than the FMA peak (kiln-bench's measured
figure) over the FLOPs of a token (2 x the weights it multiplies, from the
GGUF), whichever is lower.

llama.cpp comes from scripts/peers/llama-cpp.sh (the PyPI llama-cpp-python
source package, built with llama-server), cached in ~/.cache/kiln-peers.
Speed is measured, never asserted: this is a script, not a test.
"""
import argparse
import http.client
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORDS = ("time little dog park bird sun tree ball girl boy cat happy sad "
         "friend mom dad fish water sky house car road flower garden rain "
         "snow star moon book toy cake apple music dance sing play run jump "
         "walk talk").split()


def note(msg):
    sys.stderr.write("bench-serve: %s\n" % msg)
    sys.stderr.flush()


def prompt_text(i, words):
    """A distinct prompt of about `words` words (deterministic in i)."""
    out = ["Story %d:" % i]
    x = 2654435761 * (i + 1) & 0xffffffff
    for _ in range(words):
        x = (1103515245 * x + 12345) & 0x7fffffff
        out.append(WORDS[x % len(WORDS)])
    return " ".join(out) + "."


class Proc:
    def __init__(self, name, argv, ready, port):
        self.name, self.port = name, port
        self.log = []
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
        threading.Thread(target=self._drain, daemon=True).start()
        deadline = time.time() + 600
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("%s exited: %s" % (name, "".join(self.log[-20:])))
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                c.request("GET", ready)
                r = c.getresponse()
                r.read()
                if r.status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.5)
        raise RuntimeError("%s did not become ready" % name)

    def _drain(self):
        for line in self.proc.stdout:
            self.log.append(line)

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def free_port():
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def stream_one(port, prompt, max_tokens, out):
    """One streaming completion; appends (ttft s, tpot s or None, tokens,
    [inter-token gaps s])."""
    body = json.dumps({"prompt": prompt, "max_tokens": max_tokens,
                       "temperature": 0, "ignore_eos": True, "stream": True,
                       "stream_options": {"include_usage": True}})
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    t0 = time.perf_counter()
    c.request("POST", "/v1/completions", body,
              {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError("status %d: %s" % (r.status, r.read()[:300]))
    first = last = None
    chunks = 0
    usage = None
    gaps = []
    for raw in r:
        line = raw.decode().strip()
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            break
        j = json.loads(data)
        if j.get("usage"):
            usage = j["usage"].get("completion_tokens")
        ch = j.get("choices") or []
        if ch and ch[0].get("text"):
            now = time.perf_counter()
            if first is None:
                first = now
            else:
                gaps.append(now - last)
            last = now
            chunks += 1
    c.close()
    n = usage or chunks
    tpot = (last - first) / (n - 1) if first is not None and n > 1 else None
    out.append((first - t0 if first else None, tpot, n, gaps))


def run_load(port, clients, per_client, prompts, max_tokens):
    results, errors = [], []

    def client(k):
        try:
            for j in range(per_client):
                stream_one(port, prompts[(k * per_client + j) % len(prompts)],
                           max_tokens, results)
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))
    ts = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    t0 = time.perf_counter()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    wall = time.perf_counter() - t0
    if errors:
        raise RuntimeError("; ".join(errors[:3]))
    return results, wall


def pct(xs, p):
    xs = sorted(x for x in xs if x is not None)
    if not xs:
        return float("nan")
    k = min(len(xs) - 1, max(0, int(round(p / 100.0 * (len(xs) - 1)))))
    return xs[k]


SLO = {"ttft": 2.0, "tpot": 0.1}  # seconds; --slo-ttft-ms / --slo-tpot-ms


def summarize(results, wall):
    toks = sum(r[2] for r in results)
    itl = [g for r in results for g in r[3]]
    good = [r for r in results if r[0] is not None and r[0] <= SLO["ttft"] and
            (r[1] is None or r[1] <= SLO["tpot"])]
    return {"tok_s": toks / wall, "req_s": len(results) / wall,
            "goodput_req_s": len(good) / wall,
            "ttft_p50": pct([r[0] for r in results], 50),
            "ttft_p99": pct([r[0] for r in results], 99),
            "tpot_p50": pct([r[1] for r in results], 50),
            "tpot_p99": pct([r[1] for r in results], 99),
            "itl_p50": pct(itl, 50), "itl_p99": pct(itl, 99),
            "requests": len(results)}


def kiln_metrics(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    m = {}
    for line in text.splitlines():
        mm = re.match(r"^(vllm:prefix_cache_(?:hits|queries)_total)(?:\{[^}]*\})? (\S+)", line)
        if mm:
            m[mm.group(1)] = m.get(mm.group(1), 0.0) + float(mm.group(2))
    return m


def bandwidth_gbs():
    import numpy as np
    a = np.ones(64 << 20, dtype=np.float64)  # 512 MiB
    b = np.empty_like(a)
    best = 1e9
    for _ in range(5):
        t = time.perf_counter()
        np.copyto(b, a)
        best = min(best, time.perf_counter() - t)
    return 2 * a.nbytes / best / 1e9  # read + write


def flops_per_token(gguf_path):
    """2 x the weights one decode token multiplies: every 2-D tensor but the
    token embedding (a row lookup), which counts once more when it is also
    the output matrix (tied embeddings)."""
    from gguf import GGUFReader
    import numpy as np
    elems = {t.name: int(np.prod([int(x) for x in t.shape]))
             for t in GGUFReader(gguf_path).tensors if len(t.shape) == 2}
    total = sum(v for k, v in elems.items() if k != "token_embd.weight")
    if "output.weight" not in elems:
        total += elems.get("token_embd.weight", 0)
    return 2 * total


def compute_peak_gflops(kiln_bench, art, threads):
    """kiln-bench's measured FMA peak (GFLOP/s) for `threads` threads."""
    out = subprocess.run([kiln_bench, art, "--threads", str(threads),
                          "--prompt-tokens", "1", "--decode-tokens", "1",
                          "--profile"], capture_output=True, text=True)
    m = re.search(r"compute peak: ([0-9.]+) GFLOP/s", out.stdout + out.stderr)
    return float(m.group(1)) if m else float("nan")


LABELS = {"kiln": "kiln-serve", "kiln-bi": "kiln-serve --batch-invariant",
          "llama": "llama-server"}


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf", default=os.path.join(
        ROOT, "..", "shared", "models", "smollm2-135m-instruct",
        "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--concurrency", default="1,4,16,32")
    ap.add_argument("--requests-per-client", type=int, default=2)
    ap.add_argument("--prompt-words", type=int, default=96,
                    help="words per prompt (about 1.3 tokens each)")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--system-words", type=int, default=760,
                    help="shared system prompt words (about 1,000 tokens)")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--ctx", type=int, default=2048, help="positions per sequence")
    ap.add_argument("--markdown")
    ap.add_argument("--csv")
    ap.add_argument("--plot")
    ap.add_argument("--kiln-bin", default=os.path.join(ROOT, "build", "bin"))
    ap.add_argument("--llama-bin")
    ap.add_argument("--cache", default=os.environ.get(
        "KILN_PEER_CACHE", os.path.expanduser("~/.cache/kiln-peers")))
    ap.add_argument("--servers", default="kiln,llama",
                    help="comma list of kiln (kiln-serve), kiln-bi (kiln-serve "
                    "--batch-invariant) and llama (llama-server)")
    ap.add_argument("--slo-ttft-ms", type=float, default=2000.0,
                    help="goodput SLO: time to first token (default 2000)")
    ap.add_argument("--slo-tpot-ms", type=float, default=100.0,
                    help="goodput SLO: time per output token (default 100)")
    a = ap.parse_args()
    if a.plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            sys.exit("bench-serve: --plot needs matplotlib "
                     "(python3 -m pip install matplotlib)")
    SLO["ttft"] = a.slo_ttft_ms / 1e3
    SLO["tpot"] = a.slo_tpot_ms / 1e3
    conc = [int(x) for x in a.concurrency.split(",")]
    servers = a.servers.split(",")

    if "llama" in servers and not a.llama_bin:
        note("preparing llama.cpp (scripts/peers/llama-cpp.sh)")
        out = subprocess.run([os.path.join(ROOT, "scripts", "peers", "llama-cpp.sh")],
                             stdout=subprocess.PIPE, text=True,
                             env=dict(os.environ, KILN_PEER_CACHE=a.cache))
        if out.returncode:
            sys.exit("bench-serve: scripts/peers/llama-cpp.sh failed")
        a.llama_bin = out.stdout.strip().splitlines()[-1]
    art = os.path.join(a.cache, "kiln", os.path.basename(a.gguf) + ".serve.art")
    kiln = any(n.startswith("kiln") for n in servers)
    if kiln:
        os.makedirs(os.path.dirname(art), exist_ok=True)
        note("compiling %s" % art)
        subprocess.run([os.path.join(a.kiln_bin, "kiln-compile"), a.gguf, "-o",
                        art, "--max-seq-len", str(a.ctx)], check=True,
                       stdout=subprocess.DEVNULL)
        with open(os.path.join(art, "manifest.json")) as f:
            weight_bytes = os.path.getsize(os.path.join(art, "weights.bin"))
    else:
        weight_bytes = os.path.getsize(a.gguf)
    bw = bandwidth_gbs()
    flops = flops_per_token(a.gguf)
    peak = compute_peak_gflops(os.path.join(a.kiln_bin, "kiln-bench"), art,
                               a.threads) if kiln else float("nan")
    note("copy bandwidth %.1f GB/s; weights %.1f MB; %.3f GFLOP per token; "
         "FMA peak %.1f GFLOP/s" % (bw, weight_bytes / 1e6, flops / 1e9, peak))

    def roofline(c):
        # Memory: c tokens per read of the weights; compute: the FMA peak.
        mem = c * bw * 1e9 / weight_bytes
        return min(mem, peak * 1e9 / flops) if peak == peak else mem

    prompts = [prompt_text(i, a.prompt_words) for i in range(256)]
    system = "You are a storyteller. " + prompt_text(10 ** 6, a.system_words)
    shared = [system + " Question %d: tell a story about a %s." % (i, WORDS[i % len(WORDS)])
              for i in range(64)]
    rows = []
    for c in conc:
        for name in servers:
            port = free_port()
            if name.startswith("kiln"):
                argv = [os.path.join(a.kiln_bin, "kiln-serve"), art, "--port",
                        str(port), "--max-batch", str(c), "--threads",
                        str(a.threads), "--max-model-len", str(a.ctx),
                        "--max-queue", "1024"]
                if name == "kiln-bi":  # batch-invariant kernels
                    argv.append("--batch-invariant")
            else:
                argv = [os.path.join(a.llama_bin, "llama-server"), "-m", a.gguf,
                        "--host", "127.0.0.1", "--port", str(port), "-np", str(c),
                        "-c", str(a.ctx * c), "-t", str(a.threads), "-tb",
                        str(a.threads), "--cont-batching", "-ngl", "0"]
            note("%s, concurrency %d" % (name, c))
            p = Proc(name, argv, "/health", port)
            try:
                stream_one(port, prompts[255], 4, [])  # warm-up
                res, wall = run_load(port, c, a.requests_per_client, prompts,
                                     a.max_tokens)
                row = {"server": name, "concurrency": c, **summarize(res, wall)}
                before = kiln_metrics(port) if name.startswith("kiln") else {}
                res2, wall2 = run_load(port, c, 1, shared, 16)
                s2 = summarize(res2, wall2)
                row["shared_ttft_p50"] = s2["ttft_p50"]
                if name.startswith("kiln"):
                    after = kiln_metrics(port)
                    q = after.get("vllm:prefix_cache_queries_total", 0) - \
                        before.get("vllm:prefix_cache_queries_total", 0)
                    h = after.get("vllm:prefix_cache_hits_total", 0) - \
                        before.get("vllm:prefix_cache_hits_total", 0)
                    row["prefix_hit_rate"] = h / q if q else float("nan")
                row["roofline_tok_s"] = roofline(c)
                rows.append(row)
                note("  %s" % json.dumps({k: (round(v, 4) if isinstance(v, float) else v)
                                          for k, v in row.items()}))
            finally:
                p.stop()

    by = {(r["server"], r["concurrency"]): r for r in rows}
    k1 = by.get(("kiln", conc[0]))

    def f(r, key, scale=1.0, fmt="%.1f"):
        v = r.get(key) if r else None
        return fmt % (v * scale) if v is not None and v == v else "-"

    def pair(k, l, key, scale=1.0, fmt="%.1f"):
        return "%s / %s" % (f(k, key, scale, fmt), f(l, key, scale, fmt))
    lines = ["| c | output tok/s kiln / llama | ratio | kiln vs own c=1 | "
             "roofline tok/s | req/s kiln / llama | goodput req/s kiln / llama | "
             "TTFT p50 ms | TTFT p99 ms | TPOT p50 ms | TPOT p99 ms | "
             "ITL p50 ms | ITL p99 ms | shared-prompt TTFT p50 ms | "
             "kiln prefix hit rate |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for c in conc:
        k, l = by.get(("kiln", c)), by.get(("llama", c))
        ratio = "%.2f" % (k["tok_s"] / l["tok_s"]) if k and l else "-"
        own = "%.2f" % (k["tok_s"] / k1["tok_s"]) if k and k1 else "-"
        lines.append("| %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            c, pair(k, l, "tok_s"), ratio, own, f(k or l, "roofline_tok_s", 1.0, "%.0f"),
            pair(k, l, "req_s", 1.0, "%.2f"), pair(k, l, "goodput_req_s", 1.0, "%.2f"),
            pair(k, l, "ttft_p50", 1e3, "%.0f"), pair(k, l, "ttft_p99", 1e3, "%.0f"),
            pair(k, l, "tpot_p50", 1e3), pair(k, l, "tpot_p99", 1e3),
            pair(k, l, "itl_p50", 1e3), pair(k, l, "itl_p99", 1e3),
            pair(k, l, "shared_ttft_p50", 1e3, "%.0f"),
            f(k, "prefix_hit_rate", 1.0, "%.2f")))
    lines.append("")
    lines.append("Cells with two values are kiln-serve / llama-server. Goodput: "
                 "requests per second with TTFT <= %.0f ms and TPOT <= %.0f ms." %
                 (SLO["ttft"] * 1e3, SLO["tpot"] * 1e3))
    if any(r["server"] == "kiln-bi" for r in rows):
        lines += ["", "Batch-invariant kernels (kiln-serve --batch-invariant) "
                  "against the default kernels, same run:", "",
                  "| c | output tok/s default / invariant | ratio | "
                  "TTFT p50 ms default / invariant | TPOT p50 ms default / "
                  "invariant |", "|---|---|---|---|---|"]
        for c in conc:
            k, b = by.get(("kiln", c)), by.get(("kiln-bi", c))
            ratio = "%.2f" % (b["tok_s"] / k["tok_s"]) if k and b else "-"
            lines.append("| %d | %s | %s | %s | %s |" % (
                c, pair(k, b, "tok_s"), ratio, pair(k, b, "ttft_p50", 1e3, "%.0f"),
                pair(k, b, "tpot_p50", 1e3)))
    table = "\n".join(lines)
    print(table)
    if a.markdown:
        with open(a.markdown, "w") as f:
            f.write(table + "\n")
    if a.csv:
        import csv
        keys = sorted({k for r in rows for k in r})
        with open(a.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=keys)
            w.writeheader()
            w.writerows(rows)
    if a.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(1, 2, figsize=(10, 4))
        for name in servers:
            xs = [c for c in conc if (name, c) in by]
            ax[0].plot(xs, [by[(name, c)]["tok_s"] for c in xs], "o-",
                       label=LABELS[name])
            ax[1].plot(xs, [by[(name, c)]["tpot_p99"] * 1e3 for c in xs], "o-",
                       label=LABELS[name])
        ax[0].plot(conc, [roofline(c) for c in conc], "k--",
                   label="roofline (weights once per step; FMA peak)")
        ax[0].set_xscale("log", base=2)
        ax[0].set_yscale("log")
        ax[0].set_xlabel("concurrent clients")
        ax[0].set_ylabel("output tokens/s")
        ax[0].legend()
        ax[1].set_xscale("log", base=2)
        ax[1].set_xlabel("concurrent clients")
        ax[1].set_ylabel("TPOT p99 (ms)")
        ax[1].legend()
        fig.suptitle(os.path.basename(a.gguf) + ", %d threads" % a.threads)
        fig.tight_layout()
        fig.savefig(a.plot, dpi=100)


if __name__ == "__main__":
    main()
