#!/usr/bin/env python3
"""Builds the tiny random-weight Llama-family checkpoints of the architecture
tests (test/Integration/arch-*.test) with Hugging Face `transformers`, and
their expected logits computed by transformers in float32.

Run offline, once (needs torch + transformers + gguf from PyPI; CI only reads
the committed results):

    python3 test/reference/make_arch_fixtures.py test/Integration/Inputs/arch

Writes, under OUT:
  llama/      config.json (transformers 5.x, rope_parameters llama3) +
              model.safetensors (BF16), shared by every Llama RoPE variant
  configs/    the other config.json variants for llama/ (4.x-style llama3,
              linear, dynamic, plain) and the bad-input configs
  qwen2/      Qwen2ForCausalLM: q/k/v biases
  mistral/    MistralForCausalLM: sliding_window 8
  *.gguf      llama3 (rope_freqs.weight), qwen2 (biases), mistral
              (llama.attention.sliding_window), same weights (F16/F32)
  expected/   <variant>.npz: `rows` (positions) and `logits` [rows, vocab]
              float32 for the token list TOKENS below, in the call pattern of
              `kiln-run --dump-logits` (prefill k = (n + 1) / 2 tokens, then
              one token per step; rows k-1 .. n-1, every STRIDE-th kept)
and runtime/tests/RopeScalingTables.inc: transformers' inverse-frequency
tables (C++ arrays) for runtime/tests/RopeScalingTest.cpp.

Weights are rounded to values exact in both bfloat16 and float16 (tiny
magnitudes flushed to 0), so the BF16 safetensors, the F16 GGUF tensors and
transformers' float32 model hold the same numbers. Sizes are tiny (hidden 32,
2 layers, vocab 512: the stories260K tokenizer, tok512.bin, is passed with
--tokenizer).
"""
import json
import math
import os
import shutil
import sys

import numpy as np
import torch
import transformers
from safetensors.torch import save_file

VOCAB = 512
HIDDEN = 32
HEADS = 2
KV_HEADS = 1
HEAD_DIM = HIDDEN // HEADS
INTER = 48
LAYERS = 2
STRIDE = 4
# 48 tokens: with --dump-logits, prefill 24, then decode positions 24..47
# (past original_max_position_embeddings = 32 of the llama3/dynamic configs).
TOKENS = [int(t) for t in np.random.RandomState(7).randint(3, VOCAB, size=48)]
# Mistral: 24 tokens, window 8: prefill 12 (crossing the window edge), decode
# 12..23.
MISTRAL_TOKENS = TOKENS[:24]
WINDOW = 8


def round_weights(model):
    with torch.no_grad():
        for p in model.parameters():
            x = p.data.float()
            x[x.abs() < 1e-4] = 0.0
            p.data.copy_(x.to(torch.bfloat16).float())


def base_kwargs():
    return dict(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=INTER,
                num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                num_key_value_heads=KV_HEADS, rms_norm_eps=1e-5,
                tie_word_embeddings=True, bos_token_id=1, eos_token_id=2,
                initializer_range=0.15)


def reference_logits(model, tokens, incremental):
    """Logits rows k-1 .. n-1 as kiln-run --dump-logits computes them."""
    n = len(tokens)
    k = (n + 1) // 2
    ids = torch.tensor([tokens])
    with torch.no_grad():
        if not incremental:
            out = model(ids).logits[0]
            return out[k - 1:].float().numpy()
        rows = []
        out = model(ids[:, :k], use_cache=True)
        rows.append(out.logits[0, -1])
        past = out.past_key_values
        for i in range(k, n):
            out = model(ids[:, i:i + 1], past_key_values=past, use_cache=True,
                        position_ids=torch.tensor([[i]]))
            past = out.past_key_values
            rows.append(out.logits[0, -1])
        return torch.stack(rows).float().numpy()


def save_expected(out, name, logits, tokens):
    n = len(tokens)
    k = (n + 1) // 2
    keep = list(range(0, logits.shape[0], STRIDE))
    if keep[-1] != logits.shape[0] - 1:
        keep.append(logits.shape[0] - 1)
    np.savez(os.path.join(out, "expected", name + ".npz"),
             rows=np.array(keep, dtype=np.int32),
             positions=np.array([k - 1 + r for r in keep], dtype=np.int32),
             logits=logits[keep].astype(np.float32))


def save_hf(model, d):
    os.makedirs(d, exist_ok=True)
    model.config.save_pretrained(d)
    state = {k: v.to(torch.bfloat16).contiguous()
             for k, v in model.state_dict().items() if k != "lm_head.weight"}
    save_file(state, os.path.join(d, "model.safetensors"),
              metadata={"format": "pt"})


def permute_adjacent(w, heads):
    """HF rotate-half rows -> adjacent pairs (convert_hf_to_gguf permute)."""
    shape = w.shape
    return (w.reshape(heads, 2, shape[0] // heads // 2, *shape[1:])
            .swapaxes(1, 2).reshape(shape))


def llama3_rope_factors(theta, dim, factor, low, high, old_ctx):
    """convert_hf_to_gguf's rope_freqs for rope_type llama3."""
    freqs = 1.0 / (theta ** (np.arange(0, dim, 2, dtype=np.float32) / dim))
    lw, hw = old_ctx / low, old_ctx / high
    out = []
    for f in freqs:
        wl = 2 * math.pi / f
        if wl < hw:
            out.append(1.0)
        elif wl > lw:
            out.append(factor)
        else:
            s = (old_ctx / wl - low) / (high - low)
            out.append(1.0 / ((1 - s) / factor + s))
    return np.array(out, dtype=np.float32)


def save_gguf(model, path, arch, permute, extra_keys, rope_freqs=None):
    import gguf
    sd = {k: v.float().numpy() for k, v in model.state_dict().items()}
    w = gguf.GGUFWriter(path, arch)
    w.add_name(os.path.basename(path))
    w.add_context_length(model.config.max_position_embeddings)
    w.add_embedding_length(HIDDEN)
    w.add_block_count(LAYERS)
    w.add_feed_forward_length(INTER)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_layer_norm_rms_eps(1e-5)
    theta = model.config.rope_parameters["rope_theta"]
    w.add_rope_freq_base(theta)
    w.add_vocab_size(VOCAB)
    for fn, v in extra_keys:
        getattr(w, fn)(v)

    def mat(name, a):
        w.add_tensor(name, a.astype(np.float16))

    def vec(name, a):
        w.add_tensor(name, a.astype(np.float32))

    mat("token_embd.weight", sd["model.embed_tokens.weight"])
    if rope_freqs is not None:
        vec("rope_freqs.weight", rope_freqs)
    for i in range(LAYERS):
        p = "model.layers.%d." % i
        q = sd[p + "self_attn.q_proj.weight"]
        k = sd[p + "self_attn.k_proj.weight"]
        if permute:
            q, k = permute_adjacent(q, HEADS), permute_adjacent(k, KV_HEADS)
        vec("blk.%d.attn_norm.weight" % i, sd[p + "input_layernorm.weight"])
        mat("blk.%d.attn_q.weight" % i, q)
        mat("blk.%d.attn_k.weight" % i, k)
        mat("blk.%d.attn_v.weight" % i, sd[p + "self_attn.v_proj.weight"])
        for b in ("q", "k", "v"):
            key = p + "self_attn.%s_proj.bias" % b
            if key in sd:
                vec("blk.%d.attn_%s.bias" % (i, b), sd[key])
        mat("blk.%d.attn_output.weight" % i, sd[p + "self_attn.o_proj.weight"])
        vec("blk.%d.ffn_norm.weight" % i,
            sd[p + "post_attention_layernorm.weight"])
        mat("blk.%d.ffn_gate.weight" % i, sd[p + "mlp.gate_proj.weight"])
        mat("blk.%d.ffn_down.weight" % i, sd[p + "mlp.down_proj.weight"])
        mat("blk.%d.ffn_up.weight" % i, sd[p + "mlp.up_proj.weight"])
    vec("output_norm.weight", sd["model.norm.weight"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_config(path, cfg):
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")


def rope_tables(out):
    """transformers' own inverse-frequency tables, as C++ arrays."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    lines = ["// Generated by test/reference/make_arch_fixtures.py from "
             "transformers %s." % transformers.__version__,
             "// Do not edit."]
    cases = [
        # name, rope_parameters, max_position_embeddings, seq_len
        ("kLlama31_8B", dict(rope_type="llama3", rope_theta=500000.0,
                             factor=8.0, low_freq_factor=1.0,
                             high_freq_factor=4.0,
                             original_max_position_embeddings=8192),
         131072, None, 128),
        ("kLlama3Tiny", dict(rope_type="llama3", rope_theta=10000.0,
                             factor=4.0, low_freq_factor=1.0,
                             high_freq_factor=4.0,
                             original_max_position_embeddings=32),
         128, None, HEAD_DIM),
        ("kLinear", dict(rope_type="linear", rope_theta=10000.0, factor=2.0),
         32, None, HEAD_DIM),
        ("kDynamic48", dict(rope_type="dynamic", rope_theta=10000.0,
                            factor=2.0), 32, 48, HEAD_DIM),
    ]
    for name, params, maxpos, seq_len, hd in cases:
        cfg = transformers.LlamaConfig(hidden_size=hd * 2,
                                       num_attention_heads=2,
                                       max_position_embeddings=maxpos,
                                       rope_parameters=params)
        fn = ROPE_INIT_FUNCTIONS[params["rope_type"]]
        inv, _ = fn(cfg, "cpu", seq_len) if seq_len else fn(cfg, "cpu")
        vals = ", ".join("%.9ef" % v for v in inv.float().numpy())
        lines.append("static const float %s[%d] = {%s};" % (name, len(inv), vals))
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                        "runtime", "tests", "RopeScalingTables.inc")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def main():
    out = sys.argv[1]
    if os.path.isdir(out):
        shutil.rmtree(out)
    for d in ("configs", "expected"):
        os.makedirs(os.path.join(out, d))
    torch.manual_seed(0)

    # Llama with llama3 RoPE scaling (transformers 5.x config).
    llama3 = dict(rope_type="llama3", rope_theta=10000.0, factor=4.0,
                  low_freq_factor=1.0, high_freq_factor=4.0,
                  original_max_position_embeddings=32)
    cfg = transformers.LlamaConfig(max_position_embeddings=128,
                                   rope_parameters=dict(llama3), **base_kwargs())
    model = transformers.LlamaForCausalLM(cfg).eval()
    round_weights(model)
    save_hf(model, os.path.join(out, "llama"))
    save_expected(out, "llama3", reference_logits(model, TOKENS, False), TOKENS)
    factors = llama3_rope_factors(10000.0, HEAD_DIM, 4.0, 1.0, 4.0, 32)
    save_gguf(model, os.path.join(out, "llama3.gguf"), "llama", True, [],
              rope_freqs=factors)
    base_cfg = json.load(open(os.path.join(out, "llama", "config.json")))
    state = model.state_dict()

    def variant(name, rope_parameters, maxpos, incremental):
        c = transformers.LlamaConfig(max_position_embeddings=maxpos,
                                     rope_parameters=rope_parameters,
                                     **base_kwargs())
        m = transformers.LlamaForCausalLM(c).eval()
        m.load_state_dict(state)
        save_expected(out, name, reference_logits(m, TOKENS, incremental),
                      TOKENS)
        j = dict(base_cfg)
        j["max_position_embeddings"] = maxpos
        j["rope_parameters"] = rope_parameters
        return j

    write_config(os.path.join(out, "configs", "linear.json"),
                 variant("linear", dict(rope_type="linear", rope_theta=10000.0,
                                        factor=2.0), 128, False))
    # Dynamic NTK: theta grows with each call's sequence length past 32, so
    # the reference runs the same prefill-then-decode calls as kiln-run.
    write_config(os.path.join(out, "configs", "dynamic.json"),
                 variant("dynamic", dict(rope_type="dynamic",
                                         rope_theta=10000.0, factor=2.0), 32,
                         True))
    write_config(os.path.join(out, "configs", "plain.json"),
                 variant("plain", dict(rope_type="default",
                                       rope_theta=10000.0), 128, False))
    # transformers 4.x spelling of the llama3 config.
    v4 = dict(base_cfg)
    del v4["rope_parameters"]
    v4["rope_theta"] = 10000.0
    v4["rope_scaling"] = {k: v for k, v in llama3.items() if k != "rope_theta"}
    write_config(os.path.join(out, "configs", "llama3-v4.json"), v4)
    # Bad inputs.
    bad = dict(base_cfg)
    bad["rope_parameters"] = dict(rope_type="yarn", rope_theta=10000.0,
                                  factor=4.0)
    write_config(os.path.join(out, "configs", "bad-yarn.json"), bad)
    bad = dict(base_cfg)
    bad["rope_parameters"] = {k: v for k, v in llama3.items()
                              if k != "low_freq_factor"}
    write_config(os.path.join(out, "configs", "bad-llama3-missing.json"), bad)
    bad = dict(v4)
    bad["rope_scaling"] = {"factor": 2.0}
    write_config(os.path.join(out, "configs", "bad-no-type.json"), bad)
    bad = dict(base_cfg)
    bad["attention_bias"] = True
    write_config(os.path.join(out, "configs", "bad-attention-bias.json"), bad)

    # Qwen2: q/k/v biases.
    qcfg = transformers.Qwen2Config(max_position_embeddings=128,
                                    rope_parameters=dict(rope_type="default",
                                                         rope_theta=10000.0),
                                    use_sliding_window=False, **base_kwargs())
    qmodel = transformers.Qwen2ForCausalLM(qcfg).eval()
    with torch.no_grad():  # biases large enough to matter
        for layer in qmodel.model.layers:
            for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj,
                         layer.self_attn.v_proj):
                proj.bias.normal_(0.0, 0.5)
    round_weights(qmodel)
    save_hf(qmodel, os.path.join(out, "qwen2"))
    save_expected(out, "qwen2", reference_logits(qmodel, TOKENS, False), TOKENS)
    save_gguf(qmodel, os.path.join(out, "qwen2.gguf"), "qwen2", False, [])

    # Mistral: sliding window.
    mcfg = transformers.MistralConfig(max_position_embeddings=128,
                                      sliding_window=WINDOW,
                                      rope_parameters=dict(rope_type="default",
                                                           rope_theta=10000.0),
                                      **base_kwargs())
    mmodel = transformers.MistralForCausalLM(mcfg).eval()
    round_weights(mmodel)
    save_hf(mmodel, os.path.join(out, "mistral"))
    save_expected(out, "mistral",
                  reference_logits(mmodel, MISTRAL_TOKENS, False),
                  MISTRAL_TOKENS)
    # The same model without the window: the banded mask must matter.
    fcfg = transformers.MistralConfig(max_position_embeddings=128,
                                      sliding_window=None,
                                      rope_parameters=dict(rope_type="default",
                                                           rope_theta=10000.0),
                                      **base_kwargs())
    fmodel = transformers.MistralForCausalLM(fcfg).eval()
    fmodel.load_state_dict(mmodel.state_dict())
    save_expected(out, "mistral-nowindow",
                  reference_logits(fmodel, MISTRAL_TOKENS, False),
                  MISTRAL_TOKENS)
    save_gguf(mmodel, os.path.join(out, "mistral.gguf"), "llama", True,
              [("add_sliding_window", WINDOW)])
    mbad = json.load(open(os.path.join(out, "mistral", "config.json")))
    mbad["sliding_window"] = 0
    write_config(os.path.join(out, "configs", "bad-window.json"), mbad)

    rope_tables(out)
    with open(os.path.join(out, "tokens.txt"), "w") as f:
        f.write(",".join(map(str, TOKENS)) + "\n")
        f.write(",".join(map(str, MISTRAL_TOKENS)) + "\n")
    print("transformers", transformers.__version__, "torch", torch.__version__)


if __name__ == "__main__":
    main()
