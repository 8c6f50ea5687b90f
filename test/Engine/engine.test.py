#!/usr/bin/env python3
"""Drives the serving engine (api.h kiln_rt_engine_*) of libkiln_runtime.so
through ctypes and checks it against the single-sequence session path.

  engine.test.py LIB ARTIFACT MODE [options]

Modes (each prints one summary line on success, exits 1 with a message):
  equal      greedy requests run alone through the engine give the tokens
             of the session path (prefill + decode entry points)
  invariant  the same greedy requests submitted together (16 at once, with
             preemption under a small pool and chunked prefill under a
             small step budget) give exactly the tokens each got alone
             (batch invariance), and every KV block is free afterwards
  prefix     requests sharing a long prefix hit the prefix cache and give
             the tokens of a run without prefix caching
  cancel     requests cancelled mid-generation free their blocks at once
  errors     submit refuses bad requests with the documented codes
"""
import argparse
import math
import ctypes as C
import random
import sys
import threading
import time


class SamplerParams(C.Structure):
    _fields_ = [("temperature", C.c_float), ("top_k", C.c_int32),
                ("top_p", C.c_float), ("seed", C.c_uint64)]


class EngineOptions(C.Structure):
    _fields_ = [("kv_cache_bytes", C.c_uint64), ("kv_cache_fraction", C.c_double),
                ("block_tokens", C.c_int32), ("max_batch", C.c_int32),
                ("max_step_tokens", C.c_int32), ("max_queue", C.c_int32),
                ("context_length", C.c_int32), ("threads", C.c_int32),
                ("flags", C.c_uint32)]


class RequestParams(C.Structure):
    _fields_ = [("sampling", SamplerParams), ("max_tokens", C.c_int32),
                ("stop_ids", C.POINTER(C.c_int32)), ("n_stop_ids", C.c_int32)]


class EngineStats(C.Structure):
    _fields_ = [(n, C.c_int64) for n in (
        "num_running", "num_waiting", "kv_blocks_total", "kv_blocks_used",
        "block_tokens", "prefix_cache_queries", "prefix_cache_hits",
        "num_preemptions", "prompt_tokens", "generation_tokens", "steps",
        "requests_finished", "context_length")]


class ModelInfo(C.Structure):
    _fields_ = [("vocab_size", C.c_int64), ("max_seq_len", C.c_int64),
                ("max_prefill_tokens", C.c_int64), ("bos_id", C.c_int32),
                ("eos_id", C.c_int32), ("weights_bytes", C.c_uint64),
                ("arena_bytes", C.c_uint64), ("kv_cache_bytes", C.c_uint64),
                ("name", C.c_char_p), ("target", C.c_char_p),
                ("device", C.c_char_p), ("dtype", C.c_char_p),
                ("quant", C.c_char_p), ("kv_dtype", C.c_char_p)]


CALLBACK = C.CFUNCTYPE(None, C.c_void_p, C.c_uint64, C.c_int32, C.c_float,
                       C.c_int)
FINISH = {1: "length", 2: "stop", 3: "cancelled", 4: "error"}


def fail(msg):
    print("engine.test.py: " + msg, file=sys.stderr)
    sys.exit(1)


class Runtime:
    def __init__(self, lib, artifact):
        self.lib = C.CDLL(lib, mode=C.RTLD_GLOBAL)
        L = self.lib
        L.kiln_rt_status_message.restype = C.c_char_p
        L.kiln_rt_status_code.restype = C.c_int
        for f in ("kiln_rt_artifact_open", "kiln_rt_engine_create",
                  "kiln_rt_engine_submit", "kiln_rt_session_create",
                  "kiln_rt_session_prefill", "kiln_rt_session_decode"):
            getattr(L, f).restype = C.c_void_p
        L.kiln_rt_session_logits.restype = C.POINTER(C.c_float)
        self.art = C.c_void_p()
        self.check(L.kiln_rt_artifact_open(artifact.encode(), 0, C.byref(self.art)))
        self.info = ModelInfo()
        L.kiln_rt_artifact_info(self.art, C.byref(self.info))

    def check(self, status, what=""):
        if status:
            msg = self.lib.kiln_rt_status_message(C.c_void_p(status)).decode()
            fail(f"{what}: {msg}" if what else msg)

    def status(self, status):
        """(code, message) of a status, freeing it; (0, '') for OK."""
        if not status:
            return 0, ""
        s = C.c_void_p(status)
        out = (self.lib.kiln_rt_status_code(s),
               self.lib.kiln_rt_status_message(s).decode())
        self.lib.kiln_rt_status_free(s)
        return out

    def _session_run(self, prompt, steps, choose):
        """Prefill `prompt`, then `steps` tokens through the decode entry
        point, token i = choose(logits, i); returns the tokens and each
        one's raw-logit log softmax (computed here in double)."""
        L = self.lib
        V = self.info.vocab_size
        sess = C.c_void_p()
        self.check(L.kiln_rt_session_create(self.art, C.byref(sess)))
        arr = (C.c_int32 * len(prompt))(*prompt)
        self.check(L.kiln_rt_session_prefill(sess, arr, len(prompt)))
        tokens, logprobs = [], []
        for i in range(steps):
            logits = L.kiln_rt_session_logits(sess)
            t = choose(logits, i)
            tokens.append(t)
            logprobs.append(log_softmax_at(logits, V, t))
            if i + 1 < steps:
                self.check(L.kiln_rt_session_decode(sess, t))
        L.kiln_rt_session_release(sess)
        return tokens, logprobs

    def session_greedy(self, prompt, max_tokens, logprobs=None):
        """Greedy generation with the prefill/decode entry points; each
        token's log softmax appended to `logprobs` when given."""
        V = self.info.vocab_size
        out, lp = self._session_run(
            prompt, max_tokens,
            lambda logits, i: max(range(V), key=lambda v: logits[v]))
        if logprobs is not None:
            logprobs.extend(lp)
        return out

    def session_logprobs(self, prompt, tokens):
        """The raw-logit log softmax of each of `tokens` generated after
        `prompt`, teacher-forced through the prefill/decode entry points."""
        return self._session_run(prompt, len(tokens),
                                 lambda logits, i: tokens[i])[1]


def log_softmax_at(logits, V, token):
    m = max(logits[v] for v in range(V))
    return logits[token] - (m + math.log(sum(math.exp(logits[v] - m)
                                             for v in range(V))))


class Engine:
    def __init__(self, rt, **opts):
        self.rt = rt
        o = EngineOptions()
        for k, v in opts.items():
            setattr(o, k, v)
        self.handle = C.c_void_p()
        rt.check(rt.lib.kiln_rt_engine_create(rt.art, C.byref(o),
                                              C.byref(self.handle)), "engine")
        self.lock = threading.Lock()
        self.cv = threading.Condition(self.lock)
        self.tokens, self.finish, self.logprobs = {}, {}, {}
        self.cb = CALLBACK(self._on_token)
        self.on_token = None

    def _on_token(self, user, rid, token, logprob, finish):
        with self.lock:
            if finish:
                self.finish[rid] = FINISH.get(finish, finish)
                self.cv.notify_all()
            else:
                self.tokens.setdefault(rid, []).append(token)
                self.logprobs.setdefault(rid, []).append(logprob)
        if not finish and self.on_token:
            self.on_token(rid, token)

    def submit(self, prompt, max_tokens, temperature=0.0, seed=0, stop=()):
        p = RequestParams()
        p.sampling.temperature = temperature
        p.sampling.top_p = 1.0
        p.sampling.seed = seed
        p.max_tokens = max_tokens
        stops = (C.c_int32 * max(1, len(stop)))(*stop)
        p.stop_ids = stops
        p.n_stop_ids = len(stop)
        arr = (C.c_int32 * max(1, len(prompt)))(*prompt)
        rid = C.c_uint64()
        code, msg = self.rt.status(self.rt.lib.kiln_rt_engine_submit(
            self.handle, arr, len(prompt), C.byref(p), self.cb, None,
            C.byref(rid)))
        return (rid.value if code == 0 else None), code, msg

    def wait(self, rids, timeout=300):
        deadline = time.time() + timeout
        with self.lock:
            while not all(r in self.finish for r in rids):
                if not self.cv.wait(max(0.0, deadline - time.time())):
                    fail(f"timed out waiting for {len(rids)} requests")
        return [self.tokens.get(r, []) for r in rids]

    def wait_logprobs(self, rids, timeout=300):
        """(tokens, logprobs) of each request, once all have finished."""
        toks = self.wait(rids, timeout)
        with self.lock:
            return toks, [self.logprobs.get(r, []) for r in rids]

    def stats(self):
        s = EngineStats()
        self.rt.lib.kiln_rt_engine_stats(self.handle, C.byref(s))
        return s

    def cancel(self, rid):
        self.rt.lib.kiln_rt_engine_cancel(self.handle, C.c_uint64(rid))

    def release(self):
        self.rt.lib.kiln_rt_engine_release(self.handle)


def prompts(rt, count, seed, lo=1, hi=40):
    rng = random.Random(seed)
    V = rt.info.vocab_size
    out = []
    for _ in range(count):
        n = rng.randint(lo, hi)
        out.append([rt.info.bos_id] + [rng.randrange(3, V) for _ in range(n - 1)])
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("lib")
    ap.add_argument("artifact")
    ap.add_argument("mode")
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=24)
    ap.add_argument("--block-tokens", type=int, default=16)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch-invariant", action="store_true",
                    help="KILN_RT_ENGINE_BATCH_INVARIANT: invariant mode "
                    "also requires bit-identical logprobs and sampled "
                    "(seeded) requests")
    ap.add_argument("--logprob-tol", type=float, default=1e-3,
                    help="equal mode: |engine - session log softmax|")
    a = ap.parse_args()
    flags = 2 if a.batch_invariant else 0
    rt = Runtime(a.lib, a.artifact)
    ps = prompts(rt, a.requests, 7)
    if a.mode == "equal":
        eng = Engine(rt, block_tokens=a.block_tokens, threads=a.threads)
        worst = 0.0
        for i, p in enumerate(ps[:4]):
            rid, code, msg = eng.submit(p, a.max_tokens)
            (got,), (got_lp,) = eng.wait_logprobs([rid])
            want_lp = []
            want = rt.session_greedy(p, a.max_tokens, want_lp)
            if got != want:
                fail(f"request {i}: engine {got} != session {want}")
            for j, (x, y) in enumerate(zip(got_lp, want_lp)):
                if not x <= 0.0 or abs(x - y) > a.logprob_tol:
                    fail(f"request {i} token {j}: engine logprob {x} != "
                         f"session log softmax {y} (tolerance {a.logprob_tol})")
                worst = max(worst, abs(x - y))
        # Sampled requests report the raw distribution's log probability of
        # the token drawn (not of the tempered / truncated one).
        for i, p in enumerate(ps[4:6]):
            rid, code, msg = eng.submit(p, a.max_tokens, temperature=0.9,
                                        seed=77 + i)
            (got,), (got_lp,) = eng.wait_logprobs([rid])
            want_lp = rt.session_logprobs(p, got)
            for j, (x, y) in enumerate(zip(got_lp, want_lp)):
                if not x <= 0.0 or abs(x - y) > a.logprob_tol:
                    fail(f"sampled request {i} token {j} ({got[j]}): engine "
                         f"logprob {x} != session log softmax {y}")
        print(f"equal: {min(4, len(ps))} requests match the session path; "
              f"logprobs within {a.logprob_tol}, sampled ones too")
    elif a.mode == "invariant":
        # With --batch-invariant, every other request samples (seeded):
        # bit-identical logits make its draws identical too.
        def temp(i):
            return 0.9 if a.batch_invariant and i % 2 else 0.0
        alone = Engine(rt, block_tokens=a.block_tokens, threads=a.threads,
                       flags=flags)
        want, want_lp = [], []
        for i, p in enumerate(ps):
            rid, code, msg = alone.submit(p, a.max_tokens, temp(i), 1000 + i)
            (t,), (lp,) = alone.wait_logprobs([rid])
            want.append(t)
            want_lp.append(lp)
        alone.release()
        # A pool of three full-context sequences (preemption when 16 run)
        # and a step budget of 24 tokens (chunked prefill).
        ctx = 128
        blocks_per_seq = (ctx + a.block_tokens - 1) // a.block_tokens
        eng = Engine(rt, block_tokens=a.block_tokens, threads=a.threads,
                     max_batch=16, max_step_tokens=24, context_length=ctx,
                     flags=flags,
                     kv_cache_bytes=3 * blocks_per_seq *
                     block_bytes(a.artifact, a.block_tokens))
        rids = []
        for i, p in enumerate(ps):
            rid, code, msg = eng.submit(p, a.max_tokens, temp(i), 1000 + i)
            if rid is None:
                fail(msg)
            rids.append(rid)
        got, got_lp = eng.wait_logprobs(rids)
        for i, (g, w) in enumerate(zip(got, want)):
            if g != w:
                fail(f"request {i}: batched {g} != alone {w}")
            if a.batch_invariant and got_lp[i] != want_lp[i]:
                j = next(j for j, (x, y) in enumerate(zip(got_lp[i], want_lp[i]))
                         if x != y)
                fail(f"request {i} token {j}: batched logprob "
                     f"{got_lp[i][j]!r} != alone {want_lp[i][j]!r} "
                     "(batch-invariant mode must be bit-identical)")
        s = eng.stats()
        if s.kv_blocks_used != 0 or s.num_running != 0:
            fail(f"{s.kv_blocks_used} KV blocks still used, "
                 f"{s.num_running} running after every request finished")
        print(f"invariant: {len(ps)} requests identical batched and alone; "
              f"preemptions>0: {s.num_preemptions > 0}; blocks used 0 of "
              f"{s.kv_blocks_total}")
        if a.batch_invariant:
            print(f"invariant: logprobs bit-identical; "
                  f"{sum(1 for i in range(len(ps)) if temp(i))} of them sampled")
    elif a.mode == "prefix":
        rng = random.Random(3)
        V = rt.info.vocab_size
        system = [rt.info.bos_id] + [rng.randrange(3, V) for _ in range(100)]
        reqs = [system + [rng.randrange(3, V) for _ in range(rng.randint(1, 9))]
                for _ in range(6)]
        plain = Engine(rt, block_tokens=a.block_tokens, threads=a.threads,
                       flags=1)
        want = plain.wait([plain.submit(r, a.max_tokens)[0] for r in reqs])
        if plain.stats().prefix_cache_hits != 0:
            fail("prefix caching off, yet hits were counted")
        plain.release()
        eng = Engine(rt, block_tokens=a.block_tokens, threads=a.threads)
        first = eng.wait([eng.submit(reqs[0], a.max_tokens)[0]])
        rest = eng.wait([eng.submit(r, a.max_tokens)[0] for r in reqs[1:]])
        if first + rest != want:
            fail("prefix-cached outputs differ from the uncached run")
        s = eng.stats()
        full = (len(system) // a.block_tokens) * a.block_tokens
        if s.prefix_cache_hits < full * (len(reqs) - 1):
            fail(f"prefix cache hits {s.prefix_cache_hits} < "
                 f"{full * (len(reqs) - 1)} (the shared prefix's full blocks)")
        print(f"prefix: {len(reqs)} requests equal with and without the "
              f"cache; hit rate {s.prefix_cache_hits / s.prefix_cache_queries:.2f}")
    elif a.mode == "cancel":
        eng = Engine(rt, block_tokens=a.block_tokens, threads=a.threads)
        long = max(8, rt.info.max_seq_len // 2)
        started = threading.Event()
        eng.on_token = lambda rid, tok: started.set()
        rids = [eng.submit(p, min(long, rt.info.max_seq_len - len(p)))[0]
                for p in ps[:4]]
        started.wait(60)
        for r in rids:
            eng.cancel(r)
        eng.wait(rids)
        reasons = {eng.finish[r] for r in rids}
        s = eng.stats()
        if "cancelled" not in reasons:
            fail(f"no request reports cancelled: {reasons}")
        if s.kv_blocks_used != 0:
            fail(f"{s.kv_blocks_used} KV blocks used after cancelling")
        print("cancel: cancelled requests end with 'cancelled' and free "
              "their blocks")
    elif a.mode == "errors":
        eng = Engine(rt, block_tokens=a.block_tokens, threads=a.threads,
                     max_queue=2)
        V, ctx = rt.info.vocab_size, eng.stats().context_length
        cases = [([1, V], 4, "outside the vocabulary"),
                 ([1, -1], 4, "outside the vocabulary"),
                 ([], 4, "no tokens"),
                 ([1, 2], 0, "max_tokens must be at least 1"),
                 ([1] * 4, ctx, "exceed the context")]
        for prompt, mt, want in cases:
            rid, code, msg = eng.submit(prompt, mt)
            if rid is not None or want not in msg:
                fail(f"submit({prompt[:4]}, {mt}) gave {code} {msg!r}, "
                     f"expected an error containing {want!r}")
            print(f"errors: {msg}")
        # kiln_rt_engine_submit_speculative: an unknown mode, draft_max
        # outside [1, 32].
        rt.lib.kiln_rt_engine_submit_speculative.restype = C.c_void_p
        for mode, kmax, want in ((7, 4, "is not one of off (0), ngram (1), suffix (2)"),
                                 (1, 0, "draft_max must be in [1, 32], got 0"),
                                 (2, 33, "draft_max must be in [1, 32], got 33")):
            p = RequestParams()
            p.sampling.top_p = 1.0
            p.max_tokens = 4
            spec = (C.c_int32 * 2)(mode, kmax)
            arr = (C.c_int32 * 2)(1, 2)
            rid = C.c_uint64()
            code, msg = rt.status(rt.lib.kiln_rt_engine_submit_speculative(
                eng.handle, arr, 2, C.byref(p), spec, eng.cb, None,
                C.byref(rid)))
            if code == 0 or want not in msg:
                fail(f"speculative mode {mode} draft_max {kmax} gave {code} {msg!r}")
            print(f"errors: {msg}")
        o = EngineOptions()
        o.flags = 1 << 7
        h = C.c_void_p()
        code, msg = rt.status(rt.lib.kiln_rt_engine_create(rt.art, C.byref(o),
                                                           C.byref(h)))
        if code == 0 or "unknown bits" not in msg:
            fail(f"engine flags 128 gave {code} {msg!r}")
        print(f"errors: {msg}")
    else:
        fail(f"unknown mode {a.mode}")


def block_bytes(artifact, block_tokens):
    """Bytes of one KV block of all layers (Engine.h kvBlockBytes)."""
    import json
    import os
    with open(os.path.join(artifact, "manifest.json")) as f:
        kv = json.load(f)["runtime"]["kv_cache"]
    elem = {"f32": 4, "f16": 2, "bf16": 2, "int8": 1, "fp8_e4m3": 1}[kv["dtype"]]
    quant = kv["dtype"] in ("int8", "fp8_e4m3")
    row = kv["kv_heads"] * kv["head_dim"] * elem + (kv["kv_heads"] * 4 if quant else 0)
    return kv["layers"] * 2 * row * block_tokens


if __name__ == "__main__":
    main()
