#!/usr/bin/env python3
"""Checks Kiln's GGML block decoding against gguf-py, block by block.

usage: check_dequant.py GGUF DUMP_DIR
       check_dequant.py --randomize GGUF OUT.gguf SEED

First form: DUMP_DIR holds kiln-weight-dump's output for GGUF (one
<tensor>.f32 file per tensor Kiln read). Every tensor of GGUF in a block
format is dequantized with gguf-py's gguf.quants.dequantize (the independent
reference, PyPI `gguf`) and compared with Kiln's floats, block by block: the
values must be bit-identical (both decoders form (d * scale) * q - dmin * min
in float32; Kiln builds its importer with -ffp-contract=off). Prints one line
per type ("q4_k: 6 tensors, 3072 blocks, identical") and exits 1 naming the
first differing block.

Second form: writes a copy of GGUF whose block-format tensors hold random
bytes (f16 fields random finite values, subnormals and zeros included), so
that every bit of the scales and quants is exercised, not only the patterns
a quantizer writes.
"""

import os
import sys

import numpy as np
from gguf import GGUFReader, GGMLQuantizationType as T
from gguf.quants import dequantize

BLOCK = {  # type: (elements, bytes, offsets of f16 fields in a block)
    T.Q4_0: (32, 18, [0]), T.Q4_1: (32, 20, [0, 2]), T.Q5_0: (32, 22, [0]),
    T.Q5_1: (32, 24, [0, 2]), T.Q8_0: (32, 34, [0]),
    T.Q2_K: (256, 84, [80, 82]), T.Q3_K: (256, 110, [108]),
    T.Q4_K: (256, 144, [0, 2]), T.Q5_K: (256, 176, [0, 2]),
    T.Q6_K: (256, 210, [208]),
}


def randomize(src, dst, seed):
    rng = np.random.default_rng(seed)
    data = bytearray(open(src, "rb").read())
    reader = GGUFReader(src)
    count = 0
    for t in reader.tensors:
        if t.tensor_type not in BLOCK:
            continue
        _, nbytes, halves = BLOCK[t.tensor_type]
        blocks = rng.integers(0, 256, size=(t.n_bytes // nbytes, nbytes), dtype=np.uint8)
        for off in halves:
            # Random binary16 with exponent < 31 (finite), sign random.
            h = rng.integers(0, 0x7C00, size=blocks.shape[0], dtype=np.uint16)
            h |= (rng.integers(0, 2, size=blocks.shape[0], dtype=np.uint16) << 15)
            blocks[:, off] = h & 0xFF
            blocks[:, off + 1] = h >> 8
        data[t.data_offset:t.data_offset + t.n_bytes] = blocks.tobytes()
        count += 1
    open(dst, "wb").write(bytes(data))
    print("randomized %d tensors" % count)


def check(gguf_path, dump):
    reader = GGUFReader(gguf_path)
    stats = {}
    for t in reader.tensors:
        if t.tensor_type not in BLOCK:
            continue
        path = os.path.join(dump, t.name + ".f32")
        if not os.path.exists(path):
            continue  # a tensor Kiln does not read
        elems, _, _ = BLOCK[t.tensor_type]
        ref = dequantize(t.data, t.tensor_type).astype(np.float32).reshape(-1)
        got = np.fromfile(path, dtype=np.float32)
        if got.size != ref.size:
            print("FAIL: %s: Kiln decoded %d values, gguf-py %d" % (t.name, got.size, ref.size))
            return 1
        same = (got.view(np.uint32) == ref.view(np.uint32)) | (np.isnan(got) & np.isnan(ref))
        if not same.all():
            i = int(np.argmin(same))
            print("FAIL: %s (%s): block %d (element %d) differs: Kiln %r, gguf-py %r" %
                  (t.name, t.tensor_type.name, i // elems, i, float(got[i]), float(ref[i])))
            return 1
        n, b = stats.get(t.tensor_type.name, (0, 0))
        stats[t.tensor_type.name] = (n + 1, b + ref.size // elems)
    if not stats:
        print("FAIL: no block-format tensor was compared")
        return 1
    for name in sorted(stats):
        n, b = stats[name]
        print("%s: %d tensors, %d blocks, identical" % (name.lower(), n, b))
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--randomize":
        randomize(sys.argv[2], sys.argv[3], int(sys.argv[4]))
        sys.exit(0)
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sys.exit(check(sys.argv[1], sys.argv[2]))
