#!/usr/bin/env python3
"""Edits a copy of a Kiln artifact the way a tamperer would, for the artifact
trust tests (test/Integration/artifact-trust.test, docs/security.md).

usage:
  edit_artifact.py rehash ART        recompute files.*.bytes, xxh3_64 and (if
                                     present) blake2b_256 in ART/manifest.json
                                     from the files as they are now
  edit_artifact.py cut-weights ART N  cut ART/weights.bin to N bytes, drop the
                                     weights.tensors entries that no longer
                                     fit, and rehash: an artifact whose only
                                     flaw is that model.so reads past the end
  edit_artifact.py sign ART KEYFILE  write ART/manifest.sig, the Ed25519
                                     signature of ART/manifest.json by the
                                     kiln-keygen secret key KEYFILE
  edit_artifact.py truncate-sig ART N  cut ART/manifest.sig to N bytes

XXH3-64 comes from libxxhash and Ed25519 from libsodium (ctypes), BLAKE2b-256
from hashlib (the same unkeyed BLAKE2b as libsodium's crypto_generichash).
Refuses to touch anything under a 'shared' models folder.
"""
import ctypes
import ctypes.util
import hashlib
import json
import os
import sys


def lib(name):
    path = ctypes.util.find_library(name)
    if not path:
        sys.exit("edit_artifact: lib%s not found" % name)
    return ctypes.CDLL(path)


def xxh3(data):
    x = lib("xxhash")
    x.XXH3_64bits.restype = ctypes.c_uint64
    x.XXH3_64bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    return "%016x" % x.XXH3_64bits(data, len(data))


def rehash(art):
    mpath = os.path.join(art, "manifest.json")
    m = json.load(open(mpath))
    for name, entry in m["files"].items():
        data = open(os.path.join(art, name), "rb").read()
        entry["bytes"] = len(data)
        entry["xxh3_64"] = xxh3(data)
        if "blake2b_256" in entry:
            entry["blake2b_256"] = hashlib.blake2b(data, digest_size=32).hexdigest()
    with open(mpath, "w") as f:
        json.dump(m, f, indent=2)


def cut_weights(art, size):
    with open(os.path.join(art, "weights.bin"), "r+b") as f:
        f.truncate(size)
    mpath = os.path.join(art, "manifest.json")
    m = json.load(open(mpath))
    m["weights"]["tensors"] = [t for t in m["weights"]["tensors"]
                               if t["offset"] + t["bytes"] <= size]
    with open(mpath, "w") as f:
        json.dump(m, f, indent=2)
    rehash(art)


def sign(art, keyfile):
    words = open(keyfile).read().split()
    if len(words) != 2 or words[0] != "kiln-ed25519-secret-key":
        sys.exit("edit_artifact: %s is not a kiln-keygen secret key" % keyfile)
    seed = bytes.fromhex(words[1])
    s = lib("sodium")
    if s.sodium_init() < 0:
        sys.exit("edit_artifact: sodium_init failed")
    pk = ctypes.create_string_buffer(32)
    sk = ctypes.create_string_buffer(64)
    s.crypto_sign_seed_keypair(pk, sk, seed)
    msg = open(os.path.join(art, "manifest.json"), "rb").read()
    sig = ctypes.create_string_buffer(64)
    s.crypto_sign_detached(sig, None, msg, ctypes.c_ulonglong(len(msg)), sk)
    open(os.path.join(art, "manifest.sig"), "wb").write(sig.raw)


def main(argv):
    if len(argv) < 2:
        sys.exit(__doc__)
    cmd, art = argv[0], argv[1]
    if "/shared/models/" in os.path.realpath(art):
        sys.exit("edit_artifact: refusing to modify %s" % art)
    if cmd == "rehash":
        rehash(art)
    elif cmd == "cut-weights":
        cut_weights(art, int(argv[2]))
    elif cmd == "sign":
        sign(art, argv[2])
    elif cmd == "truncate-sig":
        with open(os.path.join(art, "manifest.sig"), "r+b") as f:
            f.truncate(int(argv[2]))
    else:
        sys.exit("edit_artifact: unknown command %r\n%s" % (cmd, __doc__))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
