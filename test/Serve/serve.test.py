#!/usr/bin/env python3
"""Drives kiln-serve as users do: with the OpenAI Python client, raw HTTP
and many clients at once.

  serve.test.py KILN_SERVE KILN_RUN ARTIFACT MODE [--chat REFERENCE_JSON] [server flags...]

MODE
  api     completions and chat (whole and streamed) against kiln-run's
          greedy output, /v1/models, /health, /tokenize, /detokenize,
          /metrics parsed with prometheus_client;
  errors  malformed JSON, wrong field types, context overflow, bad model,
          missing or wrong API key, a body over --max-body-bytes, unknown
          routes: each a 4xx in OpenAI's error shape; a full queue: 503;
  load    64 concurrent clients (streaming and not; a quarter disconnecting
          mid-stream, sending garbage bytes, a truncated body or malformed
          JSON) three times over: every greedy
          answer equals the answer alone, every disconnect is cancelled,
          no blocks leak and the resident set stays flat.

Prints one summary line per mode for FileCheck; exits non-zero (with the
server's stderr) on any mismatch.
"""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import openai
from prometheus_client.parser import text_string_to_metric_families

PROMPTS = [
    "Once upon a time", "The little dog", "Lily and Tom went to the park",
    "One day a bird", "The sun was hot", "Sam had a red ball",
    "There was a big tree", "Mom said",
]


# --mpirun "LAUNCHER": kiln-serve and kiln-run run as the ranks of an
# mpirun job (a partitioned artifact, docs/parallelism.md); the server is
# stopped by SIGTERM to rank 0, which shuts the group down.
LAUNCH = []


def fail(msg, server=None):
    print("FAIL: " + msg)
    if server is not None:
        server.dump()
    sys.exit(1)


class Server:
    """kiln-serve on a free port; its stderr is collected on a thread."""

    def __init__(self, exe, artifact, flags, env=None):
        self.lines = []
        self.artifact = artifact
        self.proc = subprocess.Popen(
            LAUNCH + [exe, artifact, "--port", "0"] + flags,
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL, text=True, env=env)
        self.port = None
        deadline = time.time() + 120
        while time.time() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                break
            self.lines.append(line)
            m = re.search(r"serving .* on http://[^:]+:(\d+) ", line)
            if m:
                self.port = int(m.group(1))
                break
        if self.port is None:
            self.proc.kill()
            fail("kiln-serve did not start:\n" + "".join(self.lines))
        threading.Thread(target=self._drain, daemon=True).start()
        self.base = "http://127.0.0.1:%d" % self.port

    def _drain(self):
        for line in self.proc.stderr:
            self.lines.append(line)

    def dump(self):
        sys.stdout.write("--- kiln-serve stderr ---\n" + "".join(self.lines))

    def rss_kib(self):
        with open("/proc/%d/status" % self.proc.pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def rank0_pid(self):
        """The process of rank 0 (itself when not launched by mpirun)."""
        if not LAUNCH:
            return self.proc.pid
        for pid in os.listdir("/proc"):
            try:
                with open("/proc/%s/environ" % pid, "rb") as f:
                    env = f.read().split(b"\0")
                with open("/proc/%s/cmdline" % pid, "rb") as f:
                    cmd = f.read().split(b"\0")
            except OSError:
                continue
            if b"OMPI_COMM_WORLD_RANK=0" in env and \
                    self.artifact.encode() in cmd and \
                    any(c.endswith(b"kiln-serve") for c in cmd):
                return int(pid)
        fail("no rank 0 process of kiln-serve", self)

    def stop(self):
        os.kill(self.rank0_pid(), signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            fail("kiln-serve did not stop on SIGTERM", self)
        if rc != 0:
            fail("kiln-serve exited %d on SIGTERM" % rc, self)
        time.sleep(0.1)
        if not any("kiln-serve: stopped" in l for l in self.lines):
            fail("no 'kiln-serve: stopped' line", self)


def http(server, method, path, body=None, headers=None, raw=None):
    """(status, parsed JSON or text) of one request."""
    data = raw if raw is not None else (
        json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(server.base + path, data=data, method=method)
    req.add_header("Content-Type", "application/json")
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            status, text = r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        status, text = e.code, e.read().decode()
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


def metrics(server):
    status, text = http(server, "GET", "/metrics")
    if status != 200:
        fail("/metrics returned %d" % status, server)
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[s.name] = out.get(s.name, 0.0) + s.value
    return out


def wait_idle(server, what):
    """The engine drains: nothing running or waiting, no block in use."""
    m = {}
    for _ in range(600):
        m = metrics(server)
        if (m.get("vllm:num_requests_running", 1) == 0 and
                m.get("vllm:num_requests_waiting", 1) == 0 and
                m.get("kiln:kv_blocks_used", 1) == 0):
            return m
        time.sleep(0.05)
    fail("%s: engine not idle: running %s waiting %s blocks %s" % (
        what, m.get("vllm:num_requests_running"),
        m.get("vllm:num_requests_waiting"), m.get("kiln:kv_blocks_used")),
        server)


def kiln_run_text(kiln_run, artifact, prompt, n):
    """kiln-run's greedy continuation of `prompt` (stdout less the echo)."""
    out = subprocess.run(
        LAUNCH + [kiln_run, artifact, "--prompt", prompt, "--max-tokens", str(n),
         "--temperature", "0"], capture_output=True, text=True, check=True)
    text = out.stdout
    assert text.startswith(prompt) and text.endswith("\n"), text
    return text[len(prompt):-1]


def client(server, key="none"):
    return openai.OpenAI(base_url=server.base + "/v1", api_key=key,
                         max_retries=0, timeout=300)


def mode_api(args, server, chat):
    c = client(server)
    models = c.models.list()
    model = models.data[0].id
    n = 24
    for prompt in PROMPTS[:3]:
        want = kiln_run_text(args.kiln_run, args.artifact, prompt, n)
        r = c.completions.create(model=model, prompt=prompt, max_tokens=n,
                                 temperature=0)
        got = r.choices[0].text
        # kiln-run stops at EOS too; so does the server (finish "stop").
        if got != want:
            fail("completion of %r: server %r, kiln-run %r" % (prompt, got, want),
                 server)
        if r.usage.completion_tokens < 1 or r.usage.prompt_tokens < 1:
            fail("usage: %r" % r.usage, server)
        chunks = c.completions.create(model=model, prompt=prompt, max_tokens=n,
                                      temperature=0, stream=True,
                                      stream_options={"include_usage": True})
        text, finish, usage = "", None, None
        for ch in chunks:
            if ch.choices:
                text += ch.choices[0].text
                finish = ch.choices[0].finish_reason or finish
            if ch.usage:
                usage = ch.usage
        if text != want or finish != r.choices[0].finish_reason:
            fail("streamed %r (%s), whole %r (%s)" % (
                text, finish, want, r.choices[0].finish_reason), server)
        if usage is None or usage.completion_tokens != r.usage.completion_tokens:
            fail("streamed usage %r, whole %r" % (usage, r.usage), server)
    # Seeded sampling is reproducible.
    a = c.completions.create(model=model, prompt=PROMPTS[0], max_tokens=16,
                             temperature=0.9, top_p=0.9, seed=7).choices[0].text
    b = c.completions.create(model=model, prompt=PROMPTS[0], max_tokens=16,
                             temperature=0.9, top_p=0.9, seed=7).choices[0].text
    if a != b:
        fail("seed 7 gave %r then %r" % (a, b), server)
    # stop strings end the text before the match.
    full = c.completions.create(model=model, prompt=PROMPTS[0], max_tokens=n,
                                temperature=0).choices[0].text
    word = full.split()[2] if len(full.split()) > 2 else None
    if word:
        r = c.completions.create(model=model, prompt=PROMPTS[0], max_tokens=n,
                                 temperature=0, stop=[word])
        if r.choices[0].text != full[:full.index(word)] or \
                r.choices[0].finish_reason != "stop":
            fail("stop %r: %r (%s)" % (word, r.choices[0].text,
                                       r.choices[0].finish_reason), server)
    if chat:
        # The published reference (transformers, greedy) of the chat case.
        with open(chat) as f:
            case = [c for c in json.load(f)["cases"] if c["chat"]][0]
        msgs = [{"role": "user", "content": case["prompt"]}]
        r = c.chat.completions.create(model=model, messages=msgs,
                                      max_tokens=case["max_new_tokens"],
                                      temperature=0)
        answer = r.choices[0].message.content
        want = case["greedy_text"].replace("<|im_end|>", "")
        if r.choices[0].message.role != "assistant" or answer != want or \
                r.choices[0].finish_reason != "stop":
            fail("chat answer %r (%s), reference %r" % (
                answer, r.choices[0].finish_reason, want), server)
        if r.usage.prompt_tokens != len(case["prompt_ids"]):
            fail("chat prompt of %d tokens, reference %d" % (
                r.usage.prompt_tokens, len(case["prompt_ids"])), server)
        s = "".join(ch.choices[0].delta.content or ""
                    for ch in c.chat.completions.create(
                        model=model, messages=msgs, max_tokens=40,
                        temperature=0, stream=True) if ch.choices)
        if s != answer:
            fail("streamed chat %r, whole %r" % (s, answer), server)
        print("api: chat answer equals the reference %r, streamed equals whole" % want)
    # logprobs: the sampled tokens' log probabilities, whole and streamed.
    r = c.completions.create(model=model, prompt=PROMPTS[0], max_tokens=n,
                             temperature=0, logprobs=0)
    lp = r.choices[0].logprobs
    if lp is None or "".join(lp.tokens) != r.choices[0].text or \
            len(lp.token_logprobs) != len(lp.tokens) or \
            not all(x <= 0 for x in lp.token_logprobs) or \
            lp.text_offset[0] != 0 or \
            any(lp.text_offset[i + 1] != lp.text_offset[i] + len(lp.tokens[i])
                for i in range(len(lp.tokens) - 1)):
        fail("logprobs=0: %r for text %r" % (lp, r.choices[0].text), server)
    # A stop string cuts the text: no token that starts after the cut.
    words = r.choices[0].text.split()
    if len(words) > 2:
        cut = c.completions.create(model=model, prompt=PROMPTS[0], max_tokens=n,
                                   temperature=0, logprobs=0,
                                   stop=[" " + words[2]])
        ct = cut.choices[0]
        if not "".join(ct.logprobs.tokens).startswith(ct.text) or \
                any(o >= len(ct.text) for o in ct.logprobs.text_offset):
            fail("stop %r: text %r, logprob tokens %r offsets %r" % (
                words[2], ct.text, ct.logprobs.tokens, ct.logprobs.text_offset),
                server)
    # Echo of a token-id prompt: every id's text, the first included.
    st, tok = http(server, "POST", "/tokenize",
                   {"prompt": PROMPTS[1], "add_special_tokens": False})
    e = c.completions.create(model=model, prompt=tok["tokens"], max_tokens=1,
                             temperature=0, echo=True).choices[0].text
    if not e.strip().startswith(PROMPTS[1]):
        fail("echo of %r's ids gave %r" % (PROMPTS[1], e), server)
    streamed = []
    for ch in c.completions.create(model=model, prompt=PROMPTS[0],
                                   max_tokens=n, temperature=0, logprobs=0,
                                   stream=True):
        if ch.choices and ch.choices[0].logprobs:
            streamed += ch.choices[0].logprobs.token_logprobs
    # (The second run hits the prefix cache: equal up to rounding.)
    if len(streamed) != len(lp.token_logprobs) or any(
            abs(a - b) > 1e-4 for a, b in zip(streamed, lp.token_logprobs)):
        fail("streamed logprobs %r, whole %r" % (streamed, lp.token_logprobs),
             server)
    if chat:
        r = c.chat.completions.create(
            model=model, messages=[{"role": "user", "content": PROMPTS[1]}],
            max_tokens=8, temperature=0, logprobs=True)
        content = r.choices[0].logprobs.content
        if "".join(t.token for t in content) != r.choices[0].message.content or \
                not all(t.logprob <= 0 and bytes(t.bytes).decode("utf-8", "replace")
                        == t.token for t in content):
            fail("chat logprobs %r for %r" % (content, r.choices[0].message.content),
                 server)
    print("api: logprobs cover the text%s, streamed equal whole" %
          (" (completions and chat)" if chat else ""))
    # tokenize / detokenize round trip.
    st, tok = http(server, "POST", "/tokenize",
                   {"prompt": PROMPTS[1], "add_special_tokens": False})
    if st != 200 or tok.get("count") != len(tok.get("tokens", [])):
        fail("/tokenize: %d %r" % (st, tok), server)
    st, de = http(server, "POST", "/detokenize", {"tokens": tok["tokens"]})
    if st != 200 or de.get("prompt", "").strip() != PROMPTS[1]:
        fail("/detokenize: %d %r" % (st, de), server)
    st, _ = http(server, "GET", "/health")
    if st != 200:
        fail("/health: %d" % st, server)
    m = wait_idle(server, "api")
    need = ["vllm:num_requests_running", "vllm:num_requests_waiting",
            "vllm:kv_cache_usage_perc", "vllm:prompt_tokens_total",
            "vllm:generation_tokens_total", "vllm:time_to_first_token_seconds_count",
            "vllm:time_per_output_token_seconds_count",
            "vllm:e2e_request_latency_seconds_count",
            "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total",
            "vllm:request_success_total"]
    missing = [k for k in need if k not in m]
    if missing:
        fail("/metrics lacks %s" % missing, server)
    if m["vllm:generation_tokens_total"] < 3 * n:
        fail("generation_tokens_total %s" % m["vllm:generation_tokens_total"],
             server)
    print("api: %d models; completions equal kiln-run, streamed equals whole; "
          "metrics parse" % len(models.data))


def expect_error(server, what, status, method, path, body=None, headers=None,
                 raw=None):
    st, resp = http(server, method, path, body, headers, raw)
    if st != status:
        fail("%s: status %d (want %d): %r" % (what, st, status, resp), server)
    if not (isinstance(resp, dict) and isinstance(resp.get("error"), dict) and
            resp["error"].get("message")):
        fail("%s: not an OpenAI error body: %r" % (what, resp), server)
    print("errors: %s -> %d: %s" % (what, st, resp["error"]["message"]))


def mode_errors(args, server):
    key = {"Authorization": "Bearer sekret"}
    comp = "/v1/completions"
    expect_error(server, "no key", 401, "POST", comp,
                 {"prompt": "a", "max_tokens": 2})
    expect_error(server, "wrong key", 401, "POST", comp,
                 {"prompt": "a", "max_tokens": 2},
                 {"Authorization": "Bearer nope"})
    expect_error(server, "bad json", 400, "POST", comp, headers=key,
                 raw=b'{"prompt": "a", ')
    expect_error(server, "not an object", 400, "POST", comp, headers=key,
                 raw=b'[1, 2]')
    expect_error(server, "max_tokens type", 400, "POST", comp,
                 {"prompt": "a", "max_tokens": "many"}, key)
    expect_error(server, "temperature range", 400, "POST", comp,
                 {"prompt": "a", "temperature": -1}, key)
    expect_error(server, "prompt type", 400, "POST", comp,
                 {"prompt": {"text": "a"}}, key)
    expect_error(server, "too long", 400, "POST", comp,
                 {"prompt": "a", "max_tokens": 100000}, key)
    expect_error(server, "long prompt", 400, "POST", comp,
                 {"prompt": "Once upon a time " * 400, "max_tokens": 4}, key)
    expect_error(server, "messages type", 400, "POST", "/v1/chat/completions",
                 {"messages": "hello"}, key)
    expect_error(server, "unknown model", 404, "POST", comp,
                 {"model": "gpt-17", "prompt": "a"}, key)
    expect_error(server, "token id", 400, "POST", comp,
                 {"prompt": [1, 10 ** 9], "max_tokens": 2}, key)
    expect_error(server, "body size", 413, "POST", comp, headers=key,
                 raw=json.dumps({"prompt": "x" * 300000}).encode())
    expect_error(server, "no route", 404, "GET", "/v1/nothing", headers=key)
    expect_error(server, "wrong method", 405, "GET", "/v1/completions",
                 headers=key)
    expect_error(server, "number overflow", 400, "POST", comp, headers=key,
                 raw=b'{"prompt": "a", "max_tokens": 2, "foo": 1e999}')
    expect_error(server, "min_p", 400, "POST", comp,
                 {"prompt": "a", "max_tokens": 2, "min_p": 0.1}, key)
    expect_error(server, "min_tokens", 400, "POST", comp,
                 {"prompt": "a", "max_tokens": 2, "min_tokens": 5}, key)
    expect_error(server, "negative logprobs", 400, "POST", comp,
                 {"prompt": "a", "max_tokens": 2, "logprobs": -1}, key)
    expect_error(server, "echo with logprobs", 400, "POST", comp,
                 {"prompt": "a", "max_tokens": 2, "logprobs": 0,
                  "echo": True}, key)
    expect_error(server, "logit_bias", 400, "POST", comp,
                 {"prompt": "a", "max_tokens": 2, "logit_bias": {"1": 5}}, key)
    expect_error(server, "response_format", 400, "POST", comp,
                 {"prompt": "a", "max_tokens": 2,
                  "response_format": {"type": "json_object"}}, key)
    expect_error(server, "logprobs 2", 400, "POST", comp,
                 {"prompt": "a", "max_tokens": 2, "logprobs": 2}, key)
    expect_error(server, "logprobs type", 400, "POST", comp,
                 {"prompt": "a", "max_tokens": 2, "logprobs": True}, key)
    expect_error(server, "top_logprobs", 400, "POST", comp,
                 {"prompt": "a", "max_tokens": 2, "top_logprobs": 3}, key)
    # A full queue: one sequence at a time, one waiting, many at once.
    results = []

    def one():
        results.append(http(server, "POST", comp,
                            {"prompt": "Once upon a time", "max_tokens": 200,
                             "ignore_eos": True}, key)[0])
    ts = [threading.Thread(target=one) for _ in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if 503 not in results or 200 not in results or \
            set(results) - {200, 503}:
        fail("queue full: statuses %r" % sorted(results), server)
    print("errors: queue full -> 503 (%d of 8), the rest 200" %
          results.count(503))
    st, _ = http(server, "GET", "/health")
    if st != 200:
        fail("/health after errors: %d" % st, server)
    wait_idle(server, "errors")
    print("errors: server healthy and idle after every error")


def raw_stream_disconnect(server, prompt, read_bytes):
    """A streaming request read for a while, then the socket closed."""
    body = json.dumps({"prompt": prompt, "max_tokens": 400, "stream": True,
                       "temperature": 0, "ignore_eos": True}).encode()
    s = socket.create_connection(("127.0.0.1", server.port), timeout=120)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
              b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n"
              % len(body) + body)
    got = b""
    while len(got) < read_bytes:
        chunk = s.recv(4096)
        if not chunk:
            break
        got += chunk
    s.close()
    return got.startswith(b"HTTP/1.1 200")


def garbage(server, kind):
    s = socket.create_connection(("127.0.0.1", server.port), timeout=60)
    try:
        if kind == 0:
            s.sendall(b"\x00\xff\x13garbage\r\n\r\n")
        elif kind == 1:  # body shorter than its Content-Length, then close
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                      b"Content-Length: 1000\r\n\r\n{\"prompt\": \"a")
        else:            # a header line without end
            s.sendall(b"GET /health HTTP/1.1\r\nX-" + b"a" * 10000)
        s.settimeout(5)
        try:
            s.recv(4096)
        except OSError:
            pass
    finally:
        s.close()


def mode_load(args, server):
    c = client(server)
    model = c.models.list().data[0].id
    n = 20
    want = {}
    for p in PROMPTS:
        want[p] = c.completions.create(model=model, prompt=p, max_tokens=n,
                                       temperature=0).choices[0].text
    errors = []
    rss = []

    def good(i):
        try:
            p = PROMPTS[i % len(PROMPTS)]
            if i % 2:
                text = "".join(ch.choices[0].text for ch in
                               c.completions.create(model=model, prompt=p,
                                                    max_tokens=n, temperature=0,
                                                    stream=True) if ch.choices)
            else:
                text = c.completions.create(model=model, prompt=p, max_tokens=n,
                                            temperature=0).choices[0].text
            if text != want[p]:
                errors.append("client %d: %r != %r" % (i, text, want[p]))
        except Exception as e:  # noqa: BLE001
            errors.append("client %d: %r" % (i, e))

    def bad(i):
        kind = (i // 4) % 4
        try:
            if kind == 0:
                raw_stream_disconnect(server, PROMPTS[i % len(PROMPTS)], 300)
            elif kind == 3:  # well-framed, malformed JSON: a 400, no harm
                st, resp = http(server, "POST", "/v1/completions",
                                raw=b'{"prompt": "Once", "max_tokens": 4,,}')
                if st != 400:
                    errors.append("malformed JSON client %d: %d %r" %
                                  (i, st, resp))
            else:
                garbage(server, kind - 1)
        except Exception as e:  # noqa: BLE001
            errors.append("bad client %d: %r" % (i, e))

    for rnd in range(3):
        # A fresh connection pool per round: the server closes connections
        # idle for its keep-alive timeout (5 s), and a pooled one it closes
        # just as a request goes out fails without a retry (max_retries=0)
        # although the server did nothing wrong.
        c = client(server)
        ts = []
        for i in range(64):
            ts.append(threading.Thread(target=good if i % 4 else bad, args=(i,)))
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        if errors:
            fail("round %d: %s" % (rnd, "; ".join(errors[:5])), server)
        m = wait_idle(server, "load round %d" % rnd)
        rss.append(server.rss_kib())
    growth = rss[-1] - rss[0]
    if growth > 16 * 1024:
        fail("resident set grew %d KiB over two rounds: %r" % (growth, rss),
             server)
    fin = m.get("vllm:request_success_total", 0)
    print("load: 3 rounds of 64 clients: greedy answers equal alone, "
          "disconnects cancelled, blocks used 0, RSS growth < 16 MiB; "
          "finished %d" % fin)


def mode_invariant(args, server):
    """--batch-invariant: 16 concurrent requests get the text and the
    logprobs, bit for bit, that each got alone (greedy and seeded
    sampling)."""
    c = client(server)
    model = c.models.list().data[0].id
    reqs = [dict(prompt=PROMPTS[i % len(PROMPTS)] + " " * (i // len(PROMPTS)),
                 max_tokens=12, logprobs=0,
                 temperature=0.8 if i % 2 else 0.0, seed=100 + i)
            for i in range(16)]
    def run(q):
        ch = c.completions.create(model=model, **q).choices[0]
        return ch.text, list(ch.logprobs.token_logprobs)
    alone = [run(q) for q in reqs]
    together = [None] * len(reqs)
    def worker(i):
        together[i] = run(reqs[i])
    ts = [threading.Thread(target=worker, args=(i,)) for i in range(len(reqs))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    for i, (a, b) in enumerate(zip(alone, together)):
        if a != b:
            fail("request %d: alone %r, beside 15 others %r" % (i, a, b), server)
    m = wait_idle(server, "invariant")
    print("invariant: 16 concurrent requests equal alone, logprobs bit for "
          "bit (8 sampled)")


def mode_flags(args, server):
    """vLLM's / llama-server's flag names work; a port in use is refused."""
    st, models = http(server, "GET", "/v1/models")
    m = models["data"][0]
    if st != 200 or m["id"] != "aliased" or m["max_model_len"] != 100:
        fail("aliases: %r" % models, server)
    print("flags: --model and --ctx-size set the name and the context")
    out = subprocess.run([args.kiln_serve, args.artifact, "--port",
                          str(server.port)], capture_output=True, text=True,
                         timeout=120)
    if out.returncode != 1 or "port %d: the port is in use" % server.port \
            not in out.stderr:
        fail("second server on port %d: %d %r" % (server.port, out.returncode,
                                                   out.stderr), server)
    print("flags: a second server on the same port: exit 1, 'the port is in use'")


def main():
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("kiln_serve")
    ap.add_argument("kiln_run")
    ap.add_argument("artifact")
    ap.add_argument("mode", choices=["api", "errors", "load", "flags",
                                     "invariant"])
    ap.add_argument("--chat", metavar="REFERENCE_JSON",
                    help="also check chat against this reference_outputs.json")
    ap.add_argument("--mpirun", metavar="LAUNCHER",
                    help="run kiln-serve and kiln-run under this launcher")
    args, flags = ap.parse_known_args()
    if args.mpirun:
        LAUNCH.extend(args.mpirun.split())
    env = dict(os.environ)
    if args.mode == "errors":
        flags += ["--api-key", "sekret", "--max-body-bytes", "256K",
                  "--max-batch", "1", "--max-queue", "1"]
    server = Server(args.kiln_serve, args.artifact, flags, env)
    try:
        if args.mode == "api":
            mode_api(args, server, args.chat)
        elif args.mode == "errors":
            mode_errors(args, server)
        elif args.mode == "flags":
            mode_flags(args, server)
        elif args.mode == "invariant":
            mode_invariant(args, server)
        else:
            mode_load(args, server)
    except SystemExit:
        server.proc.kill()
        raise
    except Exception as e:  # noqa: BLE001
        server.proc.kill()
        fail("%s: %r" % (args.mode, e), server)
    server.stop()
    print("%s: stopped cleanly on SIGTERM" % args.mode)


if __name__ == "__main__":
    main()
