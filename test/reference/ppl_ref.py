#!/usr/bin/env python3
"""Independent windowed perplexity with the float64 numpy reference.

Recomputes what `kiln-eval ARTIFACT --text FILE --ctx N` reports, from the
token ids kiln-eval evaluated (its hidden `--dump-tokens FILE` hook: one id
per line, no BOS) and the original checkpoint, using llama_ref.py's forward
pass (no Kiln code):

    the ids are split into non-overlapping windows of N tokens (the last one
    may be shorter); for a window w_1..w_m the reference runs BOS, w_1..w_{m-1}
    from an empty KV cache, and token w_i is scored with the log-softmax of
    the logits after BOS, w_1..w_{i-1};
    PPL = exp(-(1/T) * sum of all log p), T = number of scored ids.

With --text FILE --vocab VOCAB (a llama2.c tok*.bin or a GGUF) it also checks
that the ids are a segmentation of FILE: their pieces ("\u2581" -> space,
<0xXX> -> byte) concatenate to a prefix of FILE (after the tokenizer's dummy
leading space), so the ids kiln-eval scored really are the text.

With --kiln-output (kiln-eval's stdout) it parses the `perplexity:` and
`tokens:` lines and checks |kiln - ref| / ref <= --rtol and the token count.

Usage:
  ppl_ref.py --model MODEL --tokens IDS.txt --ctx N [--bos 1]
             [--text FILE --vocab VOCAB] [--kiln-output OUT.txt] [--rtol 1e-3]
"""

import argparse
import math
import os
import re
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_ref  # noqa: E402


CHUNK = 8  # tokens per llama_ref.forward call


def read_ids(path):
    with open(path) as f:
        ids = [int(tok) for tok in f.read().split()]
    if not ids:
        raise SystemExit("ppl_ref: %s holds no token ids" % path)
    return ids


def windowed_nll(model, ids, ctx, bos):
    """Sum of -log p over all ids and the number of windows."""
    vocab = model.cfg["vocab_size"]
    if min(ids) < 0 or max(ids) >= vocab:
        raise SystemExit("ppl_ref: token id outside [0, %d)" % vocab)
    nll = 0.0
    windows = 0
    for begin in range(0, len(ids), ctx):
        window = ids[begin:begin + ctx]
        inputs = [bos] + window[:-1]
        # Causal, so feeding the inputs through the KV cache in small chunks
        # gives the same logits as one prefill, and is faster in numpy.
        cache = llama_ref.KVCache(model)
        logits = np.concatenate([llama_ref.forward(model, inputs[i:i + CHUNK], cache)
                                 for i in range(0, len(inputs), CHUNK)])
        m = logits.max(axis=-1, keepdims=True)
        logz = m[:, 0] + np.log(np.exp(logits - m).sum(axis=-1))
        lp = logits[np.arange(len(window)), window] - logz
        nll -= float(lp.sum())
        windows += 1
    return nll, windows


def check_segmentation(ids, text_path, vocab_path):
    """True if the ids' pieces spell a prefix of the text (bytes)."""
    with open(vocab_path, "rb") as f:
        is_gguf = f.read(4) == b"GGUF"
    pieces = (llama_ref.gguf_vocab(vocab_path) if is_gguf
              else llama_ref.llama2c_vocab(vocab_path))
    out = bytearray()
    for t in ids:
        p = pieces[t]
        mm = re.fullmatch(rb"<0x([0-9A-Fa-f]{2})>", p)
        out += bytes([int(mm.group(1), 16)]) if mm else p.replace(
            "\u2581".encode("utf-8"), b" ")
    text = open(text_path, "rb").read()
    return bytes(out) in (text[:len(out)], (b" " + text)[:len(out)]), len(out)


def parse_kiln(path):
    text = open(path).read()
    ppl = re.search(r"^perplexity: ([0-9.eE+-]+|nan|inf)$", text, re.M)
    tok = re.search(r"^tokens: ([0-9]+)$", text, re.M)
    if not ppl or not tok:
        raise SystemExit("ppl_ref: %s has no 'perplexity:'/'tokens:' lines" % path)
    return float(ppl.group(1)), int(tok.group(1))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="checkpoint (.bin, .gguf, HF dir)")
    ap.add_argument("--tokens", required=True, help="ids file from kiln-eval --dump-tokens")
    ap.add_argument("--ctx", type=int, required=True, help="window length")
    ap.add_argument("--bos", type=int, default=1)
    ap.add_argument("--text", help="the text kiln-eval scored (segmentation check)")
    ap.add_argument("--vocab", help="tok*.bin or GGUF with the pieces (with --text)")
    ap.add_argument("--kiln-output", help="kiln-eval stdout to check")
    ap.add_argument("--rtol", type=float, default=1e-3)
    a = ap.parse_args(argv)
    if a.ctx < 1:
        raise SystemExit("ppl_ref: --ctx must be >= 1")

    if bool(a.text) != bool(a.vocab):
        raise SystemExit("ppl_ref: --text and --vocab go together")
    model = llama_ref.load_model(a.model)
    ids = read_ids(a.tokens)
    ok = True
    if a.text:
        seg_ok, nbytes = check_segmentation(ids, a.text, a.vocab)
        print("ppl_ref: the ids spell %s the text (%d bytes)" %
              ("a prefix of" if seg_ok else "SOMETHING OTHER THAN", nbytes))
        ok &= seg_ok
    nll, windows = windowed_nll(model, ids, a.ctx, a.bos)
    ppl = math.exp(nll / len(ids))
    print("ppl_ref: %d tokens, %d windows of %d, nll/token %.6f" %
          (len(ids), windows, a.ctx, nll / len(ids)))
    print("ppl_ref: reference perplexity %.6f" % ppl)
    if not a.kiln_output:
        return 0 if ok else 1
    kppl, ktok = parse_kiln(a.kiln_output)
    rel = abs(kppl - ppl) / ppl
    print("ppl_ref: kiln perplexity %.4f (%d tokens), relative difference %.2e (rtol %g)" %
          (kppl, ktok, rel, a.rtol))
    if ktok != len(ids):
        print("ppl_ref: FAIL: kiln scored %d tokens, the dump holds %d" % (ktok, len(ids)))
        ok = False
    if not rel <= a.rtol:
        print("ppl_ref: FAIL: perplexities differ by more than rtol")
        ok = False
    print("ppl_ref: PASS" if ok else "ppl_ref: FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
