#!/usr/bin/env python3
"""kiln-plan's predictions against measurements on this machine (docs/planning.md).

usage: validate-plan.py [--work DIR] [--reps 5] [--prompt-tokens 256]
                        [--decode-tokens 32] [--markdown FILE] [--plot FILE]

For each configuration (model, TP, PP, SP, weight recipe) it compiles the
artifact with the flags kiln-plan would print, measures the prefill time
of a --prompt-tokens prompt and the time per decoded token with kiln-bench
(one thread per rank, under mpirun when several ranks; the median of
--reps repetitions), asks kiln-plan for its predictions of the same recipe
on `--gpu cpu --gpus RANKS`, and reports both with the ratio
predicted / measured. It also reports whether the recipe kiln-plan ranks
first for each model and rank count is the measured fastest. --plot writes
predicted vs measured (log-log, matplotlib).
"""
import argparse
import os
import re
import statistics
import subprocess
import sys

sys.dont_write_bytecode = True  # keep scripts/ free of __pycache__
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ranks import MPIRUN, launch_env  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.join(os.path.dirname(ROOT), "shared", "models")
SMOL = os.path.join(SHARED, "smollm2-135m-instruct",
                    "SmolLM2-135M-Instruct.Q4_1.gguf")

# (label, model, tp, pp, sp, weights): weights as kiln-plan names them.
# The first is the calibration run (kiln-plan's `cpu` device takes its f32
# bandwidth and FLOP rate from it); the others are held out.
CONFIGS = [
    ("llama-110m", "synthetic:llama-110m", 1, 1, False, "f32"),
    ("llama-110m", "synthetic:llama-110m", 2, 1, False, "f32"),
    ("llama-110m", "synthetic:llama-110m", 2, 1, True, "f32"),
    ("llama-110m", "synthetic:llama-110m", 1, 2, False, "f32"),
    ("llama-110m", "synthetic:llama-110m", 1, 1, False, "w8a16"),
    ("llama-110m", "synthetic:llama-110m", 2, 1, False, "w8a16"),
    ("llama-110m", "synthetic:llama-110m", 1, 2, False, "w8a16"),
    ("llama-110m", "synthetic:llama-110m", 1, 1, False, "w4a16"),
    ("llama-110m", "synthetic:llama-110m", 2, 1, False, "w4a16"),
    ("smollm2-q4_1", SMOL, 1, 1, False, "as-stored"),
    ("smollm2-q4_1", SMOL, 1, 2, False, "as-stored"),
]


def compile_flags(tp, pp, sp, weights):
    flags = []
    if weights == "w8a16":
        flags.append("--quant=w8a16")
    elif weights == "w4a16":
        flags.append("--quant=w4a16-rtn")
    if tp > 1:
        flags += ["--tp", str(tp)]
    if pp > 1:
        flags += ["--pp", str(pp)]
    if sp:
        flags.append("--sp")
    return flags


def recipe_name(tp, pp, sp, weights, kv="f32"):
    return "tp=%d pp=%d%s %s kv=%s" % (tp, pp, " sp" if sp else "", weights, kv)


def measure(bin_dir, art, ranks, prompt, decode, reps):
    cmd = [os.path.join(bin_dir, "kiln-bench"), art, "--no-verify",
           "--threads", "1", "--prompt-tokens", str(prompt),
           "--decode-tokens", str(decode), "--repeat", str(reps)]
    if ranks > 1:
        cmd = MPIRUN + ["-np", str(ranks)] + cmd
    out = subprocess.run(cmd, env=launch_env(), capture_output=True,
                         text=True, timeout=1800)
    if out.returncode != 0:
        raise RuntimeError("%s failed:\n%s" % (" ".join(cmd), out.stderr[-2000:]))
    pre = re.search(r"^prefill: ([0-9.]+) tokens/s", out.stdout, re.M)
    dec = re.search(r"^decode: ([0-9.]+) tokens/s", out.stdout, re.M)
    if not pre or not dec:
        raise RuntimeError("no prefill/decode line in:\n" + out.stdout)
    return prompt / float(pre.group(1)), 1.0 / float(dec.group(1))


def predict(bin_dir, model, ranks, prompt, decode):
    """kiln-plan's rows for `ranks` CPU ranks: {recipe: (ttft, tpot)} in
    rank order."""
    cmd = [os.path.join(bin_dir, "kiln-plan"), model, "--gpu", "cpu",
           "--gpus", str(ranks), "--concurrency", "1",
           "--context", str(prompt + decode), "--prompt-tokens", str(prompt),
           "--top", "1000"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(out.stderr)
    rows = {}
    for line in out.stdout.splitlines():
        m = re.match(r"^\d+\s+(tp=\d+ pp=\d+(?: sp)?)\s+(\S+) (kv=\S+)\s+"
                     r"([0-9.]+)\s+([0-9.]+)\s", line)
        if m:
            name = "%s %s %s" % (m.group(1), m.group(2), m.group(3))
            rows.setdefault(name, (float(m.group(4)) / 1e3,
                                   float(m.group(5)) / 1e3))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", default="/tmp/kiln-validate-plan")
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--prompt-tokens", type=int, default=256)
    ap.add_argument("--decode-tokens", type=int, default=32)
    ap.add_argument("--markdown")
    ap.add_argument("--plot")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    results = []
    for index, (label, model, tp, pp, sp, weights) in enumerate(CONFIGS):
        art = os.path.join(args.work, "%s-%s.art" % (
            re.sub(r"[^a-z0-9]+", "-", label.lower()),
            recipe_name(tp, pp, sp, weights).replace(" ", "_").replace("=", "")))
        if not os.path.isdir(art):
            subprocess.run([os.path.join(args.bin, "kiln-compile"), model,
                            "--max-prefill-tokens", str(args.prompt_tokens),
                            "-o", art] + compile_flags(tp, pp, sp, weights),
                           check=True, capture_output=True)
        ttft, tpot = measure(args.bin, art, tp * pp, args.prompt_tokens,
                             args.decode_tokens, args.reps)
        rows = predict(args.bin, model, tp * pp, args.prompt_tokens,
                       args.decode_tokens)
        name = recipe_name(tp, pp, sp, weights)
        if name not in rows:
            raise RuntimeError("kiln-plan has no row '%s' for %s" % (name, model))
        pt, pp_ = rows[name]
        first = next(iter(rows))
        results.append(dict(label=label, model=model, ranks=tp * pp,
                            recipe=name, ttft=ttft, tpot=tpot, pttft=pt,
                            ptpot=pp_, first=first, weights=weights,
                            held_out=index > 0))
        print("%-14s %-26s TTFT %7.1f ms (pred %7.1f, %.2fx)  TPOT %6.2f ms "
              "(pred %6.2f, %.2fx)" % (label, name, ttft * 1e3, pt * 1e3,
                                        pt / ttft, tpot * 1e3, pp_ * 1e3,
                                        pp_ / tpot), flush=True)
    lines = ["| model | recipe | ranks | held out | prefill measured (ms) | "
             "predicted | ratio | TPOT measured (ms) | predicted | ratio |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    within = held = 0
    for r in results:
        a, b = r["pttft"] / r["ttft"], r["ptpot"] / r["tpot"]
        if r["held_out"]:
            held += 2
            within += (0.75 <= a <= 1.25) + (0.75 <= b <= 1.25)
        lines.append("| %s | %s | %d | %s | %.1f | %.1f | %.2f | %.2f | %.2f | "
                     "%.2f |" % (r["label"], r["recipe"], r["ranks"],
                                 "yes" if r["held_out"] else "calibration",
                                 r["ttft"] * 1e3, r["pttft"] * 1e3, a,
                                 r["tpot"] * 1e3, r["ptpot"] * 1e3, b))
    lines.append("")
    lines.append("Held-out predictions within ±25%%: %d of %d." % (within, held))
    # kiln-plan's first choice among the measured recipes of one model,
    # rank count and weight format (its order: precision first, then
    # TPOT) against the measured fastest.
    groups = {}
    for r in results:
        groups.setdefault((r["label"], r["ranks"], r["weights"]), []).append(r)
    for (label, ranks, weights), rs in sorted(groups.items()):
        if len(rs) < 2:
            continue
        for key, what in (("tpot", "TPOT"), ("ttft", "prefill")):
            fastest = min(rs, key=lambda r: r[key])
            pred_best = min(rs, key=lambda r: r["p" + key])
            if fastest is pred_best:
                verdict = "agree"
            else:
                gap = pred_best[key] / fastest[key] - 1
                verdict = ("the first-ranked measured %.1f%% slower than the "
                           "fastest%s" % (100 * gap,
                                          " (within the VM's run-to-run noise)"
                                          if gap < 0.15 else ""))
            lines.append("%s, %s on %d ranks, %s: predicted fastest %s, "
                         "measured fastest %s: %s." % (
                             label, weights, ranks, what, pred_best["recipe"],
                             fastest["recipe"], verdict))
    text = "\n".join(lines)
    print(text)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text + "\n")
    if args.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(5.5, 5))
        for key, marker, lab in (("ttft", "o", "prefill"), ("tpot", "s", "TPOT")):
            xs = [r[key] * 1e3 for r in results]
            ys = [r["p" + key] * 1e3 for r in results]
            ax.scatter(xs, ys, marker=marker, label=lab)
        lo = min(min(r["tpot"], r["ptpot"]) for r in results) * 1e3 / 1.5
        hi = max(max(r["ttft"], r["pttft"]) for r in results) * 1e3 * 1.5
        ax.plot([lo, hi], [lo, hi], "k-", lw=0.8)
        ax.plot([lo, hi], [lo * 1.25, hi * 1.25], "k:", lw=0.6)
        ax.plot([lo, hi], [lo * 0.75, hi * 0.75], "k:", lw=0.6)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("measured (ms)")
        ax.set_ylabel("kiln-plan predicted (ms)")
        ax.set_title("kiln-plan on this machine's CPU ranks")
        ax.legend()
        fig.tight_layout()
        fig.savefig(args.plot, dpi=120)
    return 0


if __name__ == "__main__":
    sys.exit(main())
