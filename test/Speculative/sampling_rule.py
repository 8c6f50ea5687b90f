#!/usr/bin/env python3
"""The speculative-sampling rule (api.h kiln_rt_sampler_verify; Leviathan et
al. 2023, Chen et al. 2023) keeps the output distribution: on a vocabulary
of 8 with fixed logits, N = 40,000 verifications of a fixed draft token
return tokens whose counts pass a chi-square test against p, the
distribution kiln_rt_sampler_sample draws from (numpy: softmax of logits /
temperature, then top-k or the top-p nucleus, renormalised), at a
false-alarm rate of 0.1% per case (fixed seeds: the result is
reproducible); the acceptance rate is p(draft) within 4 standard errors;
greedy samplers return the argmax, accepted iff it is the draft.
For a draft model (kiln_rt_sampler_draft draws the draft token from q, the
distribution of the draft's logits, and returns q; kiln_rt_sampler_verify_q
keeps it with probability min(1, p/q), else draws from max(0, p - q)
normalised; Leviathan et al. 2023, Algorithm 1): q equals the reference,
the tokens pass the same chi-square test against p, and the acceptance rate
is sum_x min(p(x), q(x)) (their eq. 3's beta) within 4 standard errors.

usage: sampling_rule.py LIBKILN_RUNTIME.so
"""
import ctypes as C
import sys

import numpy as np

# chi-square quantiles at 0.999 for 1..10 degrees of freedom.
CHI2_999 = [10.828, 13.816, 16.266, 18.467, 20.515, 22.458, 24.322, 26.124,
            27.877, 29.588]


class Params(C.Structure):
    _fields_ = [("temperature", C.c_float), ("top_k", C.c_int32),
                ("top_p", C.c_float), ("seed", C.c_uint64)]


def reference(logits, t, top_k, top_p):
    p = np.exp((logits / t) - (logits / t).max())
    p /= p.sum()
    order = sorted(range(len(p)), key=lambda i: (-p[i], i))
    keep = order
    if 0 < top_k < len(p):
        keep = order[:top_k]
    if 0 < top_p < 1:
        total = sum(p[i] for i in keep)
        cum, nucleus = 0.0, []
        for i in keep:
            cum += p[i]
            nucleus.append(i)
            if cum > top_p * (total if 0 < top_k < len(p) else 1.0):
                break
        keep = nucleus
    q = np.zeros_like(p)
    q[keep] = p[keep]
    return q / q.sum()


def check_distribution(counts, p, case):
    """Fails unless the token counts fit p: none outside its support, and a
    chi-square statistic under the 0.999 quantile. Returns (chi2, df,
    limit)."""
    support = p > 0
    if counts[~support].sum() > 0:
        sys.exit(f"sampling_rule: FAIL: tokens outside p's support {counts}")
    expected = counts.sum() * p[support]
    chi2 = float(((counts[support] - expected) ** 2 / expected).sum())
    df = int(support.sum()) - 1
    limit = CHI2_999[df - 1] if df >= 1 else 0.0
    if df >= 1 and chi2 > limit:
        sys.exit(f"sampling_rule: FAIL {case}: chi2 {chi2:.2f} > {limit} (df {df})")
    return chi2, df, limit


def main():
    L = C.CDLL(sys.argv[1], mode=C.RTLD_GLOBAL)
    L.kiln_rt_sampler_create.restype = C.c_void_p
    L.kiln_rt_sampler_verify.restype = C.c_int32
    L.kiln_rt_sampler_verify.argtypes = [C.c_void_p, C.POINTER(C.c_float),
                                         C.c_int32, C.POINTER(C.c_int32)]
    logits = np.array([1.2, 0.3, 2.0, 1.9, -0.5, 0.8, 1.5, -1.0])
    V, N = len(logits), 40000
    arr = (C.c_float * V)(*logits.astype(np.float32))
    worst = 0.0
    for temp, top_k, top_p, draft in ((1.0, 0, 1.0, 3), (0.7, 0, 1.0, 0),
                                      (1.0, 4, 1.0, 6), (1.3, 0, 0.8, 2),
                                      (1.0, 5, 0.9, 1), (1.0, 0, 1.0, 7)):
        params = Params(temp, top_k, top_p, 12345 + draft)
        sampler = C.c_void_p()
        st = L.kiln_rt_sampler_create(C.byref(params), V, C.byref(sampler))
        if st:
            sys.exit("sampling_rule: FAIL: kiln_rt_sampler_create")
        counts = np.zeros(V)
        kept = 0
        acc = C.c_int32()
        for _ in range(N):
            t = L.kiln_rt_sampler_verify(sampler, arr, draft, C.byref(acc))
            counts[t] += 1
            kept += acc.value
        L.kiln_rt_sampler_release(sampler)
        p = reference(logits, temp, top_k, top_p)
        case = f"T={temp} top_k={top_k} top_p={top_p} draft={draft}"
        chi2, df, limit = check_distribution(counts, p, case)
        rate = kept / N
        se = (p[draft] * (1 - p[draft]) / N) ** 0.5
        if abs(rate - p[draft]) > 4 * se + 1e-12:
            sys.exit(f"sampling_rule: FAIL {case}: acceptance {rate:.4f} vs p(draft) {p[draft]:.4f}")
        worst = max(worst, chi2 / limit if limit else 0.0)
        print(f"sampling_rule: {case}: chi2 {chi2:.2f} (df {df}, limit {limit}), "
              f"acceptance {rate:.4f} = p(draft) {p[draft]:.4f}: ok")
    # A draft model's q.
    L.kiln_rt_sampler_draft.restype = C.c_int32
    L.kiln_rt_sampler_draft.argtypes = [C.c_void_p, C.POINTER(C.c_float),
                                        C.POINTER(C.c_float)]
    L.kiln_rt_sampler_verify_q.restype = C.c_int32
    L.kiln_rt_sampler_verify_q.argtypes = [
        C.c_void_p, C.POINTER(C.c_float), C.POINTER(C.c_float), C.c_int32,
        C.POINTER(C.c_int32)]
    qlogits = np.array([0.2, 1.1, 1.0, 2.2, 0.0, 0.9, 0.4, 0.5])
    qarr = (C.c_float * V)(*qlogits.astype(np.float32))
    qbuf = (C.c_float * V)()
    for temp, top_k, top_p in ((1.0, 0, 1.0), (0.7, 0, 1.0), (1.0, 4, 1.0),
                               (1.3, 0, 0.8)):
        params = Params(temp, top_k, top_p, 777)
        dparams = Params(temp, top_k, top_p, 999)
        sampler, dsampler = C.c_void_p(), C.c_void_p()
        if (L.kiln_rt_sampler_create(C.byref(params), V, C.byref(sampler)) or
                L.kiln_rt_sampler_create(C.byref(dparams), V, C.byref(dsampler))):
            sys.exit("sampling_rule: FAIL: kiln_rt_sampler_create")
        p = reference(logits, temp, top_k, top_p)
        qref = reference(qlogits, temp, top_k, top_p)
        counts = np.zeros(V)
        kept = 0
        acc = C.c_int32()
        for i in range(N):
            d = L.kiln_rt_sampler_draft(dsampler, qarr, qbuf)
            if i == 0 and np.abs(np.array(qbuf[:]) - qref).max() > 1e-5:
                sys.exit(f"sampling_rule: FAIL: q {qbuf[:]} vs {qref}")
            t = L.kiln_rt_sampler_verify_q(sampler, arr, qbuf, d, C.byref(acc))
            counts[t] += 1
            kept += acc.value
        L.kiln_rt_sampler_release(sampler)
        L.kiln_rt_sampler_release(dsampler)
        case = f"draft model T={temp} top_k={top_k} top_p={top_p}"
        chi2, df, limit = check_distribution(counts, p, case)
        beta = float(np.minimum(p, qref).sum())
        rate = kept / N
        se = (beta * (1 - beta) / N) ** 0.5
        if abs(rate - beta) > 4 * se + 1e-12:
            sys.exit(f"sampling_rule: FAIL {case}: acceptance {rate:.4f} vs beta {beta:.4f}")
        print(f"sampling_rule: {case}: chi2 {chi2:.2f} (df {df}, limit {limit}), "
              f"acceptance {rate:.4f} = sum min(p, q) {beta:.4f}: ok")
    # Greedy.
    params = Params(0.0, 0, 1.0, 1)
    sampler = C.c_void_p()
    L.kiln_rt_sampler_create(C.byref(params), V, C.byref(sampler))
    acc = C.c_int32()
    t = L.kiln_rt_sampler_verify(sampler, arr, 3, C.byref(acc))
    if t != 2 or acc.value != 0:
        sys.exit("sampling_rule: FAIL: greedy with a wrong draft")
    t = L.kiln_rt_sampler_verify(sampler, arr, 2, C.byref(acc))
    if t != 2 or acc.value != 1:
        sys.exit("sampling_rule: FAIL: greedy with the argmax as draft")
    print("sampling_rule: greedy: ok")
    print("sampling_rule: PASS")


if __name__ == "__main__":
    main()
