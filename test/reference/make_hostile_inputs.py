#!/usr/bin/env python3
"""Write hostile variants of the real checkpoints for input-hardening tests.

usage: make_hostile_inputs.py OUTDIR [--shared DIR]

Companion of make_bad_inputs.py for test/Import/hostile-files.test: files that
must not hang or exhaust the compiler (FIFOs, JSON nested 50,000 deep),
Hugging Face index entries that point outside the model directory, lenient
values (float or string shapes and config fields), an absurd context length
and checkpoints whose config and tensors disagree about tied embeddings.
Every fixture is derived from a real file in shared/models (never modified in
place); Hugging Face fixtures are whole directories named hf-*.

Prints one line per generated path (relative to OUTDIR) with what it is.
"""

import argparse
import json
import os
import shutil
import struct
import sys

DEEP = 50000  # nesting that overflows llvm::json::parse's recursion


def find_shared(arg):
    here = os.path.dirname(os.path.abspath(__file__))
    for cand in (arg, os.environ.get("KILN_SHARED"),
                 os.path.join(here, "..", "..", "..", "shared"), "/work/shared"):
        if cand and os.path.isdir(os.path.join(cand, "models")):
            return os.path.abspath(cand)
    sys.exit("make_hostile_inputs: cannot find the shared folder (pass --shared)")


def st_read(path):
    """(header dict, data bytes) of a safetensors file."""
    raw = open(path, "rb").read()
    n = struct.unpack_from("<Q", raw, 0)[0]
    return json.loads(raw[8:8 + n]), raw[8 + n:]


def st_bytes(hdr, data, header_text=None):
    text = header_text if header_text is not None else json.dumps(hdr)
    h = text.encode()
    return struct.pack("<Q", len(h)) + h + data


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("outdir")
    ap.add_argument("--shared")
    args = ap.parse_args(argv)
    shared = find_shared(args.shared)
    out = os.path.abspath(args.outdir)
    os.makedirs(out, exist_ok=True)
    hf = os.path.join(shared, "models", "tinystories-656k", "hf")
    hdr, data = st_read(os.path.join(hf, "model.safetensors"))
    cfg = json.load(open(os.path.join(hf, "config.json")))
    deep = "[" * DEEP + "]" * DEEP

    def note(path, why):
        print("%s: %s" % (os.path.relpath(path, out), why))

    def hf_dir(name, why, config=None, st=None, st_text=None, files=None):
        """A copy of the TinyStories-656K directory with `config`, the
        safetensors (header dict + data, or raw bytes) and extra `files`
        ({name: text}) replaced."""
        d = os.path.join(out, name)
        os.makedirs(d, exist_ok=True)
        for f in os.listdir(hf):
            if f not in ("model.safetensors", "config.json"):
                shutil.copyfile(os.path.join(hf, f), os.path.join(d, f))
        with open(os.path.join(d, "config.json"), "w") as f:
            f.write(config if isinstance(config, str) else json.dumps(config or cfg))
        if st is not None or st_text is not None:
            raw = st if isinstance(st, bytes) else st_bytes(*(st or (hdr, data)), header_text=st_text)
            open(os.path.join(d, "model.safetensors"), "wb").write(raw)
        else:
            shutil.copyfile(os.path.join(hf, "model.safetensors"),
                            os.path.join(d, "model.safetensors"))
        for fname, text in (files or {}).items():
            with open(os.path.join(d, fname), "w") as f:
                f.write(text)
        note(d, why)
        return d

    # --- FIFOs, directories and devices where a file is expected
    def fifo(path, why):
        os.mkfifo(path)
        note(path, why)

    for name in ("fifo.bin", "fifo.gguf", "fifo.txt", "fifo.safetensors", "tok.fifo"):
        fifo(os.path.join(out, name), "a FIFO")
    for f in ("config.json", "model.safetensors", "tokenizer.json",
              "tokenizer_config.json", "model.safetensors.index.json"):
        d = hf_dir("hf-fifo-" + f.split(".")[0].replace("_", "-") +
                   ("-index" if "index" in f else ""), "%s is a FIFO" % f)
        if os.path.exists(os.path.join(d, f)):
            os.remove(os.path.join(d, f))
        fifo(os.path.join(d, f), "a FIFO in an HF directory")
    for f in ("config.json", "model.safetensors", "tokenizer.json"):
        d = hf_dir("hf-dir-" + f.split(".")[0], "%s is a directory" % f)
        os.remove(os.path.join(d, f))
        os.mkdir(os.path.join(d, f))
    os.mkdir(os.path.join(out, "dir.safetensors"))
    note(os.path.join(out, "dir.safetensors"), "a directory")

    # --- JSON nested 50,000 deep
    hf_dir("hf-deep-config", "config.json is %d nested arrays" % DEEP, config=deep)
    hf_dir("hf-deep-tokenizer", "tokenizer.json is %d nested arrays" % DEEP,
           files={"tokenizer.json": deep})
    hf_dir("hf-deep-tokenizer-config", "tokenizer_config.json is %d nested arrays" % DEEP,
           files={"tokenizer_config.json": deep})
    hf_dir("hf-deep-index", "model.safetensors.index.json is %d nested arrays" % DEEP,
           files={"model.safetensors.index.json": deep})
    hf_dir("hf-deep-header", "safetensors header is %d nested arrays" % DEEP,
           st=st_bytes({}, b"", header_text=deep))
    # The depth is in a value, after a string full of brackets.
    c = dict(cfg)
    c["_comment"] = "[" * 300 + '\\"' + "{" * 300
    hf_dir("hf-deep-config-field", "config.json field 'x' nested %d deep" % DEEP,
           config=json.dumps(c)[:-1] + ', "x": ' + deep + "}")
    # Brackets inside strings do not count: this one imports.
    hf_dir("hf-brackets-in-string", "config.json has a string of 600 brackets (fine)",
           config=c)
    with open(os.path.join(out, "deep.json"), "w") as f:
        f.write(deep)
    note(os.path.join(out, "deep.json"), "%d nested arrays" % DEEP)

    # --- index entries outside the model directory
    def index_dir(name, why, target, everything=False):
        wm = {k: "model.safetensors" for k in hdr if k != "__metadata__"}
        for k in (wm if everything else ["model.norm.weight"]):
            wm[k] = target
        return hf_dir(name, why, files={"model.safetensors.index.json":
                                        json.dumps({"metadata": {}, "weight_map": wm})})

    index_dir("hf-index-dotdot", "index maps model.norm.weight to ../x.safetensors",
              "../x.safetensors")
    shutil.copyfile(os.path.join(hf, "model.safetensors"), os.path.join(out, "x.safetensors"))
    index_dir("hf-index-absolute", "index maps model.norm.weight to /etc/passwd", "/etc/passwd")
    d = index_dir("hf-index-symlink", "index maps model.norm.weight to link.safetensors, "
                  "a symlink to ../x.safetensors", "link.safetensors")
    os.symlink(os.path.join(out, "x.safetensors"), os.path.join(d, "link.safetensors"))
    d = index_dir("hf-index-inside", "index maps every tensor to inside.safetensors, "
                  "a symlink to model.safetensors beside it (fine)", "inside.safetensors",
                  everything=True)
    os.symlink("model.safetensors", os.path.join(d, "inside.safetensors"))
    # A Hugging Face hub cache: snapshots/<rev>/* are symlinks into ../../blobs.
    repo = os.path.join(out, "hub", "models--x--tiny")
    os.makedirs(os.path.join(repo, "blobs"))
    snap = os.path.join(repo, "snapshots", "0123abc")
    os.makedirs(snap)
    for f in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(os.path.join(hf, f), os.path.join(repo, "blobs", "blob-" + f))
        os.symlink(os.path.join("..", "..", "blobs", "blob-" + f), os.path.join(snap, f))
    wm = {k: "model.safetensors" for k in hdr if k != "__metadata__"}
    with open(os.path.join(repo, "blobs", "blob-index"), "w") as f:
        json.dump({"weight_map": wm}, f)
    os.symlink(os.path.join("..", "..", "blobs", "blob-index"),
               os.path.join(snap, "model.safetensors.index.json"))
    note(snap, "a hub cache snapshot whose files link to ../../blobs (accepted)")

    # --- lenient values, now rejected
    def with_shape(value):
        h = json.loads(json.dumps(hdr))
        h["model.norm.weight"]["shape"] = value
        return h, data

    hf_dir("hf-float-shape", "model.norm.weight shape [128.5]", st=with_shape([128.5]))
    hf_dir("hf-string-shape", 'model.norm.weight shape ["128"]', st=with_shape(["128"]))
    for key, value, name in (("hidden_size", 128.5, "hf-float-hidden"),
                             ("hidden_size", "128", "hf-string-hidden"),
                             ("tie_word_embeddings", "true", "hf-string-tie"),
                             ("attention_bias", 1, "hf-int-bias")):
        c = dict(cfg)
        c[key] = value
        hf_dir(name, "config.json %s = %s" % (key, json.dumps(value)), config=c)

    # --- absurd context length
    c = dict(cfg)
    c["max_position_embeddings"] = 2 ** 31
    hf_dir("hf-huge-context", "config.json max_position_embeddings = 2^31", config=c)

    # --- tied embeddings: config and tensors disagree
    # TinyStories-656K stores only lm_head.weight and aliases the embedding
    # to it. As model.embed_tokens.weight alone, without the alias:
    h = {k: v for k, v in hdr.items() if k != "lm_head.weight"}
    h["model.embed_tokens.weight"] = hdr["lm_head.weight"]
    h["__metadata__"] = {"format": "pt"}
    for tie, name in ((False, "hf-untied-no-head"), (None, "hf-unset-no-head"),
                      (True, "hf-tied-no-head")):
        c = dict(cfg)
        if tie is None:
            del c["tie_word_embeddings"]
        else:
            c["tie_word_embeddings"] = tie
        hf_dir(name, "only model.embed_tokens.weight, tie_word_embeddings %s" % tie,
               config=c, st=(h, data))
    # Both tensors, lm_head different (its bytes reversed row by row is
    # enough: another matrix of the same shape and dtype), config tied.
    lm = hdr["lm_head.weight"]
    b, e = lm["data_offsets"]
    rows, cols = lm["shape"]
    row = cols * 4
    head = b"".join(data[b + r * row:b + (r + 1) * row] for r in reversed(range(rows)))
    h = json.loads(json.dumps(hdr))
    h["__metadata__"] = {"format": "pt"}
    h["model.embed_tokens.weight"] = {"dtype": lm["dtype"], "shape": lm["shape"],
                                      "data_offsets": [len(data), len(data) + (e - b)]}
    hf_dir("hf-tied-different-head", "tie_word_embeddings true, lm_head.weight differs "
           "from model.embed_tokens.weight", st=(h, data + head))
    hf_dir("hf-tied-same-head", "tie_word_embeddings true, lm_head.weight equal to "
           "model.embed_tokens.weight (tied)", st=(h, data + data[b:e]))

    # llama2.c: stories260K (shared classifier, vocab 512, dim 64).
    s = os.path.join(shared, "models", "stories260K")
    raw = open(os.path.join(s, "stories260K.bin"), "rb").read()
    dim, vocab = struct.unpack_from("<i", raw, 0)[0], struct.unpack_from("<i", raw, 20)[0]
    emb = raw[28:28 + vocab * dim * 4]

    def l2c(name, why, blob):
        d = os.path.join(out, name)
        os.makedirs(d, exist_ok=True)
        open(os.path.join(d, "stories260K.bin"), "wb").write(blob)
        shutil.copyfile(os.path.join(s, "tok512.bin"), os.path.join(d, "tok512.bin"))
        note(os.path.join(d, "stories260K.bin"), why)

    l2c("l2c-untied-no-wcls", "vocab_size -512 (unshared classifier) but no wcls",
        raw[:20] + struct.pack("<i", -vocab) + raw[24:])
    wcls = b"".join(emb[r * dim * 4:(r + 1) * dim * 4] for r in reversed(range(vocab)))
    l2c("l2c-tied-extra-wcls", "vocab_size 512 (shared) followed by a different wcls",
        raw + wcls)
    l2c("l2c-tied-same-wcls", "vocab_size 512 (shared) followed by a copy of the embedding",
        raw + emb)
    return 0


if __name__ == "__main__":
    sys.exit(main())
