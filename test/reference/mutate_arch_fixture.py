#!/usr/bin/env python3
"""Writes broken variants of the architecture fixtures (make_arch_fixtures.py)
for the bad-input tests of test/Integration/arch-bad-config.test.

usage: mutate_arch_fixture.py KIND SRC DST
  bias-shape   HF dir: layer 0's k_proj.bias cut to 8 elements
  as-llama     HF dir: a Qwen2 checkpoint whose config says LlamaForCausalLM
  gguf-yarn    GGUF: adds llama.rope.scaling.type = "yarn"
  gguf-freqs   GGUF: rope_freqs.weight[3] = 0
  gguf-window  GGUF: llama.attention.sliding_window = 0
  gguf-linear  GGUF: rope_freqs.weight dropped, linear scaling factor 2
  gguf-q5_0    GGUF: matrices with rows of 32k elements (not token_embd)
               in Q5_0 (gguf-py quants)
Needs numpy and gguf (PyPI).
"""
import json
import os
import shutil
import sys

import numpy as np


def copy_gguf(src, dst, set_keys=None, tensor_fn=None, drop=()):
    import gguf
    r = gguf.GGUFReader(src)
    arch = str(r.fields["general.architecture"].contents())
    w = gguf.GGUFWriter(dst, arch)
    set_keys = dict(set_keys or {})
    for f in r.fields.values():
        if f.name.startswith("GGUF.") or f.name == "general.architecture":
            continue
        if f.name in set_keys:
            continue
        vtype = f.types[0]
        sub = f.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(f.name, f.contents(), vtype, sub_type=sub)
    for name, (value, vtype) in set_keys.items():
        w.add_key_value(name, value, vtype)
    for t in r.tensors:
        if t.name in drop:
            continue
        data = np.array(t.data)
        raw = None
        if tensor_fn:
            data, raw = tensor_fn(t.name, data)
        if raw is None:
            w.add_tensor(t.name, data)
        else:
            w.add_tensor(t.name, data, raw_dtype=raw)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    kind, src, dst = sys.argv[1:4]
    if kind in ("bias-shape", "as-llama"):
        shutil.copytree(src, dst)
        if kind == "as-llama":
            cfg = json.load(open(os.path.join(dst, "config.json")))
            cfg["architectures"] = ["LlamaForCausalLM"]
            cfg["model_type"] = "llama"
            json.dump(cfg, open(os.path.join(dst, "config.json"), "w"))
            return
        # safetensors by hand (numpy has no bfloat16): u64 header length,
        # JSON header, data; cut the tensor and rewrite the offsets.
        path = os.path.join(dst, "model.safetensors")
        raw = open(path, "rb").read()
        n = int.from_bytes(raw[:8], "little")
        header = json.loads(raw[8:8 + n])
        data = raw[8 + n:]
        key = "model.layers.0.self_attn.k_proj.bias"
        blobs, out = {}, {}
        for name, info in header.items():
            if name == "__metadata__":
                continue
            b, e = info["data_offsets"]
            blobs[name] = data[b:e]
        blobs[key] = blobs[key][:8 * 2]
        header[key]["shape"] = [8]
        offset = 0
        body = b""
        for name in sorted(blobs):
            header[name]["data_offsets"] = [offset, offset + len(blobs[name])]
            offset += len(blobs[name])
            body += blobs[name]
        h = json.dumps(header).encode()
        with open(path, "wb") as f:
            f.write(len(h).to_bytes(8, "little") + h + body)
        return
    import gguf
    if kind == "gguf-yarn":
        copy_gguf(src, dst, {"llama.rope.scaling.type":
                             ("yarn", gguf.GGUFValueType.STRING)})
    elif kind == "gguf-window":
        copy_gguf(src, dst, {"llama.attention.sliding_window":
                             (0, gguf.GGUFValueType.UINT32)})
    elif kind == "gguf-freqs":
        def zero(name, data):
            if name == "rope_freqs.weight":
                data = data.copy()
                data[3] = 0.0
            return data, None
        copy_gguf(src, dst, tensor_fn=zero)
    elif kind == "gguf-linear":
        copy_gguf(src, dst, {"llama.rope.scaling.type":
                             ("linear", gguf.GGUFValueType.STRING),
                             "llama.rope.scaling.factor":
                             (2.0, gguf.GGUFValueType.FLOAT32)},
                  drop=("rope_freqs.weight",))
    elif kind == "gguf-q5_0":
        from gguf import quants
        def q5(name, data):
            if (data.ndim == 2 and name != "token_embd.weight"
                    and data.shape[1] % 32 == 0):
                return (quants.quantize(data.astype(np.float32),
                                        gguf.GGMLQuantizationType.Q5_0),
                        gguf.GGMLQuantizationType.Q5_0)
            return data, None
        copy_gguf(src, dst, tensor_fn=q5)
    else:
        sys.exit("unknown kind " + kind)


if __name__ == "__main__":
    main()
