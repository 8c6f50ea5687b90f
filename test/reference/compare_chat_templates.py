#!/usr/bin/env python3
"""Compares Kiln's chat-template renderer with python3-jinja2 (test/Chat).

  compare_chat_templates.py KILN_CHAT_RENDER TEMPLATE_DIR_OR_FILE... -- CONTEXT_DIR
  compare_chat_templates.py KILN_CHAT_RENDER --reference TEMPLATE REFERENCE_JSON

First form: renders every *.jinja template with every *.json context through
kiln-chat-render and through render_chat_template.py (jinja2 as transformers
configures it) and requires the same bytes, or an error from both (a
raise_exception() call: Kiln's message must say "template raised: " and the
same text). Prints one line per pair and a summary; exits 1 on a mismatch,
with the first differing byte and both texts around it.

Second form: renders TEMPLATE for every chat case of a model's
reference_outputs.json (one user turn, add_generation_prompt) and requires
Kiln's text to equal the case's "rendered_prompt" (what transformers'
apply_chat_template produced).
"""
import glob
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    return p.returncode, p.stdout, p.stderr.decode("utf-8", "replace")


def expand(paths, ext):
    out = []
    for p in paths:
        out += sorted(glob.glob(os.path.join(p, "*" + ext))) if os.path.isdir(p) else [p]
    return out


def show_difference(a, b):
    i = next((k for k in range(min(len(a), len(b))) if a[k] != b[k]), min(len(a), len(b)))
    return "first difference at byte %d:\n  jinja2: %r\n  kiln:   %r" % (
        i, a[max(0, i - 40):i + 40], b[max(0, i - 40):i + 40])


def compare(kiln, templates, contexts):
    checked = errors = bad = 0
    for t in templates:
        for c in contexts:
            name = "%s %s" % (os.path.basename(t), os.path.basename(c))
            prc, pout, perr = run([sys.executable, os.path.join(HERE, "render_chat_template.py"), t, c])
            krc, kout, kerr = run([kiln, t, c])
            checked += 1
            if prc == 0 and krc == 0 and pout == kout:
                print("same %s (%d bytes)" % (name, len(kout)))
            elif prc != 0 and krc != 0:
                raised = perr.startswith("error: TemplateError: ")
                message = perr[len("error: TemplateError: "):].strip()
                if raised and "template raised: " + message not in kerr:
                    print("MISMATCH %s: jinja2 raised %r, kiln said %r" % (name, message, kerr))
                    bad += 1
                else:
                    errors += 1
                    print("error in both %s: %s" % (name, kerr.strip()))
            else:
                bad += 1
                print("MISMATCH %s: jinja2 exit %d, kiln exit %d" % (name, prc, krc))
                if prc == 0 and krc == 0:
                    print(show_difference(pout, kout))
                print("jinja2 stderr: " + perr + "kiln stderr: " + kerr)
    print("checked %d renderings: %d equal, %d errors in both, %d mismatches" %
          (checked, checked - errors - bad, errors, bad))
    return 1 if bad else 0


def reference(kiln, template, reference_json):
    with open(reference_json) as f:
        cases = [c for c in json.load(f)["cases"] if c.get("chat")]
    if not cases:
        sys.exit("%s: no chat cases" % reference_json)
    bad = 0
    for case in cases:
        context = {"messages": [{"role": "user", "content": case["prompt"]}],
                   "add_generation_prompt": True}
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump(context, f)
        rc, out, err = run([kiln, template, f.name])
        os.unlink(f.name)
        want = case["rendered_prompt"].encode("utf-8")
        if rc != 0 or out != want:
            bad += 1
            print("MISMATCH %r: %s" % (case["prompt"], err or show_difference(want, out)))
        else:
            print("same as transformers: %r (%d bytes)" % (case["prompt"], len(out)))
    return 1 if bad else 0


if __name__ == "__main__":
    args = sys.argv[1:]
    if len(args) == 4 and args[1] == "--reference":
        sys.exit(reference(args[0], args[2], args[3]))
    if len(args) < 4 or "--" not in args:
        sys.exit(__doc__)
    sep = args.index("--")
    sys.exit(compare(args[0], expand(args[1:sep], ".jinja"), expand(args[sep + 1:], ".json")))
