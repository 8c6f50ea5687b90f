#!/usr/bin/env python3
"""Write tokenizers with one bad or unimplemented thing for import tests.

usage: make_bad_tokenizers.py OUTDIR [--shared DIR]
       make_bad_tokenizers.py edit-artifact ARTIFACT CASE

The first form derives every fixture from a real file in shared/models
(never modified in place): llama2.c tok512.bin, the stories260K and
TinyStories-656K GGUF files, and copies of the TinyStories-656K Hugging Face
directory whose tokenizer.json (or tokenizer_config.json) is edited. Prints
one line per fixture with what is wrong.

The second form corrupts the tokenizer.json of a compiled artifact the way
CASE says (merge-missing-piece, inf-score: a score beyond float range,
bad-type, deep, bytelevel-bad-regex, bytelevel-missing-byte) and re-hashes it
in manifest.json (XXH3-64 through libxxhash), so that only the tokenizer
check can refuse it.
"""

import copy
import ctypes
import ctypes.util
import json
import os
import shutil
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_bad_inputs import find_shared, gguf_layout  # noqa: E402

SPACE = "\u2581"


def gguf_array_elem(raw, layout, key, index, fmt):
    """Byte offset of element `index` of the numeric array under `key`."""
    kv = layout["kv"][key]
    assert kv["type"] == 9
    start = kv["value_start"] + 4 + 8  # element type, count
    return start + index * struct.calcsize(fmt)


def gguf_replace_string(raw, layout, key, new):
    """Rebuilds the file with the string value of `key` replaced; the
    tensor data must stay where it was (same aligned start)."""
    kv = layout["kv"][key]
    assert kv["type"] == 8
    enc = new.encode()
    out = raw[:kv["value_start"]] + struct.pack("<Q", len(enc)) + enc + raw[kv["end"]:]
    delta = len(out) - len(raw)
    info_end = layout["info_end"] + delta
    old_data = (layout["info_end"] + 31) // 32 * 32
    new_data = (info_end + 31) // 32 * 32
    assert new_data == old_data, "tensor data would move"
    data = bytearray(out)
    head = bytes(data[:info_end]) + b"\0" * (old_data - info_end)
    return head + raw[old_data:]


def put(out, rel, data, why):
    path = os.path.join(out, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    print("%s: %s" % (rel, why))


def make(out, shared):
    models = os.path.join(shared, "models")
    os.makedirs(out, exist_ok=True)

    # llama2.c tok512.bin: max_token_length, then (f32 score, i32 len, bytes).
    tok = bytearray(open(os.path.join(models, "stories260K", "tok512.bin"), "rb").read())
    pos, target = 4, 5
    for i in range(target):
        n = struct.unpack_from("<i", tok, pos + 4)[0]
        pos += 8 + n
    struct.pack_into("<f", tok, pos, float("nan"))
    put(out, "tok512-nan-score.bin", bytes(tok), "score of token 5 (offset %d) is NaN" % pos)

    g = open(os.path.join(models, "stories260K", "stories260K.gguf"), "rb").read()
    L = gguf_layout(g)
    b = bytearray(g)
    struct.pack_into("<f", b, gguf_array_elem(g, L, "tokenizer.ggml.scores", 7, "<f"), float("inf"))
    put(out, "gguf-inf-score.gguf", bytes(b), "tokenizer.ggml.scores[7] is +inf")
    b = bytearray(g)
    struct.pack_into("<i", b, gguf_array_elem(g, L, "tokenizer.ggml.token_type", 9, "<i"), 9)
    put(out, "gguf-bad-type.gguf", bytes(b), "tokenizer.ggml.token_type[9] is 9")
    b = bytearray(g)
    struct.pack_into("<i", b, gguf_array_elem(g, L, "tokenizer.ggml.token_type", 300, "<i"), 4)
    put(out, "gguf-user-defined.gguf", bytes(b), "token 300 is user-defined (type 4)")
    b = bytearray(g)
    kv = L["kv"]["tokenizer.ggml.padding_token_id"]
    struct.pack_into("<I", b, kv["value_start"], 5000)
    put(out, "gguf-pad-out-of-range.gguf", bytes(b), "tokenizer.ggml.padding_token_id is 5000")
    put(out, "gguf-gpt2.gguf", gguf_replace_string(g, L, "tokenizer.ggml.model", "gpt2"),
        "tokenizer.ggml.model is 'gpt2' (byte-level BPE)")
    q8 = open(os.path.join(models, "tinystories-656k", "gguf", "TinyStories-656K-Q8_0.gguf"), "rb").read()
    LQ = gguf_layout(q8)
    b = bytearray(q8)
    b[LQ["kv"]["tokenizer.ggml.add_eos_token"]["value_start"]] = 1
    put(out, "gguf-add-eos.gguf", bytes(b), "tokenizer.ggml.add_eos_token is true")

    # Hugging Face: copies of the TinyStories-656K directory.
    hf = os.path.join(models, "tinystories-656k", "hf")
    base = json.load(open(os.path.join(hf, "tokenizer.json"), encoding="utf-8"))

    def hf_case(name, why, edit=None, config_edit=None):
        d = os.path.join(out, name)
        os.makedirs(d, exist_ok=True)
        for f in os.listdir(hf):
            shutil.copyfile(os.path.join(hf, f), os.path.join(d, f))
        if edit:
            t = copy.deepcopy(base)
            edit(t)
            with open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8") as f:
                json.dump(t, f, ensure_ascii=False)
        if config_edit:
            p = os.path.join(d, "tokenizer_config.json")
            c = json.load(open(p))
            config_edit(c)
            json.dump(c, open(p, "w"))
        print("%s/: %s" % (name, why))

    def set_merge(t):
        t["model"]["merges"][2] = "t zq"
    hf_case("hf-merge-missing-piece", "model.merges[2] is 't zq' ('zq' is no piece)", set_merge)

    def set_merge_result(t):
        t["model"]["merges"][4] = "a ." if "a." not in t["model"]["vocab"] else "a a"
    hf_case("hf-merge-missing-result", "model.merges[4] makes a piece not in the vocabulary",
            set_merge_result)

    def lowercase(t):
        t["normalizer"]["normalizers"].append({"type": "Lowercase"})
    hf_case("hf-lowercase", "normalizer Sequence has a Lowercase", lowercase)

    def nfkc(t):
        t["normalizer"] = {"type": "NFKC"}
    hf_case("hf-nfkc", "normalizer is NFKC", nfkc)

    def fuse_string(t):
        t["model"]["fuse_unk"] = "yes"
    hf_case("hf-fuse-unk-string", "model.fuse_unk is \"yes\"", fuse_string)

    def digits(t):
        t["pre_tokenizer"] = {"type": "Digits", "individual_digits": True}
    hf_case("hf-digits", "pre_tokenizer is Digits", digits)

    def bytelevel(t):
        t["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": False,
                              "trim_offsets": True, "use_regex": True}
    hf_case("hf-bytelevel", "pre_tokenizer is ByteLevel (GPT-2)", bytelevel)

    def unigram(t):
        t["model"]["type"] = "Unigram"
    hf_case("hf-unigram", "model.type is Unigram", unigram)

    def nonspecial(t):
        t["added_tokens"][2]["special"] = False
    hf_case("hf-added-not-special", "added_tokens[2] is not special", nonspecial)

    def dropout(t):
        t["model"]["dropout"] = 0.1
    hf_case("hf-dropout", "model.dropout is 0.1", dropout)

    def decoder(t):
        t["decoder"] = {"type": "WordPiece", "prefix": "##", "cleanup": True}
    hf_case("hf-wordpiece-decoder", "decoder is WordPiece", decoder)

    def template_eos(t):
        t["post_processor"]["single"].append(
            {"SpecialToken": {"id": "<|end_story|>", "type_id": 0}})
    hf_case("hf-template-eos", "post_processor appends <|end_story|>", template_eos)

    def unk_missing(t):
        t["model"]["unk_token"] = "<nope>"
    hf_case("hf-unk-missing", "model.unk_token is not in the vocabulary", unk_missing)

    def dup_id(t):
        v = t["model"]["vocab"]
        v["a"] = v["b"]
    hf_case("hf-duplicate-id", "model.vocab gives 'a' the id of 'b'", dup_id)

    def no_space(t):
        t["normalizer"] = None
    hf_case("hf-no-space-rule", "no normalizer: ' ' stays ' '", no_space)

    hf_case("hf-add-eos", "tokenizer_config.json add_eos_token is true",
            config_edit=lambda c: c.__setitem__("add_eos_token", True))


def xxh3_hex(data):
    lib = ctypes.CDLL(ctypes.util.find_library("xxhash") or "libxxhash.so.0")
    lib.XXH3_64bits.restype = ctypes.c_uint64
    lib.XXH3_64bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    return "%016x" % lib.XXH3_64bits(data, len(data))


def edit_artifact(art, case):
    if "/shared/models/" in os.path.realpath(art):
        sys.exit("make_bad_tokenizers: refusing to modify %s" % art)
    path = os.path.join(art, "tokenizer.json")
    t = json.load(open(path))
    text = None
    if case == "merge-missing-piece":
        t["merges"][2] = "t zq"
    elif case == "bad-type":
        t["types"][9] = 9
    elif case == "inf-score":
        t["scores"][7] = 12345.5
        text = json.dumps(t).replace("12345.5", "1e300")  # beyond float
    elif case == "bytelevel-bad-regex":
        t["pre_tokenizer_regexes"][0] = "(\\p{L}"
    elif case == "bytelevel-missing-byte":
        bang = bytes("!", "ascii").hex()
        t["pieces_hex"] = [("3c62616e673e" if p == bang else p) for p in t["pieces_hex"]]
        t["merges"] = [m for m in t["merges"] if "!" not in m]
    elif case == "deep":
        text = json.dumps(t)[:-1] + ', "x": ' + "[" * 100000 + "]" * 100000 + "}"
    else:
        sys.exit("make_bad_tokenizers: unknown case %r" % case)
    data = (text if text is not None else json.dumps(t)).encode()
    with open(path, "wb") as f:
        f.write(data)
    mpath = os.path.join(art, "manifest.json")
    m = json.load(open(mpath))
    entry = m["files"]["tokenizer.json"]
    entry["bytes"] = len(data)
    entry["xxh3_64"] = xxh3_hex(data)
    with open(mpath, "w") as f:
        json.dump(m, f, indent=2)
    print("%s: tokenizer.json %s, re-hashed" % (art, case))


def main(argv):
    if len(argv) >= 1 and argv[0] == "edit-artifact":
        if len(argv) != 3:
            sys.exit(__doc__)
        edit_artifact(argv[1], argv[2])
        return 0
    if not argv:
        sys.exit(__doc__)
    shared = None
    if "--shared" in argv:
        i = argv.index("--shared")
        shared = argv[i + 1]
        del argv[i:i + 2]
    make(argv[0], find_shared(shared))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
