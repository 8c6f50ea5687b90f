#!/usr/bin/env python3
"""Helpers of scripts/bench-vs-llama-cpp.sh (not meant to be run by hand).

  peerbench.py info FILE.gguf
      One line of shell assignments about a GGUF file: its context length,
      the Kiln --dtype that keeps its float weights' size (f16 for F16 files),
      and the bytes one decode step reads (see decode_bytes).
  peerbench.py llama-json FILE.json
      "pp RATE" / "tg RATE" lines from llama-bench -o json output.
  peerbench.py report RAW.tsv [--markdown FILE] [--csv FILE] [--title TEXT]
      The comparison table (text on stdout) from the raw per-round results.
"""
import csv
import json
import shlex
import statistics
import sys


def die(msg):
    sys.exit(f"peerbench.py: error: {msg}")


def decode_bytes(tensors):
    """Bytes one batch-1 decode step must read from memory: every tensor
    once (all layer matrices, norms, the final norm and the output matrix),
    except the token embedding table, of which only the current token's row
    is read. With tied embeddings (no output.weight) the output projection
    reads the whole table, so it is counted in full as the output matrix, on
    top of the one row read at the start of the step."""
    total = 0
    embd = None
    has_output = False
    for t in tensors:
        if t.name == "token_embd.weight":
            embd = t
            continue
        if t.name == "output.weight":
            has_output = True
        total += int(t.n_bytes)
    if embd is None:
        die("no token_embd.weight tensor")
    rows = int(embd.shape[-1])  # ggml order: shape[0] = dim, shape[1] = vocab
    row = int(embd.n_bytes) // rows
    total += row
    if not has_output:
        total += int(embd.n_bytes)
    return total, row, has_output


def cmd_info(path):
    try:
        import gguf
    except ImportError as e:
        die(f"{e}; install with `python3 -m pip install gguf==0.19.0` (scripts/setup.sh)")
    r = gguf.GGUFReader(path)
    arch_f = r.fields.get("general.architecture")
    if arch_f is None:
        die(f"{path}: no general.architecture")
    arch = bytes(arch_f.parts[arch_f.data[0]]).decode()
    ctx_f = r.fields.get(f"{arch}.context_length")
    ctx = int(ctx_f.parts[ctx_f.data[0]][0]) if ctx_f is not None else 0
    per_token, row, has_output = decode_bytes(r.tensors)
    # Types of the 2-D tensors, most bytes first: "Q4_1+Q8_0".
    by_type = {}
    for t in r.tensors:
        if len(t.shape) >= 2:
            name = t.tensor_type.name
            by_type[name] = by_type.get(name, 0) + int(t.n_bytes)
    types = "+".join(k for k, _ in sorted(by_type.items(), key=lambda kv: -kv[1]))
    floats = set(by_type) <= {"F16"} and by_type
    dtype = "f16" if floats else "f32"
    total = sum(int(t.n_bytes) for t in r.tensors)
    out = dict(ctx=ctx, kiln_dtype=dtype, decode_bytes=per_token,
               tensor_bytes=total, weight_types=types,
               tied=0 if has_output else 1)
    print(" ".join(f"{k}={shlex.quote(str(v))}" for k, v in out.items()))


def cmd_llama_json(path):
    try:
        with open(path) as f:
            runs = json.load(f)
    except (OSError, ValueError) as e:
        die(f"cannot read llama-bench JSON {path}: {e}")
    if not isinstance(runs, list):
        die(f"{path}: expected a JSON list of llama-bench tests")
    for run in runs:
        n_p, n_g = int(run.get("n_prompt", 0)), int(run.get("n_gen", 0))
        rate = float(run["avg_ts"])
        if n_p > 0 and n_g == 0:
            print(f"pp {rate}")
        elif n_g > 0 and n_p == 0:
            print(f"tg {rate}")
        if run.get("build_commit"):
            print(f"build {run['build_commit']}")


def fmt(v, digits=1):
    if v is None:
        return "n/a"
    return f"{v:,.{digits}f}"


def ratio(a, b):
    return None if a is None or b is None or b == 0 else a / b


def cmd_report(argv):
    import argparse
    ap = argparse.ArgumentParser(prog="peerbench.py report")
    ap.add_argument("raw")
    ap.add_argument("--markdown")
    ap.add_argument("--csv")
    ap.add_argument("--title", default="")
    a = ap.parse_args(argv)
    # RAW lines: file<TAB>key<TAB>value; keys: meta.* (one value) or
    # kiln_pp, kiln_tg, llama_pp, llama_tg, bw (one value per round).
    meta, samples, order = {}, {}, []
    with open(a.raw) as f:
        for line in f:
            line = line.rstrip("\n")
            if not line:
                continue
            parts = line.split("\t")
            if len(parts) != 3:
                die(f"{a.raw}: malformed line {line!r}")
            name, key, value = parts
            if name not in meta:
                meta[name], samples[name] = {}, {}
                order.append(name)
            if key.startswith("meta."):
                meta[name][key[5:]] = value
            else:
                samples[name].setdefault(key, []).append(float(value))

    def med(name, key):
        v = samples[name].get(key)
        return statistics.median(v) if v else None

    rows = []
    for name in order:
        m = meta[name]
        bpt = float(m["decode_bytes"]) if "decode_bytes" in m else None
        bw = med(name, "bw")  # GB/s
        roof = bw * 1e9 / bpt if bw and bpt else None
        kpp, lpp = med(name, "kiln_pp"), med(name, "llama_pp")
        ktg, ltg = med(name, "kiln_tg"), med(name, "llama_tg")
        rows.append(dict(
            file=name, weights=m.get("weight_types", ""), pp=m.get("pp", ""),
            tg=m.get("tg", ""),
            kiln_pp=kpp, llama_pp=lpp, pp_ratio=ratio(kpp, lpp),
            kiln_tg=ktg, llama_tg=ltg, tg_ratio=ratio(ktg, ltg),
            mb_per_token=bpt / 1e6 if bpt else None, bandwidth=bw, roofline=roof,
            kiln_eff=ratio(ktg, roof), llama_eff=ratio(ltg, roof),
            runs=len(samples[name].get("kiln_tg", [])), note=m.get("note", "")))

    header = ["file", "weights", "test", "Kiln pp tok/s", "llama.cpp pp tok/s",
              "pp Kiln/llama", "Kiln tg tok/s", "llama.cpp tg tok/s",
              "tg Kiln/llama", "MB/token", "bandwidth GB/s", "roofline tok/s",
              "Kiln % roof", "llama % roof"]

    def cells(r):
        pct = lambda v: "n/a" if v is None else f"{100 * v:.0f}%"
        rat = lambda v: "n/a" if v is None else f"{v:.2f}"
        return [r["file"] + (f" ({r['note']})" if r["note"] else ""), r["weights"],
                f"pp{r['pp']}/tg{r['tg']}",
                fmt(r["kiln_pp"]), fmt(r["llama_pp"]), rat(r["pp_ratio"]),
                fmt(r["kiln_tg"]), fmt(r["llama_tg"]), rat(r["tg_ratio"]),
                fmt(r["mb_per_token"], 2), fmt(r["bandwidth"]), fmt(r["roofline"]),
                pct(r["kiln_eff"]), pct(r["llama_eff"])]

    table = [header] + [cells(r) for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    if a.title:
        print(a.title)
    for i, row in enumerate(table):
        print("  ".join(c.rjust(w) if j > 1 else c.ljust(w)
                        for j, (c, w) in enumerate(zip(row, widths))))
        if i == 0:
            print("  ".join("-" * w for w in widths))

    if a.markdown:
        with open(a.markdown, "w") as f:
            if a.title:
                f.write(a.title + "\n\n")
            f.write("| " + " | ".join(header) + " |\n")
            f.write("| " + " | ".join(["---"] * 2 + ["---:"] * (len(header) - 2)) + " |\n")
            for row in table[1:]:
                f.write("| " + " | ".join(c.replace("|", "\\|") for c in row) + " |\n")
    if a.csv:
        keys = ["file", "weights", "pp", "tg", "kiln_pp", "llama_pp", "pp_ratio",
                "kiln_tg", "llama_tg", "tg_ratio", "mb_per_token", "bandwidth",
                "roofline", "kiln_eff", "llama_eff", "runs", "note"]
        with open(a.csv, "w", newline="") as f:
            w = csv.writer(f, lineterminator="\n")
            w.writerow(keys)
            for r in rows:
                w.writerow(["" if r[k] is None else
                            (round(r[k], 4) if isinstance(r[k], float) else r[k])
                            for k in keys])


def main():
    if len(sys.argv) < 2:
        die("usage: peerbench.py info FILE | llama-json FILE | report RAW [...]")
    cmd, rest = sys.argv[1], sys.argv[2:]
    if cmd == "info" and len(rest) == 1:
        cmd_info(rest[0])
    elif cmd == "llama-json" and len(rest) == 1:
        cmd_llama_json(rest[0])
    elif cmd == "report":
        cmd_report(rest)
    else:
        die(f"bad arguments: {' '.join(sys.argv[1:])}")


if __name__ == "__main__":
    main()
