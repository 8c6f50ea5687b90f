#!/usr/bin/env python3
"""Write a byte-level BPE Hugging Face tokenizer.json as GGUF tokenizer keys.

usage: bytelevel_gguf.py TOKENIZER_JSON PRE OUT.gguf [--edit CASE]

Writes the `tokenizer.ggml.*` keys llama.cpp's convert_hf_to_gguf.py writes
for a `gpt2` vocabulary (tokens in id order, token_type 1 normal / 3 control
(special added tokens) / 4 user-defined (other added tokens), merges,
`tokenizer.ggml.pre` = PRE, bos/eos ids, add_bos_token from the
post-processor) with PyPI `gguf`'s GGUFWriter, and no tensors. Used by
make_bytelevel_fixtures.py (committed fixtures) and by
make_bad_bytelevel.py (CASE: one thing broken, at test time).
"""

import json
import sys

import gguf


def read_hf(path):
    t = json.load(open(path, encoding="utf-8"))
    vocab = dict(t["model"]["vocab"])
    types = {}
    for a in t.get("added_tokens") or []:
        vocab[a["content"]] = a["id"]
        types[a["id"]] = 3 if a["special"] else 4
    n = max(vocab.values()) + 1
    tokens = [None] * n
    for piece, i in vocab.items():
        tokens[i] = piece
    assert all(p is not None for p in tokens), "vocabulary has a gap"
    merges = [m if isinstance(m, str) else " ".join(m) for m in t["model"]["merges"]]
    ttypes = [types.get(i, 1) for i in range(n)]
    bos = None
    pp = t.get("post_processor") or {}
    procs = pp.get("processors", [pp]) if pp.get("type") == "Sequence" else [pp]
    for p in procs:
        if p.get("type") == "TemplateProcessing":
            first = p["single"][0]
            if "SpecialToken" in first:
                bos = vocab[first["SpecialToken"]["id"]]
    return tokens, ttypes, merges, bos


def write(tokens, ttypes, merges, pre, out, bos, eos, add_bos, extra=None):
    w = gguf.GGUFWriter(out, "llama")
    w.add_tokenizer_model("gpt2")
    if pre is not None:
        w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(ttypes)
    w.add_token_merges(merges)
    w.add_bos_token_id(bos)
    w.add_eos_token_id(eos)
    w.add_add_bos_token(add_bos)
    for key, value in (extra or {}).items():
        if isinstance(value, bool):
            w.add_bool(key, value)
        else:
            w.add_uint32(key, value)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def convert(hf_json, pre, out, edit=None):
    tokens, ttypes, merges, bos = read_hf(hf_json)
    eos_piece = next(p for p in tokens if "end" in p and p.startswith("<|"))
    eos = tokens.index(eos_piece)
    add_bos = bos is not None
    if bos is None:
        bos = eos
    extra = {}
    if edit == "missing-merge-piece":
        merges[3] = merges[3].split(" ")[0] + " zq\u0120nope"
    elif edit == "malformed-merge":
        merges[5] = merges[5].replace(" ", "")
    elif edit == "missing-byte":
        # Rename the symbol of byte 0x21 '!' (keeps the merges valid only if
        # none uses it: drop those).
        i = tokens.index("!")
        tokens[i] = "<renamed-bang>"
        ttypes[i] = 1
        merges = [m for m in merges if "!" not in m]
    elif edit == "no-merges":
        merges = None
    elif edit == "bos-out-of-range":
        bos = len(tokens) + 7
    elif edit == "eos-none":
        eos = 0xFFFFFFFF  # llama.cpp's "no token"
    elif edit == "empty-merges":
        merges = merges[:1]  # GGUFWriter skips an empty array: cut below
    elif edit == "duplicate-eos":
        # GGUFWriter will not write a key twice: write a look-alike key and
        # rename it in the bytes below (same length).
        extra["tokenizer.ggml.eos_token_iX"] = 0
    if merges is None:
        w = gguf.GGUFWriter(out, "llama")
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre(pre)
        w.add_token_list(tokens)
        w.add_token_types(ttypes)
        w.add_bos_token_id(bos)
        w.add_eos_token_id(eos)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        return
    write(tokens, ttypes, merges, pre, out, bos, eos, add_bos, extra)
    if edit == "empty-merges":
        # The merges array: key, type 9 (array), element type 8 (string),
        # count 1, then one string (u64 length + bytes): make it count 0.
        import struct
        data = bytearray(open(out, "rb").read())
        key = b"tokenizer.ggml.merges"
        at = data.index(struct.pack("<Q", len(key)) + key) + 8 + len(key)
        assert struct.unpack_from("<IIQ", data, at) == (9, 8, 1)
        struct.pack_into("<Q", data, at + 8, 0)
        n = struct.unpack_from("<Q", data, at + 16)[0]
        del data[at + 16:at + 24 + n]
        data += bytes(32)  # the (empty) data section starts 32-aligned
        open(out, "wb").write(bytes(data))
    if edit == "duplicate-eos":
        data = open(out, "rb").read()
        assert data.count(b"tokenizer.ggml.eos_token_iX") == 1
        data = data.replace(b"tokenizer.ggml.eos_token_iX",
                            b"tokenizer.ggml.eos_token_id")
        open(out, "wb").write(data)


if __name__ == "__main__":
    args = sys.argv[1:]
    edit = None
    if "--edit" in args:
        k = args.index("--edit")
        edit = args[k + 1]
        del args[k:k + 2]
    convert(args[0], args[1], args[2], edit)
