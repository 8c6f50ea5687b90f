#!/usr/bin/env python3
"""Checks Kiln's dynamic block-sparse prefill attention
(kiln_k_attention_sparse in libkiln_runtime.so, called through ctypes)
against a float64 numpy implementation written from its definition
(kernel_abi.h; docs/sparse-attention.md): each key block's attention mass
per (KV head, query block) estimated per query head from every row's softmax
over the blocks' mean keys (or, with a stride S, over every S-th key on
antidiagonals of the optional blocks, each standing for S keys, with the
sink and local blocks' keys scored exactly), blocks taken by their largest mass over the group's heads
until every head's kept mass reaches gamma,
sink and local blocks always kept, blocks added in order of estimated mass
until gamma, the budget limits, then exact causal attention over the kept
keys; streaming KV heads (the `streaming` bit mask) keep only the sink and
local blocks. Also checks the dense fallbacks against kiln_k_attention bit
for bit.

usage: sparse_attention_ref.py LIBKILN_RUNTIME.so
Prints one line per case and PASS, or FAIL and exits 1.
"""
import ctypes as C
import math
import sys

import numpy as np

F = C.POINTER(C.c_float)
I64 = C.c_int64


def ptr(a):
    return a.ctypes.data_as(F)


class Kernels:
    def __init__(self, lib):
        self.lib = C.CDLL(lib, mode=C.RTLD_GLOBAL)
        self.sparse = self.lib.kiln_k_attention_sparse
        self.sparse.restype = None
        self.sparse.argtypes = [F] * 6 + [I64] * 6 + [C.c_float, C.c_float] + [I64] * 9
        self.dense = self.lib.kiln_k_attention
        self.dense.restype = None
        self.dense.argtypes = [F] * 6 + [I64] * 6 + [C.c_float]
        self.audit = self.lib.kiln_rt_sparse_attention_audit
        self.audit.restype = None
        self.audit.argtypes = [C.c_int]
        self.layer_audit_fn = self.lib.kiln_rt_sparse_attention_layer_audit
        self.layer_audit_fn.restype = None
        self.layer_audit_fn.argtypes = [I64, C.POINTER(C.c_double)]
        self.decode = self.lib.kiln_k_attention_sparse_decode
        self.decode.restype = None
        self.decode.argtypes = [F] * 8 + [I64] * 6 + [C.c_float, C.c_float] + [I64] * 9
        self.summary = self.lib.kiln_k_attention_sparse_summary
        self.summary.restype = None
        self.summary.argtypes = [F] * 8 + [I64] * 6 + [C.c_float, C.c_float] + [I64] * 9
        self.paged = self.lib.kiln_k_paged_attention_sparse
        self.paged.restype = None
        self.paged.argtypes = [C.c_void_p, C.c_int32] + [C.c_void_p] * 4 + [I64] * 5 + \
            [C.c_float, C.c_float] + [I64] * 9
        self.decode_stats_fn = self.lib.kiln_rt_sparse_decode_stats
        self.decode_stats_fn.restype = None
        self.decode_stats_fn.argtypes = [C.POINTER(C.c_int64), C.c_int]
        self.stats_fn = self.lib.kiln_rt_sparse_attention_stats
        self.stats_fn.restype = None
        self.stats_fn.argtypes = [C.POINTER(C.c_int64), C.c_int]

    def layer_audit(self, layer):
        out = (C.c_double * 4)()
        self.layer_audit_fn(layer, out)
        return list(out)

    def decode_stats(self):
        out = (C.c_int64 * 4)()
        self.decode_stats_fn(out, 1)
        return list(out)

    def stats(self):
        out = (C.c_int64 * 4)()
        self.stats_fn(out, 1)
        return list(out)


def run(kern, fn, q, k, v, kc, vc, pos, H, G, hd, scale, params=None):
    n = q.shape[0]
    out = np.zeros((n, H * hd), dtype=np.float32)
    args = [ptr(q), ptr(k), ptr(v), ptr(kc), ptr(vc), ptr(out), n, pos, H, G,
            hd, kc.shape[0], scale]
    if params is not None:
        args += [params["gamma"], params["block"], params["sink"],
                 params["local"], params["min_budget"], params["max_budget"],
                 params["min_tokens"], 0, params.get("streaming", 0),
                 params.get("stride", 0)]
    fn(*args)
    return out


def take_blocks(m, peak, chosen, cnt, p):
    """The gamma rule: blocks in order of `peak` (ties: the earlier) until
    every head's kept mass (rows of m) reaches gamma and min_budget keys are
    kept, then the last taken dropped down to max_budget keys."""
    nb = m.shape[1]
    have = m[:, sorted(chosen)].sum(axis=1)
    nkeys = sum(cnt[kb] for kb in chosen)
    order = sorted((kb for kb in range(nb) if kb not in chosen), key=lambda kb: (-peak[kb], kb))
    taken = []
    for kb in order:
        if (have >= p["gamma"]).all() and nkeys >= p["min_budget"]:
            break
        chosen.add(kb)
        taken.append(kb)
        have += m[:, kb]
        nkeys += cnt[kb]
    if p["max_budget"] > 0:
        while nkeys > p["max_budget"] and taken:
            kb = taken.pop()
            chosen.discard(kb)
            nkeys -= cnt[kb]
    return sorted(chosen)


def run_summary(kern, fn, q, k, v, kc, vc, kmin, kmax, pos, H, G, hd, scale, p):
    """kiln_k_attention_sparse_summary / _decode (caches with key summaries)."""
    n = q.shape[0]
    out = np.zeros((n, H * hd), dtype=np.float32)
    fn(ptr(q), ptr(k), ptr(v), ptr(kc), ptr(vc), ptr(kmin), ptr(kmax), ptr(out),
       n, pos, H, G, hd, kc.shape[0], scale, p["gamma"], p["block"], p["sink"],
       p["local"], p["min_budget"], p["max_budget"], p["min_tokens"], 0,
       p.get("streaming", 0), p.get("stride", 0))
    return out


def quest_select(q, keys, pos, H, G, hd, scale, p):
    """Quest decode's kept pages per KV head (from exact page minima and
    maxima of the keys), or None for dense."""
    n = q.shape[0]
    T = pos + n
    B = p["block"]
    pages = -(-T // B)
    if p["gamma"] >= 1 or T < p["min_tokens"] or pages <= p["sink"] + p["local"]:
        return None
    group = H // G
    K = keys[:T].astype(np.float64)
    kept = {}
    count = 0
    for g in range(G):
        Kg = K[:, g * hd:(g + 1) * hd]
        mn = np.array([Kg[kb * B:min(T, (kb + 1) * B)].min(0) for kb in range(pages)])
        mx = np.array([Kg[kb * B:min(T, (kb + 1) * B)].max(0) for kb in range(pages)])
        chosen = set(range(min(p["sink"], pages))) | set(range(max(0, pages - p["local"]), pages))
        if (p.get("streaming", 0) >> g) & 1:
            kept[g] = sorted(chosen)
            count += len(chosen)
            continue
        # Pages ordered by their score bound (the largest over rows and
        # heads), their mass estimated from the midpoint key (min + max) / 2.
        m = np.zeros((group, pages))
        peak = np.full(pages, -np.inf)
        for hi in range(group):
            h = g * group + hi
            for i in range(n):
                qv = q[i, h * hd:(h + 1) * hd].astype(np.float64)
                pa = pos + i
                keys_in = np.array([min(B, pa + 1 - kb * B) for kb in range(pages)], dtype=np.float64)
                ln = np.log(np.maximum(keys_in, 1))
                bound = np.maximum(qv[None] * mn, qv[None] * mx).sum(1)
                peak = np.maximum(peak, np.where(keys_in > 0, scale * bound + ln, -np.inf))
                mid = (qv[None] * (mn + mx) / 2).sum(1)
                logit = np.where(keys_in > 0, scale * mid + ln, -np.inf)
                e = np.exp(logit - logit.max())
                m[hi] += e / e.sum()
            m[hi] /= n
        cnt = [min(B, T - kb * B) for kb in range(pages)]
        kept[g] = take_blocks(m, peak, chosen, cnt, p)
        count += len(chosen)
    if count >= 0.9 * pages * G:
        return None
    return kept, count, pages * G


def attend_pages(q, keys, values, pos, H, G, hd, scale, kept, B):
    """Each new row over its KV head's kept pages, up to its position."""
    n = q.shape[0]
    group = H // G
    out = np.zeros((n, H * hd))
    for i in range(n):
        pa = pos + i
        for h in range(H):
            g = h // group
            if kept is None:
                idx = np.arange(0, pa + 1)
            else:
                idx = np.concatenate([np.arange(kb * B, (kb + 1) * B) for kb in kept[g]])
                idx = idx[idx <= pa]
            Kh = keys[idx, g * hd:(g + 1) * hd].astype(np.float64)
            Vh = values[idx, g * hd:(g + 1) * hd].astype(np.float64)
            sc = scale * Kh.dot(q[i, h * hd:(h + 1) * hd].astype(np.float64))
            w = np.exp(sc - sc.max())
            w /= w.sum()
            out[i, h * hd:(h + 1) * hd] = w.dot(Vh)
    return out


def estimate_row(qv, keys_g, p_abs, nb, B, scale, stride, mandatory):
    """One row's estimated mass per key block kb < nb (float64)."""
    if stride == 0:
        # Pooled: softmax over the blocks' mean keys, weighted by the keys
        # the row sees in each.
        T = keys_g.shape[0]
        kbar = np.array([keys_g[kb * B:min(T, (kb + 1) * B)].mean(0) for kb in range(nb)])
        seen = np.array([min(B, p_abs + 1 - kb * B) for kb in range(nb)], dtype=np.float64)
        logit = scale * kbar.dot(qv) + np.log(seen)
        e = np.exp(logit - logit.max())
        return e / e.sum()
    # Antidiagonal, a Horvitz-Thompson estimate of the row's softmax: the
    # keys of the mandatory (sink, local) blocks scored exactly, the other
    # blocks' keys sampled (j <= p with (p + j) mod S == S - 1), each
    # sampled key standing for S keys; shares summed per block.
    mand = np.array([j for kb in sorted(mandatory)
                     for j in range(kb * B, min(p_abs + 1, (kb + 1) * B))], dtype=np.int64)
    js = np.arange(0, p_abs + 1)
    js = js[(p_abs + js) % stride == stride - 1]
    js = js[~np.isin(js // B, sorted(mandatory))]
    s_m = scale * keys_g[mand].dot(qv)
    s_o = scale * keys_g[js].dot(qv)
    top = max(s_m.max() if len(s_m) else -np.inf, s_o.max() if len(s_o) else -np.inf)
    w_m = np.exp(s_m - top)
    w_o = stride * np.exp(s_o - top)
    z = w_m.sum() + w_o.sum()
    m = np.zeros(nb)
    np.add.at(m, mand // B, w_m / z)
    np.add.at(m, js // B, w_o / z)
    return m


def select(q, keys, pos, H, G, hd, scale, p):
    """Kept key blocks per (kv head, query block), or None for dense."""
    n = q.shape[0]
    T = pos + n
    B = p["block"]
    stride = p.get("stride", 0)
    kblocks = -(-T // B)
    if p["gamma"] >= 1 or T < p["min_tokens"] or kblocks <= p["sink"] + p["local"]:
        return None
    group = H // G
    K = keys[:T].astype(np.float64)
    qb0 = pos // B
    qb1 = (T - 1) // B
    kept = {}
    total = 0
    count = 0
    for g in range(G):
        for qb in range(qb0, qb1 + 1):
            r0 = max(pos, qb * B) - pos
            r1 = min(T, (qb + 1) * B) - pos
            nb = qb + 1
            cnt = [min(B, pos + r1 - kb * B) for kb in range(nb)]
            chosen = set(range(min(p["sink"], nb))) | set(range(max(0, qb - p["local"] + 1), qb + 1))
            if (p.get("streaming", 0) >> g) & 1:
                # A streaming head: the sink and local blocks only.
                kept[(g, qb)] = sorted(chosen)
                total += nb
                count += len(chosen)
                continue
            # Each head's mass: the mean of its rows' estimates.
            m = np.zeros((group, nb))
            for hi in range(group):
                h = g * group + hi
                for r in range(r0, r1):
                    e = estimate_row(q[r, h * hd:(h + 1) * hd].astype(np.float64),
                                     K[:, g * hd:(g + 1) * hd], pos + r, nb, B, scale, stride,
                                     chosen)
                    if e is not None:
                        m[hi] += e
                m[hi] /= m[hi].sum()
            kept[(g, qb)] = take_blocks(m, m.max(axis=0), chosen, cnt, p)
            total += nb
            count += len(chosen)
    if count >= 0.9 * total:
        return None
    return kept, count, total


def attend(q, keys, values, pos, H, G, hd, scale, kept, B):
    """Causal attention of each new row over its query block's kept keys."""
    n = q.shape[0]
    group = H // G
    out = np.zeros((n, H * hd))
    for i in range(n):
        p_abs = pos + i
        qb = p_abs // B
        for h in range(H):
            g = h // group
            if kept is None:
                idx = np.arange(0, p_abs + 1)
            else:
                idx = np.concatenate([np.arange(kb * B, min(pos + n, (kb + 1) * B)) for kb in kept[(g, qb)]])
                idx = idx[idx <= p_abs]
            K = keys[idx, g * hd:(g + 1) * hd].astype(np.float64)
            V = values[idx, g * hd:(g + 1) * hd].astype(np.float64)
            s = scale * K.dot(q[i, h * hd:(h + 1) * hd].astype(np.float64))
            w = np.exp(s - s.max())
            w /= w.sum()
            out[i, h * hd:(h + 1) * hd] = w.dot(V)
    return out


def structured(rng, T, H, G, hd, B, hot):
    """Queries and keys where the `hot` key blocks carry most attention."""
    q = rng.standard_normal((T, H * hd)).astype(np.float32) * 0.3
    k = rng.standard_normal((T, G * hd)).astype(np.float32) * 0.3
    v = rng.standard_normal((T, G * hd)).astype(np.float32)
    direction = rng.standard_normal(hd).astype(np.float32)
    direction /= np.linalg.norm(direction)
    for g in range(G):
        for h in range(g * (H // G), (g + 1) * (H // G)):
            q[:, h * hd:(h + 1) * hd] += 3.0 * direction
        for kb in hot:
            k[kb * B:(kb + 1) * B, g * hd:(g + 1) * hd] += 3.0 * direction
    return q, k, v


def main():
    kern = Kernels(sys.argv[1])
    rng = np.random.default_rng(7)
    ok = True

    def report(name, good, detail):
        nonlocal ok
        ok &= good
        print("sparse_attention_ref: %s: %s (%s)" % (name, "ok" if good else "MISMATCH", detail))

    H, G, hd, B = 4, 2, 16, 32
    scale = 1.0 / math.sqrt(hd)
    T = 320
    q, k, v = structured(rng, T, H, G, hd, B, hot=[3, 6])
    base = dict(gamma=0.9, block=B, sink=1, local=1, min_budget=0, max_budget=0, min_tokens=64)

    def fresh(max_seq=512):
        return (np.zeros((max_seq, G * hd), np.float32), np.zeros((max_seq, G * hd), np.float32))

    # Dense fallbacks: gamma = 1 and prompts below min_tokens run
    # kiln_k_attention itself.
    for name, p in (("gamma=1", dict(base, gamma=1.0)), ("below min_tokens", dict(base, min_tokens=1024))):
        kc, vc = fresh()
        s = run(kern, kern.sparse, q, k, v, kc, vc, 0, H, G, hd, scale, p)
        kc2, vc2 = fresh()
        d = run(kern, kern.dense, q, k, v, kc2, vc2, 0, H, G, hd, scale)
        report(name, np.array_equal(s, d) and np.array_equal(kc, kc2), "bit-identical to the dense kernel")
    kern.stats()

    # One prompt, and the same prompt in two chunks (the second over a KV
    # prefix), and budget limits.
    cases = [("gamma=0.9", base, [(0, T)]),
             ("chunked 200+120", base, [(0, 200), (200, 120)]),
             ("max_budget=96", dict(base, gamma=0.99, max_budget=96), [(0, T)]),
             ("min_budget=160", dict(base, gamma=0.5, min_budget=160), [(0, T)]),
             ("streaming head 1", dict(base, streaming=0b10), [(0, T)]),
             ("antidiag stride 4", dict(base, stride=4), [(0, T)]),
             ("antidiag stride 7, chunked", dict(base, stride=7), [(0, 200), (200, 120)]),
             ("antidiag stride 1", dict(base, stride=1, gamma=0.8), [(0, T)]),
             ("streaming, chunked", dict(base, streaming=0b01), [(0, 200), (200, 120)])]
    for name, p, chunks in cases:
        kc, vc = fresh()
        worst = 0.0
        kept_total = 0
        pairs_total = 0
        for pos, n in chunks:
            qs, ks, vs = q[pos:pos + n].copy(), k[pos:pos + n].copy(), v[pos:pos + n].copy()
            got = run(kern, kern.sparse, qs, ks, vs, kc, vc, pos, H, G, hd, scale, p)
            sel = select(qs, k, pos, H, G, hd, scale, p)
            kept = None if sel is None else sel[0]
            if sel is not None:
                kept_total += sel[1]
                pairs_total += sel[2]
            want = attend(qs, k, v, pos, H, G, hd, scale, kept, B)
            worst = max(worst, float(np.abs(got - want).max() / np.abs(want).max()))
        st = kern.stats()
        density = st[0] / st[1] if st[1] else 1.0
        good = worst < 1e-5 and st[0] == kept_total and st[1] == pairs_total and density < 0.9
        if p.get("max_budget") and sel is not None:
            # Over the budget only by the mandatory sink and local blocks.
            mandatory = (p["sink"] + p["local"]) * B
            good &= all(len(kb) * B <= max(p["max_budget"], mandatory) for kb in sel[0].values())
        report(name, good, "max rel err %.2e, density %.3f (%d of %d block pairs)" % (worst, density, st[0], st[1]))

    # The estimate found the hot blocks: without them the output differs.
    kc, vc = fresh()
    got = run(kern, kern.sparse, q, k, v, kc, vc, 0, H, G, hd, scale, base)
    sel = select(q, k, 0, H, G, hd, scale, base)
    hot_kept = all(3 in sel[0][(g, qb)] for g in range(G) for qb in range(4, T // B))
    report("hot blocks kept", hot_kept, "key block 3 kept by every later query block")
    # A streaming head never keeps them: its blocks are sink + local only.
    sel = select(q, k, 0, H, G, hd, scale, dict(base, streaming=0b10))
    streams = all(sel[0][(1, qb)] == sorted({0} | {qb}) for qb in range(T // B)) and \
        all(3 in sel[0][(0, qb)] for qb in range(4, T // B))
    report("streaming head keeps sink + local", streams,
           "KV head 1 keeps blocks {0, qb}; KV head 0 still keeps block 3")

    # The audit (api.h kiln_rt_sparse_attention_audit): the captured mass
    # (mean and minimum over rows and heads of the exact probabilities on
    # the kept keys) and the output's relative error against dense, from
    # the selection above and float64 attention.
    kern.audit(1)
    kc, vc = fresh()
    run(kern, kern.sparse, q, k, v, kc, vc, 0, H, G, hd, scale, base)
    got = kern.layer_audit(0)
    kern.audit(0)
    sel = select(q, k, 0, H, G, hd, scale, base)
    group = H // G
    captured = []
    for i in range(T):
        for h in range(H):
            g = h // group
            s_ = scale * k[:i + 1, g * hd:(g + 1) * hd].astype(np.float64).dot(q[i, h * hd:(h + 1) * hd].astype(np.float64))
            w = np.exp(s_ - s_.max())
            w /= w.sum()
            keep = np.zeros(i + 1, bool)
            for kb in sel[0][(g, i // B)]:
                keep[kb * B:min(i + 1, (kb + 1) * B)] = True
            captured.append(w[keep].sum())
    dense = attend(q, k, v, 0, H, G, hd, scale, None, B)
    sparse = attend(q, k, v, 0, H, G, hd, scale, sel[0], B)
    err = np.linalg.norm(sparse - dense) / np.linalg.norm(dense)
    want = [T * H, np.mean(captured), np.min(captured), err]
    good = got[0] == want[0] and abs(got[1] - want[1]) < 1e-5 and \
        abs(got[2] - want[2]) < 1e-5 and abs(got[3] - want[3]) < 1e-4 * max(want[3], 1e-3) + 1e-6
    report("audit", good, "captured mass mean %.5f min %.5f, output rel err %.4g (numpy: %.5f, %.5f, %.4g)"
           % (got[1], got[2], got[3], want[1], want[2], want[3]))

    # Quest decode (kiln_k_attention_sparse_decode): a 288-token prompt
    # through the summary kernel, then 32 decode steps of one row; the key
    # summaries equal the pages' exact minima and maxima, each step's kept
    # pages and output equal numpy's.
    Tq = 320
    pq = dict(base, gamma=0.8, min_tokens=64)
    pages = -(-512 // B)
    for name, params in (("quest decode", pq), ("quest decode, streaming head 0", dict(pq, streaming=0b01))):
        kc, vc = fresh()
        kmin = np.zeros((pages, G * hd), np.float32)
        kmax = np.zeros((pages, G * hd), np.float32)
        run_summary(kern, kern.summary, q[:288].copy(), k[:288].copy(), v[:288].copy(), kc, vc, kmin, kmax, 0, H, G, hd, scale, params)
        kern.decode_stats()
        worst = 0.0
        kept_total = pairs_total = 0
        for t in range(288, Tq):
            got = run_summary(kern, kern.decode, q[t:t + 1].copy(), k[t:t + 1].copy(), v[t:t + 1].copy(), kc, vc, kmin, kmax, t, H, G, hd, scale, params)
            sel = quest_select(q[t:t + 1], k, t, H, G, hd, scale, params)
            if sel is not None:
                kept_total += sel[1]
                pairs_total += sel[2]
            want = attend_pages(q[t:t + 1], k, v, t, H, G, hd, scale, None if sel is None else sel[0], B)
            worst = max(worst, float(np.abs(got - want).max() / np.abs(want).max()))
        st = kern.decode_stats()
        mins = np.array([k[kb * B:min(Tq, (kb + 1) * B)].min(0) for kb in range(-(-Tq // B))])
        maxs = np.array([k[kb * B:min(Tq, (kb + 1) * B)].max(0) for kb in range(-(-Tq // B))])
        summaries = np.array_equal(kmin[:len(mins)], mins) and np.array_equal(kmax[:len(maxs)], maxs)
        good = worst < 1e-5 and st[0] == kept_total and st[1] == pairs_total and st[2] == Tq - 288 and summaries and kept_total < pairs_total
        report(name, good, "max rel err %.2e, density %.3f (%d of %d pages), summaries %s"
               % (worst, st[0] / max(st[1], 1), st[0], st[1], "exact" if summaries else "WRONG"))
    # gamma = 1: the dense decode, bit for bit.
    kc, vc = fresh()
    kc2, vc2 = fresh()
    kmin = np.zeros((pages, G * hd), np.float32)
    kmax = np.zeros((pages, G * hd), np.float32)
    run(kern, kern.dense, q[:288].copy(), k[:288].copy(), v[:288].copy(), kc2, vc2, 0, H, G, hd, scale)
    run_summary(kern, kern.summary, q[:288].copy(), k[:288].copy(), v[:288].copy(), kc, vc, kmin, kmax, 0, H, G, hd, scale, dict(pq, gamma=1.0))
    same = True
    for t in range(288, 296):
        a = run_summary(kern, kern.decode, q[t:t + 1].copy(), k[t:t + 1].copy(), v[t:t + 1].copy(), kc, vc, kmin, kmax, t, H, G, hd, scale, dict(pq, gamma=1.0))
        b = run(kern, kern.dense, q[t:t + 1].copy(), k[t:t + 1].copy(), v[t:t + 1].copy(), kc2, vc2, t, H, G, hd, scale)
        same &= np.array_equal(a, b)
    report("quest decode gamma=1", same, "bit-identical to the dense decode")

    # The serving engine's paged pools (kiln_k_paged_attention_sparse): the
    # same prompt in two chunks through a shuffled block table of 16-row
    # pages gives the contiguous kernel's outputs bit for bit.
    class PagedKv(C.Structure):
        _fields_ = [("format", C.c_int32), ("block_tokens", C.c_int32),
                    ("k_pool", C.c_void_p), ("v_pool", C.c_void_p),
                    ("k_scales", C.c_void_p), ("v_scales", C.c_void_p),
                    ("k_mean", C.c_void_p), ("rot_dim", C.c_int64),
                    ("theta", C.c_float), ("block_table", C.c_void_p)]
    page = 16
    npages = 512 // page
    table = np.random.default_rng(3).permutation(npages).astype(np.int32)
    for name, params in (("paged = contiguous (flex)", base), ("paged = contiguous (antidiag)", dict(base, stride=4))):
        kpool = np.zeros((npages * page, G * hd), np.float32)
        vpool = np.zeros((npages * page, G * hd), np.float32)
        desc = PagedKv(0, page, kpool.ctypes.data, vpool.ctypes.data, None, None, None, 0, 0.0, table.ctypes.data)
        kc, vc = fresh()
        same = True
        for pos, n in ((0, 200), (200, 120)):
            qs, ks, vs = q[pos:pos + n].copy(), k[pos:pos + n].copy(), v[pos:pos + n].copy()
            want = run(kern, kern.sparse, qs, ks, vs, kc, vc, pos, H, G, hd, scale, params)
            got = np.zeros_like(want)
            kern.paged(C.byref(desc), 0, qs.ctypes.data, ks.ctypes.data, vs.ctypes.data, got.ctypes.data,
                       n, pos, H, G, hd, scale, params["gamma"], params["block"], params["sink"], params["local"],
                       params["min_budget"], params["max_budget"], params["min_tokens"], 0, 0, params.get("stride", 0))
            same &= np.array_equal(got, want)
        kern.stats()
        report(name, same, "two chunks through a shuffled block table, bit for bit")
    print("sparse_attention_ref: PASS" if ok else "sparse_attention_ref: FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
