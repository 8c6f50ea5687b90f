#!/usr/bin/env python3
"""Plots a bench-vs-llama-cpp.sh CSV (--csv FILE) as a PNG: per file, Kiln's
decode and prefill throughput as a ratio to llama.cpp's (1.0 = parity, the
issue-11 target line at 1.1), and both tools' decode as a share of the
roofline.

usage: plot_bench.py RESULTS.csv OUT.png [--title TEXT]

Needs matplotlib (PyPI); run by hand, not in CI.
"""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    src, out = sys.argv[1], sys.argv[2]
    title = ""
    if "--title" in sys.argv:
        title = sys.argv[sys.argv.index("--title") + 1]
    with open(src, newline="") as f:
        rows = [r for r in csv.DictReader(f) if r.get("tg_ratio")]
    if not rows:
        sys.exit("plot_bench.py: %s has no result rows" % src)
    # The extra kiln-compile flags of a row (its note) tell apart two rows
    # of the same file.
    names = [r["file"] + ("\n" + r["note"].replace("Kiln ", "")
                          if r.get("note", "").startswith("Kiln --") else "")
             for r in rows]
    x = range(len(rows))
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(11, 8), sharex=True)
    w = 0.38
    ax1.bar([i - w / 2 for i in x], [float(r["tg_ratio"]) for r in rows], w,
            label="decode (tg) Kiln / llama.cpp")
    ax1.bar([i + w / 2 for i in x], [float(r["pp_ratio"]) for r in rows], w,
            label="prefill (pp) Kiln / llama.cpp")
    ax1.axhline(1.0, color="black", linewidth=0.8)
    ax1.axhline(1.1, color="red", linestyle="--", linewidth=0.8,
                label="issue 11 target 1.1x")
    ax1.set_ylabel("throughput ratio")
    ax1.set_yscale("log")
    ax1.legend(fontsize=8)
    ax2.bar([i - w / 2 for i in x], [100 * float(r["kiln_eff"]) for r in rows],
            w, label="Kiln decode % of roofline")
    ax2.bar([i + w / 2 for i in x], [100 * float(r["llama_eff"]) for r in rows],
            w, label="llama.cpp decode % of roofline")
    ax2.axhline(85, color="red", linestyle="--", linewidth=0.8,
                label="issue 11 target 85%")
    ax2.set_ylabel("% of roofline")
    ax2.set_xticks(list(x))
    ax2.set_xticklabels(names, rotation=30, ha="right", fontsize=8)
    ax2.legend(fontsize=8)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=90)
    print("plot_bench.py: wrote " + out)


if __name__ == "__main__":
    main()
