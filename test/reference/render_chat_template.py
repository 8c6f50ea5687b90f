#!/usr/bin/env python3
"""Reference renderer for Kiln's chat-template tests (test/Chat).

  render_chat_template.py TEMPLATE CONTEXT.json      render with python3-jinja2
  render_chat_template.py --gguf MODEL.gguf OUT      extract tokenizer.chat_template

Renders the way transformers' apply_chat_template does (its
_compile_jinja_template): an ImmutableSandboxedEnvironment with
trim_blocks=True, lstrip_blocks=True and the loopcontrols extension, the
globals raise_exception() and strftime_now(), and `tojson` replaced by
json.dumps(ensure_ascii=False). The text goes to stdout byte for byte; a
template error goes to stderr as "error: <Exception>: <message>" with exit
status 1. The --gguf form reads the GGUF metadata (v2/v3) with its own small
parser (no gguf package needed) and writes the key's string to OUT.
"""
import json
import struct
import sys
from datetime import datetime


def render(template_path, context_path):
    import jinja2
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent,
                          separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    with open(template_path, encoding="utf-8", newline="") as f:
        source = f.read()
    with open(context_path, encoding="utf-8") as f:
        context = json.load(f)
    try:
        text = env.from_string(source).render(**context)
    except Exception as e:  # noqa: BLE001 - report any template error
        sys.stderr.write("error: %s: %s\n" % (type(e).__name__, e))
        return 1
    sys.stdout.buffer.write(text.encode("utf-8"))
    return 0


def gguf_string(path, key):
    with open(path, "rb") as f:
        data = f.read(64 << 20)  # metadata precedes the tensor data
    if data[:4] != b"GGUF":
        raise SystemExit("%s: not a GGUF file" % path)
    version, = struct.unpack_from("<I", data, 4)
    if version not in (2, 3):
        raise SystemExit("%s: GGUF version %d" % (path, version))
    _, n_kv = struct.unpack_from("<QQ", data, 8)
    pos = 24
    scalar = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?",
              10: "Q", 11: "q", 12: "d"}

    def read_str(pos):
        n, = struct.unpack_from("<Q", data, pos)
        return data[pos + 8:pos + 8 + n], pos + 8 + n

    def skip(kind, pos):
        if kind in scalar:
            return None, pos + struct.calcsize("<" + scalar[kind])
        if kind == 8:
            return read_str(pos)
        if kind == 9:
            item, n = struct.unpack_from("<IQ", data, pos)
            pos += 12
            for _ in range(n):
                _, pos = skip(item, pos)
            return None, pos
        raise SystemExit("%s: bad GGUF value type %d" % (path, kind))

    for _ in range(n_kv):
        name, pos = read_str(pos)
        kind, = struct.unpack_from("<I", data, pos)
        value, pos = skip(kind, pos + 4)
        if name.decode() == key:
            if kind != 8:
                raise SystemExit("%s: %s is not a string" % (path, key))
            return value
    raise SystemExit("%s: no key %s" % (path, key))


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--gguf":
        with open(sys.argv[3], "wb") as out:
            out.write(gguf_string(sys.argv[2], "tokenizer.chat_template"))
        sys.exit(0)
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sys.exit(render(sys.argv[1], sys.argv[2]))
