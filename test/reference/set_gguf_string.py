#!/usr/bin/env python3
"""Copies a GGUF with one string key set (added or replaced).

usage: set_gguf_string.py SRC.gguf OUT.gguf KEY VALUE_FILE

VALUE_FILE holds the value (UTF-8), e.g. a chat template for
tokenizer.chat_template. Metadata and tensors are otherwise copied as they
are (gguf-py's GGUFReader / GGUFWriter). Refuses to write into a 'shared'
models folder.
"""

import os
import sys

import numpy as np
from gguf import GGUFReader, GGUFWriter, GGUFValueType as V


def main(src, dst, key, value_file):
    if "/shared/models/" in os.path.realpath(dst):
        sys.exit("set_gguf_string: refusing to write %s" % dst)
    value = open(value_file, encoding="utf-8").read()
    r = GGUFReader(src)
    w = GGUFWriter(dst, r.fields["general.architecture"].contents())
    for name, field in r.fields.items():
        if name.startswith("GGUF.") or name in ("general.architecture", key):
            continue
        vtype = field.types[0]
        sub = field.types[1] if vtype == V.ARRAY else None
        w.add_key_value(name, field.contents(), vtype, sub_type=sub)
    w.add_string(key, value)
    for t in r.tensors:
        data = np.array(t.data)
        w.add_tensor(t.name, data, raw_shape=data.shape, raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    main(*sys.argv[1:])
