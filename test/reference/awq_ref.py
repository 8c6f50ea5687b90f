#!/usr/bin/env python3
"""Independent numpy reference of AWQ's activation-aware scaling (Lin et al.
2023, "AWQ: Activation-aware Weight Quantization for LLM Compression and
Acceleration", section 3.2) and the checks of Kiln's `--quant=w4a16-awq`.

For each group of linears sharing one input (per layer: wq/wk/wv after the
attention RMSNorm, wo after attention, w1/w3 after the FFN RMSNorm, w2 after
SwiGLU), in model order:

    for alpha = k / grid, k = 0 .. grid-1:
        s = max(absmean^alpha, 1e-4);  s = s / sqrt(max(s) * min(s))
        loss(alpha) = sum_W trace(dW H dW^T),  dW = W - Q(W diag(s)) diag(s)^-1
    pick the alpha of least loss (first on ties); then W <- W diag(s) for
    the group and 1/s is folded into the producer: the RMSNorm weight, the
    rows of w3 (for w2), the rows of wv (for wo; with grouped-query attention
    the query heads that read one value head share its scale: one statistic
    per (KV head, channel), the mean absmean over those query heads).

Q is 4-bit RTN in groups (gptq_ref.rtn); absmean and H = X^T X / N come from
the calibration file, so trace(dW H dW^T) is the mean squared output error
over the calibration tokens.

usage:
  awq_ref.py --model M --calibration C --artifact DIR [--group-size G]
      Kiln's AWQ artifact must equal the reference: the (f32) RMSNorm
      weights to 1e-6 relative, every 4-bit tensor's codes identical except
      rare 1-step differences (<= 0.5%: float32 near-ties), scales to 1e-5;
      and per group the AWQ loss <= RTN's.
  awq_ref.py --model M --kiln-ir FILE --tokens 1,2,3
      FILE is `kiln-compile --emit=kiln --fuse=none` output of an AWQ/SmoothQuant model:
      applies the "scale" transforms Kiln recorded to the float64 model,
      unquantized, and requires its logits to equal the original model's
      to 1e-5 relative (the folding preserves the function).
"""
import argparse
import json
import os
import re
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import calib_file  # noqa: E402
import gptq_ref  # noqa: E402
import llama_ref  # noqa: E402


def layer_groups(model):
    """(tap suffix, weights, producer, producer kind) per layer, model order."""
    return [("attn_in", ["wq", "wk", "wv"], "attn_norm", "vector"),
            ("attn_out", ["wo"], "wv", "rows_gqa"),
            ("ffn_in", ["w1", "w3"], "ffn_norm", "vector"),
            ("ffn_down_in", ["w2"], "w3", "rows")]


def tie_map(model, kind, C):
    c = model.cfg
    if kind != "rows_gqa":
        return np.arange(C), C
    H, KV = c["n_heads"], c["n_kv_heads"]
    hd = c["dim"] // H
    ch = np.arange(C)
    return (ch // hd // (H // KV)) * hd + ch % hd, KV * hd


def search(Ws, H, absmean, tie, ntied, group, grid):
    stat = np.zeros(ntied)
    np.add.at(stat, tie, absmean)
    stat /= np.bincount(tie, minlength=ntied)
    best = None
    rtn_loss = None
    for k in range(grid):
        alpha = k / grid
        s = np.maximum(stat ** alpha, 1e-4)
        s = s / np.sqrt(s.max() * s.min())
        sc = s[tie].astype(np.float32)
        loss = 0.0
        for W in Ws:
            Wsc = (W * sc[None, :]).astype(np.float32)
            deq = gptq_ref.expand(*gptq_ref.rtn(Wsc, group), group) / sc[None, :]
            loss += gptq_ref.output_error(W, deq, H)
        if k == 0:
            rtn_loss = loss
        if best is None or loss < best[0]:
            best = (loss, alpha, sc)
    return best[2], best[1], best[0], rtn_loss


def awq(model, meta, calib, group, grid=20):
    """Folds AWQ scales into a float32 copy of the model's layer weights;
    returns (layers, report)."""
    layers = [{k: v.astype(np.float32) for k, v in L.items()} for L in model.layers]
    report = []
    for l, L in enumerate(layers):
        for tap_sfx, names, prod, kind in layer_groups(model):
            tap = "layers.%d.%s" % (l, tap_sfx)
            for n in names:
                assert meta["input:layers.%d.%s" % (l, n)] == tap
            C = L[names[0]].shape[1]
            tie, ntied = tie_map(model, kind, C)
            s, alpha, loss, rtn_loss = search([L[n] for n in names], calib[tap + ".hessian"],
                                              calib[tap + ".absmean"], tie, ntied, group, grid)
            inv = np.zeros(ntied, np.float32)
            inv[tie] = (np.float32(1) / s).astype(np.float32)
            for n in names:
                L[n] = (L[n] * s[None, :]).astype(np.float32)
            if kind == "vector":
                L[prod] = (L[prod] * inv).astype(np.float32)
            else:
                L[prod] = (L[prod] * inv[:, None]).astype(np.float32)
            report.append((tap, alpha, loss, rtn_loss))
    return layers, report


def parse_ir_scales(text):
    """{weight name: [(axis, factors)]} from printed kiln IR."""
    out = {}
    for line in text.splitlines():
        m = re.match(r"\s*kiln\.weight @([\w.]+) :", line)
        if not m:
            continue
        name = m.group(1)
        if name.endswith((".scales", ".zeros")):
            continue
        name = name[:-len(".qweight")] if name.endswith(".qweight") else name
        steps = []
        for t in re.finditer(r'#kiln\.transform<"scale", \{axis = (\d) : i64, '
                             r'factors = dense<(.*?)> : tensor<(\d+)xf32>\}>', line):
            body, n = t.group(2), int(t.group(3))
            if body.startswith('"0x'):
                f = np.frombuffer(bytes.fromhex(body[3:-1]), dtype="<f4")
            else:
                f = np.array([float(x) for x in body.strip("[]").split(",")], np.float32)
            if f.size == 1 and n > 1:
                f = np.full(n, f[0], np.float32)
            steps.append((int(t.group(1)), f.astype(np.float32)))
        out[name] = steps
    return out


def apply_ir_scales(model, scales):
    keymap = {"attention_norm": "attn_norm", "ffn_norm": "ffn_norm"}
    for l, L in enumerate(model.layers):
        for k in list(L):
            kiln_name = "layers.%d.%s" % (l, {"attn_norm": "attention_norm"}.get(k, k))
            for axis, f in scales.get(kiln_name, []):
                W = L[k].astype(np.float32)
                if W.ndim == 1:
                    L[k] = (W * f).astype(np.float32).astype(np.float64)
                elif axis == 0:
                    L[k] = (W * f[:, None]).astype(np.float32).astype(np.float64)
                else:
                    L[k] = (W * f[None, :]).astype(np.float32).astype(np.float64)
    del keymap
    return model


def check_fold(a):
    tokens = [int(t) for t in a.tokens.split(",")]
    text = open(a.kiln_ir).read()
    scales = parse_ir_scales(text)
    count = sum(len(v) for v in scales.values())
    if count == 0:
        print("awq_ref: no scale transforms in %s" % a.kiln_ir)
        return 1
    base = llama_ref.load_model(a.model)
    for L in base.layers:
        for k in L:
            L[k] = L[k].astype(np.float32).astype(np.float64)
    ref = llama_ref.forward(base, tokens)
    folded = apply_ir_scales(llama_ref.load_model(a.model), scales)
    got = llama_ref.forward(folded, tokens)
    rel = float(np.max(np.abs(got - ref)) / np.max(np.abs(ref)))
    print("awq_ref: %d scale transforms on %d weights, logits max rel diff %.3g"
          % (count, sum(1 for v in scales.values() if v), rel))
    ok = rel <= 1e-5
    print("awq_ref: PASS" if ok else "awq_ref: FAIL")
    return 0 if ok else 1


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--calibration")
    ap.add_argument("--artifact")
    ap.add_argument("--group-size", type=int, default=128)
    ap.add_argument("--grid", type=int, default=20)
    ap.add_argument("--kiln-ir")
    ap.add_argument("--tokens", default="1,403,407,261,378,432,383,286,261,376")
    a = ap.parse_args(argv)
    if a.kiln_ir:
        return check_fold(a)
    model = llama_ref.load_model(a.model)
    meta, calib = calib_file.read_calibration(a.calibration)
    layers, report = awq(model, meta, calib, a.group_size, a.grid)
    man = json.load(open(os.path.join(a.artifact, "manifest.json")))
    blob = np.fromfile(os.path.join(a.artifact, "weights.bin"), dtype=np.uint8)
    tensors = {x["name"]: x for x in man["weights"]["tensors"]}
    ok, worst = True, 0.0
    for tap, alpha, loss, rtn_loss in report:
        print("%s: alpha %.2f, output error %.6g (RTN %.6g)" % (tap, alpha, loss, rtn_loss))
        if loss > rtn_loss:
            print("  FAIL: AWQ loss above RTN's")
            ok = False
    for l, L in enumerate(layers):
        for k, kiln in (("attn_norm", "attention_norm"), ("ffn_norm", "ffn_norm")):
            t = tensors["layers.%d.%s" % (l, kiln)]
            got = blob[t["offset"]:t["offset"] + t["bytes"]].view(np.float32)
            if not np.allclose(got, L[k], rtol=1e-6, atol=0):
                print("layers.%d.%s: FAIL folded norm differs (max rel %.3g)"
                      % (l, kiln, float(np.max(np.abs(got - L[k]) / np.abs(L[k])))))
                ok = False
        for k in calib_file.LINEARS:
            name = "layers.%d.%s" % (l, k)
            cols = L[k].shape[1]
            Qk, Sk, Zk = gptq_ref.read_artifact4(a.artifact, name)
            Qr, Sr, Zr = gptq_ref.rtn(L[k], a.group_size)
            diff = np.abs(Qk[:, :cols] - Qr)
            frac = float((diff > 0).mean())
            worst = max(worst, frac)
            if diff.max() > 1 or frac > 0.005 or not np.allclose(Sk, Sr, rtol=1e-5, atol=0):
                print("%s: FAIL codes differ in %.3f%% (max %d), scales max rel %.3g"
                      % (name, 100 * frac, diff.max(),
                         float(np.max(np.abs(Sk - Sr) / np.abs(Sr)))))
                ok = False
    print("awq_ref: %d groups, %d improved on RTN; codes differ in at most %.4f%%"
          % (len(report), sum(1 for r in report if r[2] < r[3]), 100 * worst))
    print("awq_ref: PASS" if ok else "awq_ref: FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
