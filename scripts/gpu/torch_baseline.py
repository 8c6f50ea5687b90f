#!/usr/bin/env python3
"""PyTorch eager baseline for scripts/gpu-check.sh.

Runs the same work as one Llama-2-7B-shaped decode step and one 2048-token
prefill (bf16 weights and activations, the same matmuls, RMSNorm, RoPE-free
attention through torch's scaled_dot_product_attention) in PyTorch eager mode,
and measures the device's copy bandwidth and cuBLAS GEMM peak in the same run.

Prints one `key: value` line per measurement (tokens/s, GB/s, TFLOP/s).
Weights are random (shapes are what matter for speed); nothing is downloaded.
"""
import argparse
import statistics
import sys

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    print("torch: unavailable")
    sys.exit(0)


def timed(fn, repeat, warmup=3):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeat):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dim", type=int, default=4096)
    ap.add_argument("--hidden", type=int, default=11008)
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--context", type=int, default=128, help="cached tokens during decode")
    ap.add_argument("--prefill", type=int, default=2048)
    ap.add_argument("--repeat", type=int, default=10)
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("torch: no CUDA device")
        return
    dev, dt = "cuda", torch.bfloat16
    torch.manual_seed(0)
    d, h, L, H, hd = a.dim, a.hidden, a.layers, a.heads, a.dim // a.heads
    layers = [dict(wqkv=torch.randn(3 * d, d, device=dev, dtype=dt) * 0.02,
                   wo=torch.randn(d, d, device=dev, dtype=dt) * 0.02,
                   w13=torch.randn(2 * h, d, device=dev, dtype=dt) * 0.02,
                   w2=torch.randn(d, h, device=dev, dtype=dt) * 0.02,
                   n1=torch.ones(d, device=dev, dtype=dt), n2=torch.ones(d, device=dev, dtype=dt))
              for _ in range(L)]
    wcls = torch.randn(a.vocab, d, device=dev, dtype=dt) * 0.02
    weight_bytes = sum(t.numel() * 2 for l in layers for t in l.values()) + wcls.numel() * 2

    def rms(x, w):
        return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-5).to(x.dtype) * w

    def forward(x, kv_len):
        n = x.shape[0]
        for l in layers:
            y = rms(x, l["n1"])
            q, k, v = (y @ l["wqkv"].t()).split(d, dim=-1)
            q = q.view(n, H, hd).transpose(0, 1)
            kc = torch.cat([k.view(n, H, hd).transpose(0, 1),
                            kcache[:, :kv_len]], dim=1) if kv_len else k.view(n, H, hd).transpose(0, 1)
            vc = torch.cat([v.view(n, H, hd).transpose(0, 1),
                            vcache[:, :kv_len]], dim=1) if kv_len else v.view(n, H, hd).transpose(0, 1)
            o = F.scaled_dot_product_attention(q.unsqueeze(0), kc.unsqueeze(0), vc.unsqueeze(0),
                                               is_causal=kv_len == 0).squeeze(0)
            x = x + o.transpose(0, 1).reshape(n, d) @ l["wo"].t()
            y = rms(x, l["n2"])
            g, u = (y @ l["w13"].t()).split(h, dim=-1)
            x = x + (F.silu(g) * u) @ l["w2"].t()
        return rms(x[-1:], layers[-1]["n2"]) @ wcls.t()

    kcache = torch.randn(H, a.context, hd, device=dev, dtype=dt)
    vcache = torch.randn(H, a.context, hd, device=dev, dtype=dt)
    with torch.inference_mode():
        x1 = torch.randn(1, d, device=dev, dtype=dt)
        t = timed(lambda: forward(x1, a.context), a.repeat)
        print("torch_decode_tokens_per_s: %.2f" % (1.0 / t))
        xp = torch.randn(a.prefill, d, device=dev, dtype=dt)
        t = timed(lambda: forward(xp, 0), max(3, a.repeat // 3))
        print("torch_prefill_tokens_per_s: %.1f" % (a.prefill / t))
        print("weight_bytes: %d" % weight_bytes)
        # Copy bandwidth (read + write) and cuBLAS GEMM peak, same run.
        buf = torch.empty(1 << 30, dtype=torch.uint8, device=dev)
        dst = torch.empty_like(buf)
        t = timed(lambda: dst.copy_(buf), a.repeat)
        print("copy_bandwidth_gb_s: %.1f" % (2 * buf.numel() / t / 1e9))
        m, k, n = 2048, 4096, 4096
        A = torch.randn(m, k, device=dev, dtype=dt)
        B = torch.randn(n, k, device=dev, dtype=dt)
        t = timed(lambda: A @ B.t(), a.repeat)
        print("cublas_gemm_tflops: %.1f" % (2 * m * k * n / t / 1e12))


if __name__ == "__main__":
    main()
