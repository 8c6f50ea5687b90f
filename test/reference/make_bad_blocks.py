#!/usr/bin/env python3
"""Writes GGUF files with broken block-format tensors for the error tests.

usage: make_bad_blocks.py SRC.gguf OUTDIR

SRC is a kquant fixture (tiny-kq-mix.gguf: Q2_K attn_q, Q3_K attn_k, Q6_K
output, ...). Writes, each a copy of SRC with one defect:
  truncated.gguf    the file cut inside the last tensor's blocks
  nan-scale.gguf    blk.0.attn_v.weight (Q4_K, one block per row): the
                    block of row 8 has d = NaN
  inf-scale.gguf    output.weight (Q6_K): the first block's d = +inf
  row-length.gguf   blk.0.attn_k.weight (Q3_K) declared with ne0 = 128, not
                    whole 256-element super-blocks (ne1 doubled: same bytes)
  wrong-type.gguf   blk.0.attn_q.weight relabelled Q4_K (144-byte blocks)
                    while it holds Q2_K's 84-byte blocks: sizes and offsets
                    of the tensor table no longer agree
Prints the file offset of each defect.
"""

import os
import struct
import sys

from gguf import GGUFReader, GGMLQuantizationType as T


def tensor(reader, name):
    return next(t for t in reader.tensors if t.name == name)


def info_offset(data, name):
    """Offset just after the tensor-info name string (n_dims follows)."""
    key = struct.pack("<Q", len(name)) + name.encode()
    at = data.index(key)
    return at + len(key)


def main(src, out):
    base = open(src, "rb").read()
    r = GGUFReader(src)

    def write(name, data, what):
        open(os.path.join(out, name), "wb").write(bytes(data))
        print("%s: %s" % (name, what))

    last = max(r.tensors, key=lambda t: t.data_offset)
    cut = last.data_offset + last.n_bytes // 2
    write("truncated.gguf", base[:cut], "cut at %d" % cut)

    d = bytearray(base)
    t = tensor(r, "blk.0.attn_v.weight")
    assert t.tensor_type == T.Q4_K
    row_blocks = int(t.shape[0]) // 256  # t.shape[0] is ne0, the row length
    off = t.data_offset + 8 * row_blocks * 144
    d[off:off + 2] = struct.pack("<H", 0x7E00)  # f16 NaN
    write("nan-scale.gguf", d, "NaN d at %d" % off)

    d = bytearray(base)
    t = tensor(r, "output.weight")
    assert t.tensor_type == T.Q6_K
    off = t.data_offset + 208
    d[off:off + 2] = struct.pack("<H", 0x7C00)  # f16 +inf
    write("inf-scale.gguf", d, "inf d at %d" % off)

    d = bytearray(base)
    at = info_offset(d, "blk.0.attn_k.weight")
    n_dims = struct.unpack_from("<I", d, at)[0]
    ne0, ne1 = struct.unpack_from("<QQ", d, at + 4)
    assert n_dims == 2 and ne0 == 256
    struct.pack_into("<QQ", d, at + 4, 128, ne1 * 2)
    write("row-length.gguf", d, "ne0 128 at %d" % (at + 4))

    d = bytearray(base)
    at = info_offset(d, "blk.0.attn_q.weight")
    type_at = at + 4 + 8 * 2
    assert struct.unpack_from("<I", d, type_at)[0] == int(T.Q2_K)
    struct.pack_into("<I", d, type_at, int(T.Q4_K))
    write("wrong-type.gguf", d, "type Q4_K at %d" % type_at)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
