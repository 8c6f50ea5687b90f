#!/usr/bin/env python3
"""Independent numpy reference for kiln-calibrate's statistics.

Runs the float64 reference model (llama_ref.forward) over token windows and
accumulates, for every linear-layer input and pre-RoPE key ("tap"), over all
N observed positions t with activation x_t [C]:

    absmax[c]  = max_t |x_t[c]|
    absmean[c] = (1/N) sum_t |x_t[c]|
    hessian    = (1/N) sum_t x_t x_t^T          ([C, C]; GPTQ's H / 2)
                 linear-layer inputs only
    mean[c]    = (1/N) sum_t x_t[c]             pre-RoPE keys only

Taps of layer i: layers.i.attn_in (input of wq/wk/wv), layers.i.key (the key
wk x before RoPE, [n_kv_heads * head_dim], Kiln's adjacent-pair layout),
layers.i.attn_out (input of wo), layers.i.ffn_in (input of w1/w3),
layers.i.ffn_down_in (input of w2). The file format is Kiln's calibration
file (docs/quantization.md): safetensors, F32 tensors "<tap>.absmax",
"<tap>.absmean" and "<tap>.hessian" (linear inputs) or "<tap>.mean" (keys),
string metadata format=kiln-calibration, version=1, tokens=N and
"input:<weight>" = "<tap>" for every linear weight (keys feed none).

Head scores (kiln-calibrate --heads): when WINDOWS has a line
"# heads <ids>" (the sequence BOS + P + P that kiln-calibrate --heads
--dump-tokens writes), for every layer l and query head h

    layers.l.attn_retrieval[h] = mean over the second copy's rows i of the
        attention probability on first-copy keys j (positions 1 .. |P|)
        with i - j >= --heads-window

taken from the reference model's own probabilities, with metadata
head_layers.

Usage:
  calib_ref.py --model MODEL --tokens WINDOWS --out REF.safetensors
               [--heads-window W]
      WINDOWS: one window per line, token ids separated by spaces (what
      `kiln-calibrate --dump-tokens` writes); each window runs from position 0.
  calib_ref.py --compare KILN.safetensors REF.safetensors [--rtol R]
      Same tensor names, shapes, `tokens` and `input:` metadata; per tensor
      max|kiln - ref| <= R * max|ref| (default 1e-4: kiln runs the model in
      float32, the reference in float64). Exit 1 with a message otherwise.
"""

import argparse
import json
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_ref  # noqa: E402

TAP_OF = {"wq": "attn_in", "wk": "attn_in", "wv": "attn_in", "wo": "attn_out",
          "w1": "ffn_in", "w3": "ffn_in", "w2": "ffn_down_in"}


def is_key_tap(tap):
    """layers.<i>.key: the pre-RoPE key (mean, no Hessian)."""
    parts = tap.split(".")
    return len(parts) == 3 and parts[0] == "layers" and parts[1].isdigit() and parts[2] == "key"


def read_windows(path):
    windows = []
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            try:
                windows.append([int(t) for t in line.split()])
            except ValueError:
                sys.exit("%s:%d: expected token ids separated by spaces" % (path, lineno))
    if not windows:
        sys.exit("%s: no token windows" % path)
    return windows


def statistics(model_path, windows):
    model = llama_ref.load_model(model_path)
    acc = {}

    def observe(tap, x):
        x = np.asarray(x, dtype=np.float64)
        a = np.abs(x)
        key = is_key_tap(tap)
        if tap not in acc:
            c = x.shape[1]
            acc[tap] = [np.zeros(c), np.zeros(c), np.zeros(c) if key else np.zeros((c, c)), 0]
        s = acc[tap]
        s[0] = np.maximum(s[0], a.max(axis=0))
        s[1] += a.sum(axis=0)
        s[2] += x.sum(axis=0) if key else x.T @ x
        s[3] += x.shape[0]

    for w in windows:
        llama_ref.forward(model, w, llama_ref.KVCache(model), observe=observe)
    tensors = {}
    n = None
    for tap, (amax, asum, second, count) in acc.items():
        n = count if n is None else n
        if count != n:
            raise SystemExit("internal: tap %s saw %d positions, others %d" % (tap, count, n))
        tensors[tap + ".absmax"] = amax
        tensors[tap + ".absmean"] = asum / count
        tensors[tap + (".mean" if is_key_tap(tap) else ".hessian")] = second / count
    meta = {"format": "kiln-calibration", "version": "1", "tokens": str(n),
            "model": str(model_path)}
    for i in range(model.cfg["n_layers"]):
        for w, tap in TAP_OF.items():
            meta["input:layers.%d.%s" % (i, w)] = "layers.%d.%s" % (i, tap)
    return tensors, meta


def read_heads_sequence(path):
    """The '# heads <ids>' line of a --dump-tokens file, or None."""
    with open(path) as f:
        for line in f:
            if line.startswith("# heads "):
                return [int(t) for t in line.split()[2:]]
    return None


def head_scores(model_path, seq, window):
    """layers.<l>.attn_retrieval for the sequence BOS + P + P."""
    model = llama_ref.load_model(model_path)
    P = (len(seq) - 1) // 2
    if len(seq) != 1 + 2 * P or seq[1:1 + P] != seq[1 + P:]:
        raise SystemExit("the heads sequence is not BOS + a passage twice")
    out = {}

    def probs(l, p):
        rows = np.arange(P + 1, 2 * P + 1)
        keys = np.arange(1, P + 1)
        far = (rows[:, None] - keys[None, :]) >= window  # [P, P]
        mass = (p[:, P + 1:, 1:P + 1] * far[None]).sum(axis=-1)  # [H, P]
        out["layers.%d.attn_retrieval" % l] = mass.mean(axis=-1)

    llama_ref.forward(model, seq, llama_ref.KVCache(model), observe_probs=probs)
    return out, model.cfg["n_layers"]


def write_safetensors(path, tensors, meta):
    header = {"__metadata__": meta}
    blobs = []
    off = 0
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name], dtype="<f4")
        header[name] = {"dtype": "F32", "shape": list(a.shape),
                        "data_offsets": [off, off + a.nbytes]}
        blobs.append(a.tobytes())
        off += a.nbytes
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def compare(kiln_path, ref_path, rtol):
    try:
        kt, km = llama_ref.read_safetensors(kiln_path)
        rt, rm = llama_ref.read_safetensors(ref_path)
    except llama_ref.RefError as e:
        sys.exit("calib_ref: %s" % e)
    errors = []
    if km.get("format") != "kiln-calibration" or km.get("version") != "1":
        errors.append("%s: metadata format/version are %r/%r, expected "
                      "kiln-calibration/1" % (kiln_path, km.get("format"), km.get("version")))
    if km.get("tokens") != rm.get("tokens"):
        errors.append("tokens: kiln %r, reference %r" % (km.get("tokens"), rm.get("tokens")))
    for k, v in rm.items():
        if k.startswith("input:") and km.get(k) != v:
            errors.append("metadata %s: kiln %r, reference %r" % (k, km.get(k), v))
    missing = sorted(set(rt) - set(kt))
    extra = sorted(set(kt) - set(rt))
    if missing:
        errors.append("tensors missing from %s: %s" % (kiln_path, ", ".join(missing)))
    if extra:
        errors.append("unexpected tensors in %s: %s" % (kiln_path, ", ".join(extra)))
    worst = 0.0
    for name in sorted(set(rt) & set(kt)):
        a, b = kt[name], rt[name]
        if a.shape != b.shape:
            errors.append("%s: shape %s, reference %s" % (name, a.shape, b.shape))
            continue
        scale = float(np.max(np.abs(b))) or 1.0
        err = float(np.max(np.abs(a - b))) / scale
        worst = max(worst, err)
        if not np.isfinite(err) or err > rtol:
            errors.append("%s: max|kiln - ref| / max|ref| = %.3g > %g" % (name, err, rtol))
    if errors:
        sys.stderr.write("\n".join(errors) + "\n")
        sys.exit(1)
    print("calib_ref: %d tensors match (worst relative error %.3g, rtol %g)"
          % (len(rt), worst, rtol))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="checkpoint (.bin, .gguf, HF dir)")
    ap.add_argument("--tokens", help="token windows, one per line")
    ap.add_argument("--out", help="reference statistics to write (.safetensors)")
    ap.add_argument("--compare", nargs=2, metavar=("KILN", "REF"))
    ap.add_argument("--rtol", type=float, default=1e-4)
    ap.add_argument("--heads-window", type=int, default=128)
    args = ap.parse_args(argv)
    if args.compare:
        compare(args.compare[0], args.compare[1], args.rtol)
        return
    if not (args.model and args.tokens and args.out):
        ap.error("--model, --tokens and --out are required (or --compare KILN REF)")
    tensors, meta = statistics(args.model, read_windows(args.tokens))
    seq = read_heads_sequence(args.tokens)
    if seq is not None:
        scores, layers = head_scores(args.model, seq, args.heads_window)
        tensors.update(scores)
        meta["head_layers"] = str(layers)
    write_safetensors(args.out, tensors, meta)
    print("calib_ref: wrote %s (%d taps, %s positions)"
          % (args.out, sum(k.endswith(".absmax") for k in tensors), meta["tokens"]))


if __name__ == "__main__":
    main()
