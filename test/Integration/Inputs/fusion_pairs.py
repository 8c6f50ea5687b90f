#!/usr/bin/env python3
"""Compiles each model/recipe twice, fused (kiln-compile's default or a
--fuse list) and with --fuse=none, dumps the logits of the same tokens from
both (kiln-run --dump-logits: half prefilled, then one decode step per
token) and compares them: max |fused - unfused| / max |unfused| <= 1e-5
(decode runs the unfused GEMV row for row; prefill tiles go through sgemm
with other tile widths, which may round differently; 4e-3 for int8
activations, where such a difference can flip one int8 rounding), or
byte-identical when the recipe leaves nothing to fuse (16-bit graphs, W8A8).
Prints one line per case and "fusion_pairs: N of M PASS"; exits 1 on any
failure. Regions per layer are counted from the artifact's model.cpp (its
kiln_fused_decode_* kernels over the manifest's n_layers).
"""
import argparse
import json
import os
import re
import subprocess
import sys

import numpy as np

TOL = 1e-5
S260_TOKENS = "1,403,407,261,378,432,383,286,261,376,298,315"
SMOL_TOKENS = "1,504,3250,282,253,1345,30,2,4,17,19,1142"
KQ_TOKENS = "1,400,39,201,77,5,310,92,45,260,13,499"


def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True)
    if p.returncode != 0:
        raise RuntimeError("%s failed:\n%s" % (" ".join(cmd), p.stdout))


def regions_per_layer(art):
    with open(os.path.join(art, "manifest.json")) as f:
        layers = json.load(f)["model"]["n_layers"]
    with open(os.path.join(art, "model.cpp")) as f:
        kernels = len(re.findall(r"^static void kiln_fused_decode_\d+\(",
                                 f.read(), re.M))
    return kernels // layers


# The unfused baseline of each (model, tokens, flags): several cases (the
# fusion families) compare against the same one.
UNFUSED = {}


def case(args, name, model, tokens, flags, fuse=None, exact=False, tol=TOL):
    d = os.path.join(args.dir, name)
    os.makedirs(d, exist_ok=True)
    arts = {}
    for kind, fuse_flags in (("fused", [] if fuse is None else ["--fuse=" + fuse]),
                             ("unfused", ["--fuse=none"])):
        key = (model, tokens, tuple(flags))
        if kind == "unfused" and key in UNFUSED:
            arts[kind] = UNFUSED[key]
            continue
        art = os.path.join(d, kind + ".art")
        run([args.compile, model, "-o", art] + flags + fuse_flags)
        logits = os.path.join(d, kind + ".bin")
        run([args.run, art, "--tokens=" + tokens, "--dump-logits=" + logits])
        arts[kind] = (art, np.fromfile(logits, dtype="<f4").astype(np.float64))
        if kind == "unfused":
            UNFUSED[key] = arts[kind]
    a, b = arts["fused"][1], arts["unfused"][1]
    regions = regions_per_layer(arts["fused"][0])
    if a.size == 0 or a.size != b.size:
        print("%s: FAIL (%d and %d logits)" % (name, a.size, b.size))
        return False
    rel = float(np.max(np.abs(a - b)) / np.max(np.abs(b)))
    if exact:
        ok = regions == 0 and rel == 0.0
        print("%s: unfused graph, %s %s" % (
            name, "identical" if rel == 0.0 else "differs (%.3g)" % rel,
            "PASS" if ok else "FAIL"))
        return ok
    ok = rel <= tol and (regions > 0 or fuse in ("prologue", "elementwise"))
    print("%s: fused %d regions/layer, max rel diff %.3g (tol %g) %s" % (
        name, regions, rel, tol, "PASS" if ok else "FAIL"))
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--compile", required=True)
    ap.add_argument("--run", required=True)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--calibration", required=True)
    ap.add_argument("--shared", required=True)
    ap.add_argument("--quick", action="store_true",
                    help="only f32, w4a16-rtn, SmolLM2 Q4_1 and the K-quant "
                         "mix (the sanitizer build)")
    args = ap.parse_args()
    m = os.path.join(args.shared, "models")
    s260 = os.path.join(m, "stories260K", "stories260K.bin")
    smol = os.path.join(m, "smollm2-135m-instruct", "SmolLM2-135M-Instruct.Q4_1.gguf")
    calib = ["--calibration", args.calibration]
    cases = [
        ("f32", s260, S260_TOKENS, [], None, False),
        ("f16", s260, S260_TOKENS, ["--dtype=f16"], None, True),
        ("bf16", s260, S260_TOKENS, ["--dtype=bf16"], None, True),
        ("w8a16", s260, S260_TOKENS, ["--quant=w8a16"], None, False),
        ("w4a16-rtn", s260, S260_TOKENS, ["--quant=w4a16-rtn", "--group-size=32"], None, False),
        ("w4a16-gptq", s260, S260_TOKENS, ["--quant=w4a16-gptq", "--group-size=32"] + calib, None, False),
        ("w4a16-awq", s260, S260_TOKENS, ["--quant=w4a16-awq", "--group-size=32"] + calib, None, False),
        ("smoothquant", s260, S260_TOKENS, ["--quant=smoothquant"] + calib, None, True),
        ("kv-int8", s260, S260_TOKENS, ["--kv=int8"] + calib, None, False),
        ("kv-fp8", s260, S260_TOKENS, ["--kv=fp8"] + calib, None, False),
        ("gguf-f32-stories260k", os.path.join(m, "stories260K", "stories260K.gguf"), S260_TOKENS, [], None, False),
        ("gguf-q8_0-tinystories656k", os.path.join(m, "tinystories-656k", "gguf", "TinyStories-656K-Q8_0.gguf"), S260_TOKENS, [], None, False),
        ("gguf-q4_1-smollm2", smol, SMOL_TOKENS, [], None, False),
        ("gguf-kquant-mix", os.path.join(m, "kquant-fixtures", "tiny-kq-mix.gguf"), KQ_TOKENS, [], None, False),
        ("gguf-q4_k_m", os.path.join(m, "kquant-fixtures", "tiny-kq-q4_k_m.gguf"), KQ_TOKENS, [], None, False),
        # int8 activations: a float32 rounding difference between the fused
        # and the unfused prefill can move one activation across an int8
        # rounding boundary, about 1e-3 on that row's logits
        # (test/Integration/act-quant.test).
        ("act-quant-int8-smollm2", smol, SMOL_TOKENS, ["--act-quant=int8"], None, False, 4e-3),
        ("act-quant-int8-kquant-mix", os.path.join(m, "kquant-fixtures", "tiny-kq-mix.gguf"), KQ_TOKENS, ["--act-quant=int8"], None, False, 4e-3),
    ]
    for family in ("horizontal", "prologue", "epilogue", "elementwise"):
        cases.append(("family-" + family, smol, SMOL_TOKENS, [], family, False))
    # Column ranges at offsets that are not a multiple of 8 (gate/up split
    # at 172): prefill tiles start off the sgemm's aligned path.
    cases.append(("family-horizontal-stories260k", s260, S260_TOKENS, [],
                  "horizontal", False))
    if args.quick:
        cases = [c for c in cases if c[0] in
                 ("f32", "w4a16-rtn", "gguf-q4_1-smollm2", "gguf-kquant-mix")]
    passed = 0
    for c in cases:
        try:
            passed += case(args, *c)
        except RuntimeError as e:
            print("%s: FAIL: %s" % (c[0], e))
    print("fusion_pairs: %d of %d PASS" % (passed, len(cases)))
    return 0 if passed == len(cases) else 1


if __name__ == "__main__":
    sys.exit(main())
