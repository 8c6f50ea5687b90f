#!/usr/bin/env python3
"""Replays the fuzz regression inputs (regressions.test).

usage: replay.py REGRESSIONS_DIR BIN_DIR SHARED_DIR

Every file under REGRESSIONS_DIR/<target>/ runs through BIN_DIR/kiln-fuzz-
<target> (libFuzzer binary with KILN_ENABLE_FUZZERS, replay driver
otherwise), and where a Kiln tool reads that kind of file, through the tool
too: kiln-compile --emit=kiln --fuse=none for checkpoints and tokenizers, kiln-opt for
IR, kiln-run for manifests. Neither may crash (die by a signal or print a sanitizer report); the tool
may fail with an error, which must name something (non-empty stderr).
Prints one line per run and exits 1 on the first crash.
"""

import os
import subprocess
import sys
import tempfile
from pathlib import Path

PART = b"\n#kiln-fuzz-part\n"  # FuzzUtils.h kPartSeparator
REPORTS = (b"ERROR: AddressSanitizer", b"runtime error:", b"ERROR: libFuzzer",
           b"Stack dump", b"PLEASE submit a bug report")


def crashed(proc):
    out = proc.stdout + proc.stderr
    return proc.returncode < 0 or proc.returncode >= 128 or any(
        r in out for r in REPORTS)


def run(cmd, what):
    proc = subprocess.run(cmd, capture_output=True, timeout=300)
    if crashed(proc):
        sys.stderr.write(proc.stderr.decode(errors="replace")[-4000:])
        print("CRASH: %s (exit %d): %s" % (what, proc.returncode, " ".join(map(str, cmd))))
        sys.exit(1)
    if proc.returncode != 0 and not proc.stderr.strip():
        print("SILENT FAILURE: %s: %s" % (what, " ".join(map(str, cmd))))
        sys.exit(1)
    print("ok: %s (exit %d)" % (what, proc.returncode))


def parts(path, n):
    p = path.read_bytes().split(PART)
    return p + [b""] * (n - len(p))


def tool_commands(target, path, bindir, shared, tmp):
    """Commands that feed `path` to the tool a user would run."""
    compile_ = [str(bindir / "kiln-compile")]
    models = shared / "models"
    if target == "gguf":
        return [compile_ + [str(path), "--emit=kiln --fuse=none"]]
    if target == "llama2c":
        model, tok = parts(path, 2)[:2]
        (tmp / "model.bin").write_bytes(model)
        cmd = compile_ + [str(tmp / "model.bin"), "--emit=kiln --fuse=none"]
        if tok:
            (tmp / "tok.bin").write_bytes(tok)
            cmd += ["--tokenizer", str(tmp / "tok.bin")]
        return [cmd]
    if target == "hf":
        p = parts(path, 6)
        d = tmp / "hf"
        d.mkdir()
        (d / "config.json").write_bytes(p[0])
        st = p[1]
        if st[:1] == b"{":
            st = len(st).to_bytes(8, "little") + st
        st += p[2]
        if p[3]:
            (d / "model.safetensors.index.json").write_bytes(p[3])
            (d / "model-00001-of-00001.safetensors").write_bytes(st)
        else:
            (d / "model.safetensors").write_bytes(st)
        if p[4]:
            (d / "tokenizer.json").write_bytes(p[4])
        if p[5]:
            (d / "tokenizer_config.json").write_bytes(p[5])
        return [compile_ + [str(d), "--emit=kiln --fuse=none"]]
    if target == "tokbin" and (models / "stories260K/stories260K.bin").exists():
        return [compile_ + [str(models / "stories260K/stories260K.bin"),
                            "--tokenizer", str(path), "--emit=kiln --fuse=none"]]
    if target == "tokjson" and (models / "tinystories-656k/hf").exists():
        tok = tmp / "tokenizer.json"
        tok.write_bytes(parts(path, 1)[0])
        return [compile_ + [str(models / "tinystories-656k/hf"),
                            "--tokenizer", str(tok), "--emit=kiln --fuse=none"]]
    if target == "ir":
        return [[str(bindir / "kiln-opt"), str(path)]]
    if target == "artifact":
        # No model.so is written: nothing fuzzed is ever dlopen'd.
        manifest, tok = parts(path, 2)[:2]
        d = tmp / "a.kiln"
        d.mkdir()
        (d / "manifest.json").write_bytes(manifest)
        if tok:
            (d / "tokenizer.json").write_bytes(tok)
        return [[str(bindir / "kiln-run"), str(d), "--prompt", "hi",
                 "--max-tokens", "1"]]
    return []


def main():
    regressions, bindir, shared = map(Path, sys.argv[1:4])
    count = 0
    for tdir in sorted(p for p in regressions.iterdir() if p.is_dir()):
        target = tdir.name
        files = sorted(p for p in tdir.iterdir() if p.is_file())
        if not files:
            continue
        fuzzer = bindir / ("kiln-fuzz-" + target)
        run([str(fuzzer), "-runs=0"] + [str(f) for f in files],
            "kiln-fuzz-%s on %d inputs" % (target, len(files)))
        for f in files:
            with tempfile.TemporaryDirectory() as tmp:
                for cmd in tool_commands(target, f, bindir, shared, Path(tmp)):
                    if Path(cmd[0]).exists():
                        run(cmd, "%s on %s/%s" % (Path(cmd[0]).name, target, f.name))
        count += len(files)
    print("replayed %d regression inputs" % count)


if __name__ == "__main__":
    main()
