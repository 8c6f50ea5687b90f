#!/usr/bin/env python3
"""Make the byte-level BPE tokenizer fixtures (offline; CI never runs this).

usage: make_bytelevel_fixtures.py OUTDIR [--shared DIR]

Needs PyPI `tokenizers` (Hugging Face's Rust tokenizers, the reference) and
`gguf`. Trains four tiny byte-level BPE tokenizers (512 ids, so that they fit
stories260K's vocab_size) on the shared WikiText and TinyStories excerpts,
one per pre-tokenizer family, each as Hugging Face writes them:

  llama3  Split(Llama 3 regex, Isolated) + ByteLevel(use_regex=false),
          TemplateProcessing "<|begin_of_text|> $A", ignore_merges, and one
          vocabulary word (" Kiln") no merge produces (ignore_merges emits it)
  qwen2   NFC normalizer, Split(Qwen2 regex, Isolated) +
          ByteLevel(use_regex=false), ByteLevel post-processor (no BOS)
  gpt2    ByteLevel(use_regex=true)
  smollm  Digits(individual_digits) + ByteLevel(use_regex=true)

each with special added tokens and one non-special added token ("[[kiln]]").
Writes OUTDIR/<name>/tokenizer.json, OUTDIR/<name>.gguf (the same vocabulary
as GGUF keys with tokenizer.ggml.pre llama-bpe / qwen2 / gpt2 / smollm, via
bytelevel_gguf.py) and OUTDIR/expected.json: for each fixture and each test
string, Hugging Face's ids (add_special_tokens=True), its ids with
encode_special_tokens=True (kiln-run --no-special) and its decode with
skip_special_tokens=True.
"""

import json
import os
import sys

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models
from tokenizers import normalizers, pre_tokenizers, processors, trainers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bytelevel_gguf  # noqa: E402

LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
          r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
         r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

TEXTS = [
    "Hello world",
    "The capital of France is",
    "I'm sure they'll say it's fine; we've seen 'em. HE'S, I'D, You'RE",
    "12345 67 8 3.14159 1234567890123 x1y22z333",
    "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3068\u4e2d\u6587\u3002",
    "emoji \U0001F600\U0001F44D\U0001F3FD ok \u2764\ufe0f",
    "  two leading spaces",
    "trailing spaces   ",
    "tabs\tand\nnewlines\n\n\nx",
    "windows\r\nline\r\n\r\n end",
    "         ",
    "\n",
    "x=1+2; y==3 && z!=4 ... ??? (!!) [ok] {a: 'b'}",
    "<|begin_of_text|>Hi there<|eot_id|>",
    "a<|eot_id|>b [[kiln]] c<|end_of_text|>",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "<|eot_id",
    " Kiln Kiln kiln Kilns",
    "\u00c0\u00c9\u00ce\u00f5\u00fc \u00f1 na\u00efve caf\u00e9 \u0130stanbul",
    "\u00a0non-breaking\u2003em\u3000ideographic spaces",
    "Once upon a time, there was a little girl named Lily.",
    "",
]
# Evaluated but not trained on (the trained vocabularies stay as they were):
# decomposed accents and a compatibility sign NFC changes (Qwen2).
EVAL_ONLY = [
    "cafe\u0301 e\u0301le\u0300ve \u212b \u1e9b\u0323",
    "story one<|endoftext|>story two",
]

SPECIALS = {
    "llama3": ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"],
    "qwen2": ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
    "gpt2": ["<|endoftext|>", "<|eot_id|>"],
    "smollm": ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
}
GGUF_PRE = {"llama3": "llama-bpe", "qwen2": "qwen2", "gpt2": "gpt2", "smollm": "smollm"}
VOCAB = 512


def train(name, corpus):
    tok = Tokenizer(models.BPE())
    bl = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    if name == "llama3":
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Split(Regex(LLAMA3), behavior="isolated"), bl])
    elif name == "qwen2":
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Split(Regex(QWEN2), behavior="isolated"), bl])
    elif name == "gpt2":
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    else:
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=True),
             pre_tokenizers.ByteLevel(add_prefix_space=False)])
    if name == "qwen2":
        tok.normalizer = normalizers.NFC()
    tok.decoder = decoders.ByteLevel()
    specials = SPECIALS[name]
    extra = 2 if name == "llama3" else 1  # [[kiln]] (+ " Kiln")
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB - extra, special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(corpus, trainer)
    assert tok.get_vocab_size() == VOCAB - extra, tok.get_vocab_size()
    doc = json.loads(tok.to_str())
    if name == "llama3":
        # A word no merge makes: with ignore_merges it is one token.
        assert "\u0120Kiln" not in doc["model"]["vocab"]
        doc["model"]["vocab"]["\u0120Kiln"] = VOCAB - 2
        doc["model"]["ignore_merges"] = True
        doc["post_processor"] = {
            "type": "Sequence", "processors": [
                {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False,
                 "use_regex": True},
                {"type": "TemplateProcessing",
                 "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                            {"Sequence": {"id": "A", "type_id": 0}}],
                 "pair": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                          {"Sequence": {"id": "A", "type_id": 0}},
                          {"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 1}},
                          {"Sequence": {"id": "B", "type_id": 1}}],
                 "special_tokens": {"<|begin_of_text|>": {
                     "id": "<|begin_of_text|>", "ids": [0],
                     "tokens": ["<|begin_of_text|>"]}}}]}
    elif name == "smollm":
        # As SmolLM2's: the unknown token is a special added token (still
        # matched in text).
        doc["model"]["unk_token"] = "<|endoftext|>"
    elif name == "qwen2":
        doc["post_processor"] = {"type": "ByteLevel", "add_prefix_space": False,
                                 "trim_offsets": False, "use_regex": False}
    tok = Tokenizer.from_str(json.dumps(doc))
    tok.add_tokens([AddedToken("[[kiln]]", special=False, normalized=False)])
    assert tok.get_vocab_size() == VOCAB, tok.get_vocab_size()
    return tok


def main(argv):
    out = argv[1]
    shared = argv[argv.index("--shared") + 1] if "--shared" in argv else os.path.join(
        os.path.dirname(__file__), "..", "..", "..", "shared")
    data = os.path.join(shared, "data")
    corpus = []
    for f in ("wiki.test.raw.406", "tinystories_sample.txt"):
        corpus += open(os.path.join(data, f), encoding="utf-8").read().splitlines(True)
    corpus += TEXTS
    strings = TEXTS + EVAL_ONLY
    expected = {"strings": strings, "fixtures": {}}
    for name in ("llama3", "qwen2", "gpt2", "smollm"):
        tok = train(name, corpus)
        d = os.path.join(out, name)
        os.makedirs(d, exist_ok=True)
        tok.save(os.path.join(d, "tokenizer.json"))
        bytelevel_gguf.convert(os.path.join(d, "tokenizer.json"), GGUF_PRE[name],
                               os.path.join(out, name + ".gguf"))
        cases = []
        for text in strings:
            tok.encode_special_tokens = False
            ids = tok.encode(text, add_special_tokens=True).ids
            tok.encode_special_tokens = True
            plain = tok.encode(text, add_special_tokens=True).ids
            tok.encode_special_tokens = False
            cases.append({"ids": ids, "ids_no_special": plain,
                          "decoded": tok.decode(ids, skip_special_tokens=True)})
        expected["fixtures"][name] = {"gguf_pre": GGUF_PRE[name], "cases": cases}
    with open(os.path.join(out, "expected.json"), "w", encoding="utf-8") as f:
        json.dump(expected, f, ensure_ascii=True, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main(sys.argv)
