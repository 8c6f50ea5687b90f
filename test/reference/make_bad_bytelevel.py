#!/usr/bin/env python3
"""Write byte-level BPE tokenizers with one bad or unimplemented thing.

usage: make_bad_bytelevel.py FIXTURES OUTDIR

FIXTURES is test/Inputs/bytelevel (the committed tiny tokenizers). Writes
tokenizer-only GGUF files (via bytelevel_gguf.py, PyPI `gguf`) and copies of
the Hugging Face tokenizer.json with one edit, and prints one line per
fixture saying what is wrong.
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bytelevel_gguf  # noqa: E402


def main(argv):
    fixtures, out = argv[1], argv[2]
    os.makedirs(out, exist_ok=True)
    hf = os.path.join(fixtures, "qwen2", "tokenizer.json")

    def gguf_case(name, pre, edit, why):
        bytelevel_gguf.convert(hf, pre, os.path.join(out, name + ".gguf"), edit)
        print("%s.gguf: %s" % (name, why))

    gguf_case("gguf-pre-unknown", "klingon", None, "tokenizer.ggml.pre is 'klingon'")
    gguf_case("gguf-merge-missing-piece", "qwen2", "missing-merge-piece",
              "merge 3 names a piece that is not a token")
    gguf_case("gguf-malformed-merge", "qwen2", "malformed-merge", "merge 5 has no space")
    gguf_case("gguf-missing-byte", "qwen2", "missing-byte", "no symbol for byte '!'")
    gguf_case("gguf-no-merges", "qwen2", "no-merges", "no tokenizer.ggml.merges")
    gguf_case("gguf-bos-out-of-range", "qwen2", "bos-out-of-range", "bos id beyond the vocabulary")
    gguf_case("gguf-empty-merges", "qwen2", "empty-merges", "tokenizer.ggml.merges is []")
    gguf_case("gguf-duplicate-eos", "qwen2", "duplicate-eos",
              "tokenizer.ggml.eos_token_id twice (the second says 0)")
    gguf_case("gguf-no-pre", None, None, "no tokenizer.ggml.pre key")
    gguf_case("gguf-eos-none", "qwen2", "eos-none", "eos id 4294967295 (none)")

    base = json.load(open(hf, encoding="utf-8"))

    def hf_case(name, edit, why):
        t = json.loads(json.dumps(base))
        edit(t)
        d = os.path.join(out, name)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8") as f:
            json.dump(t, f, ensure_ascii=False)
        print("%s: %s" % (name, why))

    def split(t):
        return t["pre_tokenizer"]["pretokenizers"][0]

    hf_case("hf-bad-regex", lambda t: split(t)["pattern"].update(Regex="(\\p{L}"),
            "Split regex does not compile")
    hf_case("hf-split-removed", lambda t: split(t).update(behavior="Removed"),
            "Split behavior Removed")
    hf_case("hf-prefix-space",
            lambda t: t["pre_tokenizer"]["pretokenizers"][1].update(add_prefix_space=True),
            "ByteLevel add_prefix_space true")
    hf_case("hf-lstrip", lambda t: t["added_tokens"][1].update(lstrip=True),
            "added token with lstrip")
    hf_case("hf-no-decoder", lambda t: t.update(decoder=None), "no ByteLevel decoder")
    hf_case("hf-nfkc", lambda t: t.update(normalizer={"type": "NFKC"}), "NFKC normalizer")

    def missing_byte(t):
        v = t["model"]["vocab"]
        v["<bang>"] = v.pop("!")
        t["model"]["merges"] = [m for m in t["model"]["merges"]
                                if "!" not in (m if isinstance(m, str) else " ".join(m))]
    hf_case("hf-missing-byte", missing_byte, "no symbol for byte '!'")

    def merge_missing(t):
        m = t["model"]["merges"]
        m[2] = ["zq", "nope"] if isinstance(m[2], list) else "zq nope"
    hf_case("hf-merge-missing-piece", merge_missing, "merge 2 names a missing piece")


if __name__ == "__main__":
    main(sys.argv)
