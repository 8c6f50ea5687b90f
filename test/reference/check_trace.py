#!/usr/bin/env python3
"""Checks a Kiln --trace file (Chrome trace-event JSON) against its plan.

usage: check_trace.py TRACE.json PLAN.mlir [--expect-spans a,b,...]
                      [--prompt-chunks K]

Schema (the Trace Event Format's JSON object form): "traceEvents" is a list;
every event has name, ph, pid, tid; complete events ("X") have numeric
ts >= 0 and dur >= 0 and a cat of kernel / step / tool; kernel events carry
args.kind, args.loc, args.bytes, args.flops (integers >= 0); every thread
that has events has a thread_name metadata event (one lane per thread).

Against the plan (kiln-compile --emit=plan): the kernel events recorded
inside each step event are, in order, the plan.call_kernel callees of the
entry point that ran (plan.call_fused kernels, kiln_fused_*, by their
symbol; decode for "decode" steps; prefill, repeated once per
chunk, for "prefill" steps); each kernel event lies within its step's time
span; the IR location of every layer op names its layer; the bytes of every
f32 `linear` kernel event equal an independent count: its weight matrix
(from the plan's plan.weight_ref type) plus its input and output rows.
Prints "trace: OK" and a summary, or the first mismatch and exits 1.
"""
import json
import re
import sys


def fail(msg):
    print("check_trace: " + msg)
    sys.exit(1)


def plan_calls(plan_text):
    """entry point -> list of (callee, weight memref type or None)."""
    funcs = {}
    current = None
    weights = {}
    for line in plan_text.splitlines():
        m = re.match(r"\s*func\.func @(\w+)\(", line)
        if m:
            current = m.group(1)
            funcs[current] = []
            weights = {}
            continue
        m = re.match(r"\s*(%\w+) = plan\.weight_ref @([\w.]+) : memref<([^>]*)>",
                     line)
        if m:
            weights[m.group(1)] = (m.group(2), m.group(3))
            continue
        m = re.match(r'\s*plan\.call_kernel "(\w+)"\(([^)]*)\)', line) or \
            re.match(r'\s*plan\.call_fused @(\w+)\(([^)]*)\)', line)
        if m and current:
            args = [a.strip() for a in m.group(2).split(",")]
            w = next((weights[a] for a in args if a in weights), None)
            funcs[current].append((m.group(1), w))
    return funcs


def memref_bytes(shape):
    dims, elem = shape.rsplit("x", 1)
    n = 1
    for d in dims.split("x"):
        n *= int(d)
    return n * {"f32": 4, "f16": 2, "bf16": 2, "i8": 1}[elem]


def main():
    if len(sys.argv) < 3:
        fail("usage: check_trace.py TRACE.json PLAN.mlir [--expect-spans a,b]")
    trace_path, plan_path = sys.argv[1], sys.argv[2]
    spans = []
    if "--expect-spans" in sys.argv:
        spans = sys.argv[sys.argv.index("--expect-spans") + 1].split(",")
    with open(trace_path) as f:
        doc = json.load(f)
    events = doc.get("traceEvents")
    if not isinstance(events, list) or not events:
        fail("traceEvents is missing or empty")
    lanes, complete = set(), []
    for e in events:
        for key in ("name", "ph", "pid", "tid"):
            if key not in e:
                fail("event without %s: %r" % (key, e))
        if e["ph"] == "M":
            if e["name"] == "thread_name":
                lanes.add(e["tid"])
            continue
        if e["ph"] != "X":
            fail("unexpected phase %r" % e["ph"])
        if not isinstance(e.get("ts"), (int, float)) or e["ts"] < 0:
            fail("bad ts in %r" % e)
        if not isinstance(e.get("dur"), (int, float)) or e["dur"] < 0:
            fail("bad dur in %r" % e)
        if e.get("cat") not in ("kernel", "step", "tool"):
            fail("bad cat in %r" % e)
        if e["cat"] == "kernel":
            a = e.get("args", {})
            for key in ("kind", "loc"):
                if not isinstance(a.get(key), str) or not a[key]:
                    fail("kernel event without args.%s: %r" % (key, e))
            for key in ("bytes", "flops"):
                if not isinstance(a.get(key), int) or a[key] < 0:
                    fail("kernel event without integer args.%s: %r" % (key, e))
        complete.append(e)
    for e in complete:
        if e["tid"] not in lanes:
            fail("thread %r has events but no thread_name" % e["tid"])
    names = {e["name"] for e in complete}
    for s in spans:
        if s not in names:
            fail("no %r span" % s)

    with open(plan_path) as f:
        funcs = plan_calls(f.read())
    if "prefill" not in funcs or "decode" not in funcs:
        fail("the plan has no prefill/decode entry points")

    # Kernel events are recorded before the step that ran them.
    pending, steps, checked_bytes, layer_locs = [], 0, 0, 0
    for e in complete:
        if e["cat"] == "kernel":
            pending.append(e)
            continue
        if e["cat"] != "step":
            continue
        steps += 1
        calls = funcs[e["name"]]
        if len(pending) % len(calls):
            fail("%s step at ts %.3f ran %d kernels, not a multiple of the "
                 "plan's %d" % (e["name"], e["ts"], len(pending), len(calls)))
        for i, k in enumerate(pending):
            callee, weight = calls[i % len(calls)]
            base = re.sub(r"_(f16|bf16)(_f32)?$", "", k["name"])
            if base != callee:
                fail("%s step: kernel %d is %s, the plan calls %s" %
                     (e["name"], i, k["name"], callee))
            eps = 0.01  # microsecond rounding of ts and dur
            if k["ts"] + eps < e["ts"] or \
                    k["ts"] + k["dur"] > e["ts"] + e["dur"] + eps:
                fail("kernel %s at %.3f is outside its %s step" %
                     (k["name"], k["ts"], e["name"]))
            loc = k["args"]["loc"]
            m = re.match(r"layers\.(\d+)\.", loc)
            if m:
                layer_locs += 1
            if weight and k["args"]["kind"] == "linear" and \
                    weight[1].endswith("xf32"):
                rows, cols = [int(d) for d in weight[1][:-4].split("x")]
                if loc != weight[0]:
                    fail("linear over %s has loc %s" % (weight[0], loc))
                n = k["args"]["tokens"]
                want = memref_bytes(weight[1]) + n * 4 * (rows + cols)
                if k["args"]["bytes"] != want:
                    fail("linear %s: %d bytes in the trace, %d counted" %
                         (loc, k["args"]["bytes"], want))
                if k["args"]["flops"] != 2 * n * rows * cols:
                    fail("linear %s: %d FLOPs in the trace, %d counted" %
                         (loc, k["args"]["flops"], 2 * n * rows * cols))
                checked_bytes += 1
        pending = []
    if steps == 0:
        fail("no step events")
    if pending:
        fail("%d kernel events after the last step" % len(pending))
    if layer_locs == 0:
        fail("no kernel event has a layers.N location")
    kernels = sum(1 for e in complete if e["cat"] == "kernel")
    print("trace: OK (%d steps, %d kernel events, %d lanes, %d linear byte "
          "counts checked)" % (steps, kernels, len(lanes), checked_bytes))


if __name__ == "__main__":
    main()
