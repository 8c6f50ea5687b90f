#!/usr/bin/env python3
"""Writes a GGUF laid out as llama.cpp's `llama-quantize ... Q4_0` writes one.

usage: make_q4_0_gguf.py SRC.gguf OUT.gguf

llama-quantize's Q4_0 mix stores every 2-D weight, the token embedding
included, as Q4_0, except the output matrix, which it keeps in Q6_K. SRC is
a kquant fixture (../shared/models/kquant-fixtures) whose output.weight is
already Q6_K: that tensor is copied byte for byte, the norms stay F32, and
every other matrix is dequantized and quantized to Q4_0 with gguf-py's
reference quantizer (gguf.quants.quantize). The metadata is copied as is.
"""

import sys

import numpy as np
from gguf import GGUFReader, GGUFWriter, GGMLQuantizationType as T, GGUFValueType as V
from gguf.quants import dequantize, quantize


def main(src, dst):
    r = GGUFReader(src)
    arch = r.fields["general.architecture"].contents()
    w = GGUFWriter(dst, arch)
    for name, field in r.fields.items():
        if name.startswith("GGUF.") or name in ("general.architecture",
                                                  "general.file_type"):
            continue
        vtype = field.types[0]
        sub = field.types[1] if vtype == V.ARRAY else None
        w.add_key_value(name, field.contents(), vtype, sub_type=sub)
    w.add_file_type(2)  # LLAMA_FTYPE_MOSTLY_Q4_0
    for t in r.tensors:
        shape = [int(d) for d in reversed(t.shape)]  # GGUF order -> numpy
        if t.name == "output.weight" or t.tensor_type == T.F32:
            data = np.array(t.data)
            w.add_tensor(t.name, data, raw_shape=data.shape, raw_dtype=t.tensor_type)
            continue
        f = dequantize(t.data, t.tensor_type).reshape(shape).astype(np.float32)
        q = quantize(f, T.Q4_0)
        w.add_tensor(t.name, q, raw_shape=q.shape, raw_dtype=T.Q4_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
