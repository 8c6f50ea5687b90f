#!/usr/bin/env python3
"""Checks speculative decoding's verify step and rollback through the C API
(api.h kiln_rt_session_verify / kiln_rt_session_rollback; docs/speculative.md)
on an artifact compiled with kiln-compile --speculative:

  * verify rows = decode: after a prompt, verifying k tokens in one step gives,
    for every row i, the logits that decoding tokens[0..i] one at a time gives
    (relative error below 1e-4: prefill and decode kernels sum in different
    orders), and kiln_rt_session_logits is the last row;
  * rollback = a fresh prefill: after verifying k tokens and rolling back to
    the prompt plus j of them, decoding a token gives the logits of a session
    that prefilled the prompt and the j tokens (and the position is right);
  * chunks: a verify longer than the artifact's max_prefill_tokens;
  * errors: rollback past the position or below 0, a null logits buffer, and
    an artifact without the entry point (NO_VERIFY given) name the problem.

usage: verify_check.py LIBKILN_RUNTIME.so ARTIFACT [NO_VERIFY_ARTIFACT]
"""
import ctypes as C
import math
import sys


def fail(msg):
    print("verify_check: FAIL: " + msg)
    sys.exit(1)


class ModelInfo(C.Structure):
    _fields_ = [("vocab_size", C.c_int64), ("max_seq_len", C.c_int64),
                ("max_prefill_tokens", C.c_int64),
                ("bos_id", C.c_int32), ("eos_id", C.c_int32),
                ("weights_bytes", C.c_uint64), ("arena_bytes", C.c_uint64),
                ("kv_cache_bytes", C.c_uint64),
                ("name", C.c_char_p), ("target", C.c_char_p),
                ("device", C.c_char_p), ("dtype", C.c_char_p),
                ("quant", C.c_char_p), ("kv_dtype", C.c_char_p)]


class Runtime:
    def __init__(self, lib):
        self.L = C.CDLL(lib, mode=C.RTLD_GLOBAL)
        L = self.L
        L.kiln_rt_status_message.restype = C.c_char_p
        L.kiln_rt_status_code.restype = C.c_int
        for f in ("kiln_rt_artifact_open", "kiln_rt_session_create",
                  "kiln_rt_session_prefill", "kiln_rt_session_decode",
                  "kiln_rt_session_verify", "kiln_rt_session_rollback"):
            getattr(L, f).restype = C.c_void_p
        L.kiln_rt_session_verify.argtypes = [C.c_void_p, C.POINTER(C.c_int32),
                                             C.c_int64, C.POINTER(C.c_float)]
        L.kiln_rt_session_rollback.argtypes = [C.c_void_p, C.c_int64]
        L.kiln_rt_session_logits.restype = C.POINTER(C.c_float)
        L.kiln_rt_session_position.restype = C.c_int64

    def status(self, st):
        if not st:
            return None
        msg = self.L.kiln_rt_status_message(C.c_void_p(st)).decode()
        self.L.kiln_rt_status_free(C.c_void_p(st))
        return msg

    def ok(self, st, what):
        msg = self.status(st)
        if msg:
            fail(f"{what}: {msg}")

    def open(self, path):
        art = C.c_void_p()
        self.ok(self.L.kiln_rt_artifact_open(path.encode(), 0, C.byref(art)),
                "open " + path)
        info = ModelInfo()
        self.L.kiln_rt_artifact_info(art, C.byref(info))
        return art, info

    def session(self, art):
        s = C.c_void_p()
        self.ok(self.L.kiln_rt_session_create(art, C.byref(s)), "session")
        return s


def ids(xs):
    return (C.c_int32 * len(xs))(*xs)


def rel_err(a, b):
    diff = max(abs(x - y) for x, y in zip(a, b))
    scale = max(abs(y) for y in b)
    return diff / scale if scale else diff


def main():
    if len(sys.argv) not in (3, 4):
        print(__doc__)
        sys.exit(2)
    rt = Runtime(sys.argv[1])
    L = rt.L
    art, info = rt.open(sys.argv[2])
    V = info.vocab_size
    prompt = [1, 403, 405, 260, 300, 269, 348, 360, 385, 297]
    draft = [279, 300, 322, 279, 400, 262, 410]
    k = len(draft)

    # Reference: decode the draft one token at a time.
    ref = rt.session(art)
    rt.ok(L.kiln_rt_session_prefill(ref, ids(prompt), len(prompt)), "prefill")
    ref_rows = []
    for t in draft:
        rt.ok(L.kiln_rt_session_decode(ref, t), "decode")
        ref_rows.append(L.kiln_rt_session_logits(ref)[:V])

    s = rt.session(art)
    rt.ok(L.kiln_rt_session_prefill(s, ids(prompt), len(prompt)), "prefill")
    rows = (C.c_float * (k * V))()
    rt.ok(L.kiln_rt_session_verify(s, ids(draft), k, rows), "verify")
    worst = max(rel_err(rows[i * V:(i + 1) * V], ref_rows[i]) for i in range(k))
    if worst > 1e-4:
        fail(f"verify rows differ from decode: max relative error {worst:.3g}")
    last = L.kiln_rt_session_logits(s)[:V]
    if last != rows[(k - 1) * V:k * V]:
        fail("kiln_rt_session_logits is not the last verified row")
    if L.kiln_rt_session_position(s) != len(prompt) + k:
        fail("position after verify")
    print(f"verify_check: verify rows = decode: ok ({k} rows, max rel err {worst:.2e})")

    # Rollback to prompt + j, decode one token: = prefill(prompt + draft[:j]).
    for j in (0, 3, k):
        rt.ok(L.kiln_rt_session_rollback(s, len(prompt) + j), "rollback")
        if L.kiln_rt_session_position(s) != len(prompt) + j:
            fail("position after rollback")
        if L.kiln_rt_session_logits(s):
            fail("logits survive a rollback")
        rt.ok(L.kiln_rt_session_decode(s, 300), "decode after rollback")
        got = L.kiln_rt_session_logits(s)[:V]
        fresh = rt.session(art)
        seq = prompt + draft[:j]
        rt.ok(L.kiln_rt_session_prefill(fresh, ids(seq), len(seq)), "prefill")
        rt.ok(L.kiln_rt_session_decode(fresh, 300), "decode")
        want = L.kiln_rt_session_logits(fresh)[:V]
        err = rel_err(got, want)
        if err > 1e-4:
            fail(f"rollback to +{j} then decode differs from a fresh prefill: {err:.3g}")
        L.kiln_rt_session_release(fresh)
        # Back to where the verify left the cache for the next case.
        rt.ok(L.kiln_rt_session_rollback(s, len(prompt) + j), "rollback")
        rest = draft[j:]
        if rest:
            r = (C.c_float * (len(rest) * V))()
            rt.ok(L.kiln_rt_session_verify(s, ids(rest), len(rest), r), "verify")
    print("verify_check: rollback = fresh prefill: ok (+0, +3, +7)")

    # A verify longer than max_prefill_tokens runs in chunks.
    long_draft = [(37 * i + 11) % V for i in range(70)]
    a = rt.session(art)
    rt.ok(L.kiln_rt_session_prefill(a, ids(prompt), len(prompt)), "prefill")
    big = (C.c_float * (70 * V))()
    rt.ok(L.kiln_rt_session_verify(a, ids(long_draft), 70, big), "verify 70")
    b = rt.session(art)
    seq = prompt + long_draft[:-1]
    rt.ok(L.kiln_rt_session_prefill(b, ids(seq), len(seq)), "prefill")
    rt.ok(L.kiln_rt_session_decode(b, long_draft[-1]), "decode")
    err = rel_err(big[69 * V:70 * V], L.kiln_rt_session_logits(b)[:V])
    if err > 1e-4:
        fail(f"chunked verify's last row differs: {err:.3g}")
    print("verify_check: chunked verify: ok")

    # Errors.
    msg = rt.status(L.kiln_rt_session_rollback(a, len(prompt) + 71))
    if not msg or "rollback to position" not in msg:
        fail(f"rollback past the position: {msg}")
    print("verify_check: error: " + msg)
    msg = rt.status(L.kiln_rt_session_rollback(a, -1))
    if not msg:
        fail("rollback to -1 accepted")
    msg = rt.status(L.kiln_rt_session_verify(a, ids([5]), 1, None))
    if not msg or "null" not in msg:
        fail(f"null logits buffer: {msg}")
    print("verify_check: error: " + msg)
    if len(sys.argv) == 4:
        plain, _ = rt.open(sys.argv[3])
        p = rt.session(plain)
        one = (C.c_float * V)()
        msg = rt.status(L.kiln_rt_session_verify(p, ids([5]), 1, one))
        if not msg or "--speculative" not in msg:
            fail(f"artifact without verify: {msg}")
        print("verify_check: error: " + msg)
    print("verify_check: PASS")


if __name__ == "__main__":
    main()
