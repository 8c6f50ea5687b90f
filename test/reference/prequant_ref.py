#!/usr/bin/env python3
"""Check that an artifact compiled from a pre-quantized checkpoint stores
exactly the checkpoint's integers and scales, in Kiln's layout.

usage: prequant_ref.py --model CKPT --artifact DIR

CKPT is a Hugging Face GPTQ / AWQ directory or a GGUF file with Q4_0 (or
Q8_0) linears. For every quantized linear the checkpoint's tensors are
unpacked with llama_ref's format readers (written from the formats' specs)
and packed independently into Kiln's layout (kernel_abi.h):
  4 bits: qweight bytes [out, ceil(in/2)], element 2j in the low nibble;
          scales f32 [out, G]; zeros bytes [out, G]
  8 bits: qweight int8 [out, in]; scales f32 [out, G]
HF q_proj / k_proj rows are reordered from rotate-half to adjacent pairs per
head, as for float weights. The bytes must equal the manifest's tensors
`layers.i.<w>.{qweight,scales,zeros}` in weights.bin, and no float copy
`layers.i.<w>` may exist. Prints a summary line and PASS, exit 1 on a
mismatch.
"""
import argparse
import json
import os
import sys

import numpy as np

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_ref  # noqa: E402

KEYS = {"wq": "self_attn.q_proj", "wk": "self_attn.k_proj", "wv": "self_attn.v_proj",
        "wo": "self_attn.o_proj", "w1": "mlp.gate_proj", "w2": "mlp.down_proj",
        "w3": "mlp.up_proj"}
GG = {"wq": "attn_q", "wk": "attn_k", "wv": "attn_v", "wo": "attn_output", "w1": "ffn_gate",
      "w2": "ffn_down", "w3": "ffn_up"}


def hf_parts(W, qc, prefix):
    """(q [out, in], scales [out, G], zeros [out, G]) of one HF linear."""
    method = qc["quant_method"]
    if method == "gptq":
        q = llama_ref._unpack_nibbles(W[prefix + "qweight"], 0).T
        z = llama_ref._unpack_nibbles(W[prefix + "qzeros"], 1).T
        if qc.get("checkpoint_format", "gptq") == "gptq":
            z = z + 1
    else:
        q = llama_ref._unpack_nibbles(W[prefix + "qweight"], 1, llama_ref._AWQ_ORDER).T
        z = llama_ref._unpack_nibbles(W[prefix + "qzeros"], 1, llama_ref._AWQ_ORDER).T
    return q, W[prefix + "scales"].T, z


def gguf_parts(raw, shape, t, off, nb):
    out, cols = shape
    if t == llama_ref.GGML_Q4_0:
        blk = np.frombuffer(raw, np.uint8, nb, off).reshape(out, cols // 32, 18)
        d = blk[:, :, :2].copy().view("<f2")[:, :, 0].astype(np.float64)
        qs = blk[:, :, 2:].astype(np.int64)
        q = np.concatenate([qs & 15, qs >> 4], axis=2).reshape(out, cols)
        return q, d, np.full(d.shape, 8)
    blk = np.frombuffer(raw, np.uint8, nb, off).reshape(out, cols // 32, 34)
    d = blk[:, :, :2].copy().view("<f2")[:, :, 0].astype(np.float64)
    q = blk[:, :, 2:].copy().view(np.int8).reshape(out, cols).astype(np.int64)
    return q, d, None


def kiln_bytes(q, s, z, bits):
    if bits == 8:
        return {"qweight": q.astype(np.int8).tobytes(), "scales": s.astype("<f4").tobytes()}
    out, cols = q.shape
    if cols % 2:
        q = np.concatenate([q, np.zeros((out, 1), q.dtype)], axis=1)
    packed = (q[:, 0::2] | (q[:, 1::2] << 4)).astype(np.uint8)
    return {"qweight": packed.tobytes(), "scales": s.astype("<f4").tobytes(),
            "zeros": z.astype(np.uint8).tobytes()}


def pair_rows(a, heads):
    return llama_ref.hf_to_pair(a, heads)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--artifact", required=True)
    a = ap.parse_args()
    man = json.load(open(os.path.join(a.artifact, "manifest.json")))
    blob = open(os.path.join(a.artifact, man["weights"]["file"]), "rb").read()
    tensors = {t["name"]: t for t in man["weights"]["tensors"]}
    expected = {}  # manifest name -> bytes
    if os.path.isdir(a.model):
        cfg = json.load(open(os.path.join(a.model, "config.json")))
        qc = cfg["quantization_config"]
        W, _ = llama_ref.read_safetensors(os.path.join(a.model, "model.safetensors"))
        H = cfg["num_attention_heads"]
        KV = cfg.get("num_key_value_heads") or H
        for l in range(cfg["num_hidden_layers"]):
            for key, hf in KEYS.items():
                prefix = "model.layers.%d.%s." % (l, hf)
                if prefix + "qweight" not in W:
                    continue
                q, s, z = hf_parts(W, qc, prefix)
                if key in ("wq", "wk"):
                    heads = H if key == "wq" else KV
                    q, s, z = pair_rows(q, heads), pair_rows(s, heads), pair_rows(z, heads)
                    q, z = q.astype(np.int64), z.astype(np.int64)
                for part, b in kiln_bytes(q, s, z, 4).items():
                    expected["layers.%d.%s.%s" % (l, key, part)] = b
    else:
        _, kv, infos, raw = llama_ref.parse_gguf(a.model)
        n_layers = int(kv["llama.block_count"])
        for l in range(n_layers):
            for key, gg in GG.items():
                shape, t, off, nb = infos["blk.%d.%s.weight" % (l, gg)]
                if t not in (llama_ref.GGML_Q4_0, llama_ref.GGML_Q8_0):
                    continue
                if t == llama_ref.GGML_Q8_0 and "layers.%d.%s.qweight" % (l, key) not in tensors:
                    continue  # Q8_0 still dequantized (no grouped 8-bit kernels yet)
                q, s, z = gguf_parts(raw, shape, t, off, nb)
                bits = 4 if t == llama_ref.GGML_Q4_0 else 8
                for part, b in kiln_bytes(q, s, z, bits).items():
                    expected["layers.%d.%s.%s" % (l, key, part)] = b
    if not expected:
        print("prequant_ref: FAIL: %s has no quantized linears" % a.model)
        return 1
    bad = 0
    for name, b in sorted(expected.items()):
        t = tensors.get(name)
        if t is None:
            print("prequant_ref: FAIL: %s missing from the manifest" % name)
            bad += 1
            continue
        got = blob[t["offset"]:t["offset"] + t["bytes"]]
        if got != b:
            diff = np.flatnonzero(np.frombuffer(got, np.uint8) != np.frombuffer(b, np.uint8)) \
                if len(got) == len(b) else []
            print("prequant_ref: FAIL: %s: %d bytes vs %d expected, first difference at byte %s"
                  % (name, len(got), len(b), diff[0] if len(diff) else "?"))
            bad += 1
        base = name.rsplit(".", 1)[0]
        if base in tensors:
            print("prequant_ref: FAIL: float copy %s is also stored" % base)
            bad += 1
    print("prequant_ref: %d quantized tensors %s" % (len(expected),
          "identical to numpy" if not bad else "checked, %d wrong" % bad))
    print("prequant_ref: %s" % ("PASS" if not bad else "FAIL"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
