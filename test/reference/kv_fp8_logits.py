#!/usr/bin/env python3
"""Logits of an FP8 (E4M3) KV-cache artifact against a float64 numpy forward
pass whose KV cache holds the same E4M3 quantization, so the check isolates
Kiln's FP8 append / dequantize / attention from the (expected) quantization
error.

usage: kv_fp8_logits.py --model MODEL --tokens 1,403,... --kiln-logits FILE
                        [--kv fp8|int8] [--calibration CALIB [--centered-gap G]]
                        [--tol 1e-3] [--min-gap 0]
       kv_fp8_logits.py --self-check

--kv int8 checks the INT8 cache instead (kernel_abi.h kiln_k_attention_kv8:
scale = amax / 127, q = round half away from zero, clamp to +-127).

--calibration CALIB checks key centering (kiln-center-keys, kernel_abi.h
kiln_k_attention_kv8_centered): mu = CALIB's `layers.<l>.key.mean` (the mean
pre-RoPE key, Kiln's adjacent-pair layout), m_t = mu rotated by RoPE to the
key's position t (llama_ref.rope, an independent rotation), and the cache
returns quant(k - m_t) + m_t for keys; values as without it. With
--centered-gap G it also requires the uncentered reference to be more than G
away from the logits, i.e. that the check would notice centering being off.

The quantization is the formula of kernel_abi.h (kiln_k_attention_kvf8), per
token and KV head over head_dim values: scale = amax / 448,
code = E4M3(x / scale) rounded to nearest, ties to even, saturating at 448,
value read back = scale * code. E4M3 is the OCP 8-bit floating point format
(OFP8 spec rev. 1.0, E4M3 "FN": bias 7, 3 mantissa bits, subnormals below
2^-6, max 448, no infinities). The encoder below is written from the format
(binade exponent -> grid step -> round half to even on the grid) and shares
nothing with the C++ bit manipulation; the forward pass is llama_ref's,
in float64 (scales and divisions too).

FILE is kiln-run --dump-logits output (rows for positions k-1..n-1,
k = (n + 1) // 2). Exits 1 if any row's max|kiln - ref| / max|ref| > tol.
It also reports the error of the unquantized reference: with --min-gap G it
requires that to exceed G, i.e. that the check would notice a cache that is
not FP8 at all.
"""
import argparse
import os
import sys

import numpy as np

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_ref  # noqa: E402

E4M3_MAX = 448.0
E4M3_MIN_NORMAL_EXP = -6  # smallest normal 2^-6
E4M3_MANTISSA_BITS = 3


def e4m3_round(y):
    """float64 array -> nearest E4M3FN value (as float64), ties to even,
    saturating to +-448. NaN stays NaN."""
    y = np.asarray(y, dtype=np.float64)
    a = np.abs(y)
    # Binade exponent floor(log2 a) from frexp (a = m 2^E, m in [0.5, 1)),
    # clamped to the subnormal range's exponent: there the grid is 2^-9.
    _, e = np.frexp(np.where(a > 0, a, 1.0))
    e = np.maximum(e - 1, E4M3_MIN_NORMAL_EXP)
    step = np.ldexp(1.0, e - E4M3_MANTISSA_BITS)
    q = np.round(a / step) * step  # np.round: half to even; a / step exact
    q = np.minimum(q, E4M3_MAX)
    return np.copysign(q, y)


def fp8_kv(x):
    """Per (token, kv head) scaled E4M3 of x [n, kv_heads, head_dim]."""
    amax = np.abs(x).max(axis=-1, keepdims=True)
    scale = amax / E4M3_MAX
    safe = np.where(scale > 0, scale, 1.0)
    return np.where(scale > 0, e4m3_round(x / safe) * scale, 0.0)


def int8_kv(x):
    """Per (token, kv head) symmetric INT8 of x [n, kv_heads, head_dim]."""
    amax = np.abs(x).max(axis=-1, keepdims=True)
    scale = amax / 127.0
    safe = np.where(scale > 0, scale, 1.0)
    r = x / safe
    q = np.clip(np.sign(r) * np.floor(np.abs(r) + 0.5), -127, 127)  # half away
    return np.where(scale > 0, q * scale, 0.0)


def centered_keys(model, calibration, quant):
    """key_quant hook of llama_ref.forward for key centering."""
    tensors, _ = llama_ref.read_safetensors(calibration)
    c = model.cfg
    KV, hd = c["n_kv_heads"], c["dim"] // c["n_heads"]
    mus = []
    for l in range(c["n_layers"]):
        name = "layers.%d.key.mean" % l
        if name not in tensors:
            sys.exit("kv_fp8_logits: %s has no %s" % (calibration, name))
        mu = np.asarray(tensors[name], dtype=np.float64).reshape(KV, hd)
        if model.rope_style == "half":  # Kiln's pair order -> this model's
            mu = np.concatenate([mu[:, 0::2], mu[:, 1::2]], axis=-1)
        mus.append(mu)

    def key_quant(l, k, positions):
        m = llama_ref.rope(np.broadcast_to(mus[l], k.shape).copy(), positions,
                           c["rope_theta"], model.rope_style)
        return quant(k - m) + m
    return key_quant


def self_check():
    # All finite E4M3 values from the spec formula map to themselves, and
    # midpoints go to the neighbour with an even mantissa.
    vals = []
    for e in range(16):
        for m in range(8):
            if e == 15 and m == 7:
                continue
            vals.append(np.ldexp(m / 8.0, -6) if e == 0 else np.ldexp(1 + m / 8.0, e - 7))
    vals = np.array(vals)
    assert np.array_equal(e4m3_round(vals), vals), "finite values are fixed points"
    assert vals.max() == 448.0 and len(vals) == 127
    mids = (vals[:-1] + vals[1:]) / 2
    idx = np.arange(len(vals) - 1)
    even = np.where(idx % 2 == 0, vals[:-1], vals[1:])  # code LSB = mantissa LSB
    assert np.array_equal(e4m3_round(mids), even), "ties to even"
    assert np.array_equal(e4m3_round(-mids), -even)
    assert e4m3_round(np.array([1e9, -500.0, 449.0]))[0] == 448.0
    assert list(e4m3_round(np.array([-500.0, 449.0]))) == [-448.0, 448.0]
    x = np.random.default_rng(0).normal(size=(5, 4, 8))
    d = fp8_kv(x)
    s = np.abs(x).max(-1, keepdims=True) / 448.0
    # Half a grid step at most: |x| / 16 in a binade, 2^-10 * scale below 2^-6.
    bound = np.maximum(np.abs(x) / 16, s * 2.0 ** -10) * (1 + 1e-12)
    assert np.all(np.abs(d - x) <= bound), "half a step at most"
    print("kv_fp8_logits: self-check PASS")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model")
    ap.add_argument("--tokens")
    ap.add_argument("--kiln-logits")
    ap.add_argument("--tol", type=float, default=1e-3)
    ap.add_argument("--min-gap", type=float, default=0.0)
    ap.add_argument("--kv", choices=["fp8", "int8"], default="fp8")
    ap.add_argument("--calibration")
    ap.add_argument("--centered-gap", type=float, default=0.0)
    ap.add_argument("--self-check", action="store_true")
    a = ap.parse_args()
    if a.self_check:
        self_check()
        return
    if not (a.model and a.tokens and a.kiln_logits):
        ap.error("--model, --tokens and --kiln-logits are required")
    model = llama_ref.load_model(a.model)
    tokens = [int(t) for t in a.tokens.split(",")]
    quant = fp8_kv if a.kv == "fp8" else int8_kv
    key_quant = centered_keys(model, a.calibration, quant) if a.calibration else None
    ref = np.asarray(llama_ref.forward(model, tokens, kv_quant=quant,
                                       key_quant=key_quant))
    plain = np.asarray(llama_ref.forward(model, tokens))
    uncentered = (np.asarray(llama_ref.forward(model, tokens, kv_quant=quant))
                  if a.calibration else None)
    n, k = len(tokens), (len(tokens) + 1) // 2
    got = np.fromfile(a.kiln_logits, "<f4").astype(np.float64)
    if got.size != (n - k + 1) * ref.shape[-1]:
        sys.exit("kv_fp8_logits: %s has %d floats, expected %d rows of %d"
                 % (a.kiln_logits, got.size, n - k + 1, ref.shape[-1]))
    got = got.reshape(n - k + 1, -1)
    rows = list(enumerate(range(k - 1, n)))
    worst = max(float(np.abs(got[r] - ref[p]).max() / np.abs(ref[p]).max()) for r, p in rows)
    gap = max(float(np.abs(got[r] - plain[p]).max() / np.abs(plain[p]).max()) for r, p in rows)
    what = ("centered " if a.calibration else "") + a.kv.upper()
    print("kv_fp8_logits: %d rows, max rel_err %.3e vs %s-KV reference (tol %.1e), "
          "%.3e vs unquantized" % (len(rows), worst, what, a.tol, gap))
    if not np.isfinite(worst) or worst > a.tol:
        sys.exit("kv_fp8_logits: FAIL")
    if gap <= a.min_gap:
        sys.exit("kv_fp8_logits: FAIL: only %.3e from the unquantized reference "
                 "(expected > %.1e): is the cache %s?" % (gap, a.min_gap, a.kv))
    if uncentered is not None:
        ugap = max(float(np.abs(got[r] - uncentered[p]).max() / np.abs(uncentered[p]).max())
                   for r, p in rows)
        print("kv_fp8_logits: %.3e vs the uncentered %s-KV reference" % (ugap, a.kv.upper()))
        if ugap <= a.centered_gap:
            sys.exit("kv_fp8_logits: FAIL: only %.3e from the uncentered reference "
                     "(expected > %.1e): are keys centered?" % (ugap, a.centered_gap))
    print("kv_fp8_logits: PASS")


if __name__ == "__main__":
    main()
