#!/usr/bin/env python3
"""Small file corruptions for runtime error tests (works on copies only).

usage:
  mutate_file.py flip-byte FILE [OFFSET]      xor one byte with 0xFF (default: the middle)
  mutate_file.py truncate FILE SIZE|half      cut the file to SIZE bytes (or half of it)
  mutate_file.py json-set FILE KEY[.KEY...] JSONVALUE
                                               set a field of a JSON file, e.g.
                                               json-set manifest.json version 2
Refuses to touch anything under a 'shared' models folder.
"""
import json
import os
import sys


def main(argv):
    if len(argv) < 2:
        sys.exit(__doc__)
    cmd, path = argv[0], argv[1]
    if "/shared/models/" in os.path.realpath(path):
        sys.exit("mutate_file: refusing to modify %s" % path)
    if cmd == "flip-byte":
        data = bytearray(open(path, "rb").read())
        off = int(argv[2]) if len(argv) > 2 else len(data) // 2
        data[off] ^= 0xFF
        open(path, "wb").write(bytes(data))
        print("flipped byte %d of %s" % (off, path))
    elif cmd == "truncate":
        size = os.path.getsize(path)
        new = size // 2 if argv[2] == "half" else int(argv[2])
        with open(path, "r+b") as f:
            f.truncate(new)
        print("truncated %s from %d to %d bytes" % (path, size, new))
    elif cmd == "json-set":
        d = json.load(open(path))
        keys = argv[2].split(".")
        o = d
        for k in keys[:-1]:
            o = o[k]
        o[keys[-1]] = json.loads(argv[3])
        with open(path, "w") as f:
            json.dump(d, f, indent=2)
        print("set %s = %s in %s" % (argv[2], argv[3], path))
    else:
        sys.exit("mutate_file: unknown command %r\n%s" % (cmd, __doc__))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
