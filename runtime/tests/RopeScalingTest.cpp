//===- RopeScalingTest.cpp - RoPE scaling, biases, sliding window ---------===//
//
// (1) kiln_rt/rope_scaling.h against the inverse-frequency tables of
// Hugging Face transformers' own functions (_compute_llama3_parameters for
// Llama 3.1 8B and a tiny config, linear, _compute_dynamic_ntk_parameters at
// sequence length 48), committed in RopeScalingTables.inc by
// test/reference/make_arch_fixtures.py; float32 agreement within 2 ulp-ish
// (1e-6 relative).
// (2) kiln_k_rope_scaled / kiln_k_rope_factors rotate by those frequencies.
// (3) kiln_k_add_bias adds the bias to every row; kiln_k_attention_window
// equals kiln_k_attention when the window covers everything, and with
// window 1 returns each token's own value row.
//
//===----------------------------------------------------------------------===//
#include "cpu/WholeOpKernels.h"
#include "kiln_rt/kernel_abi.h"
#include "kiln_rt/rope_scaling.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "RopeScalingTables.inc"

namespace {

void expectTable(const float *want, int64_t pairs, int64_t headDim,
                 float theta, int64_t scaling, float factor, float low,
                 float high, int64_t original, int64_t seqLen) {
  float t = kiln_rope_theta(theta, headDim, scaling, factor, original, seqLen);
  for (int64_t i = 0; i < pairs; ++i) {
    float got = kiln_rope_inv_freq(i, headDim, headDim, t, scaling, factor,
                                   low, high, original);
    EXPECT_NEAR(got, want[i], 1e-6f * std::fabs(want[i])) << "pair " << i;
  }
}

TEST(RopeScaling, Llama31MatchesTransformers) {
  expectTable(kLlama31_8B, 64, 128, 500000.0f, KILN_ROPE_LLAMA3, 8.0f, 1.0f,
              4.0f, 8192, 1);
  expectTable(kLlama3Tiny, 8, 16, 10000.0f, KILN_ROPE_LLAMA3, 4.0f, 1.0f,
              4.0f, 32, 1);
}

TEST(RopeScaling, LinearAndDynamicMatchTransformers) {
  expectTable(kLinear, 8, 16, 10000.0f, KILN_ROPE_LINEAR, 2.0f, 0, 0, 0, 1);
  expectTable(kDynamic48, 8, 16, 10000.0f, KILN_ROPE_DYNAMIC, 2.0f, 0, 0, 32,
              48);
  // At or below the original context dynamic scaling is plain RoPE.
  EXPECT_EQ(kiln_rope_theta(10000.0f, 16, KILN_ROPE_DYNAMIC, 2.0f, 32, 32),
            10000.0f);
}

/// Rotation of (x0, x1) pairs by p * freq[i] (the kernel_abi.h definition).
std::vector<float> rotate(const std::vector<float> &x, int64_t n,
                          int64_t heads, int64_t hd, int64_t pos,
                          const std::vector<float> &freq) {
  std::vector<float> y(x);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < hd / 2; ++i) {
        float a = float(pos + r) * freq[size_t(i)];
        size_t o = size_t(r * heads * hd + h * hd + 2 * i);
        float c = cosf(a), s = sinf(a);
        y[o] = x[o] * c - x[o + 1] * s;
        y[o + 1] = x[o] * s + x[o + 1] * c;
      }
  return y;
}

TEST(RopeScaling, KernelsRotateByTheTable) {
  const int64_t n = 3, heads = 2, hd = 16, pos = 40;
  std::mt19937 rng(3);
  std::normal_distribution<float> dist;
  std::vector<float> x(size_t(n * heads * hd)), y(x.size());
  for (float &v : x)
    v = dist(rng);
  std::vector<float> freq(kLlama3Tiny, kLlama3Tiny + 8);
  kiln_k_rope_scaled(x.data(), y.data(), n, heads, hd, hd, pos, 10000.0f,
                     KILN_ROPE_LLAMA3, 4.0f, 1.0f, 4.0f, 32);
  std::vector<float> want = rotate(x, n, heads, hd, pos, freq);
  for (size_t i = 0; i < y.size(); ++i)
    EXPECT_NEAR(y[i], want[i], 1e-4f) << i;
  // GGUF rope_freqs: divisors w_i / f_i giving the same table.
  std::vector<float> factors(8);
  for (int64_t i = 0; i < 8; ++i)
    factors[size_t(i)] =
        1.0f / powf(10000.0f, float(2 * i) / 16.0f) / kLlama3Tiny[i];
  kiln_k_rope_factors(x.data(), y.data(), n, heads, hd, hd, pos, 10000.0f,
                      factors.data());
  for (size_t i = 0; i < y.size(); ++i)
    EXPECT_NEAR(y[i], want[i], 1e-4f) << i;
}

TEST(AddBias, AddsToEveryRow) {
  std::vector<float> x = {1, 2, 3, 4, 5, 6}, b = {10, 20, 30}, y(6);
  kiln_k_add_bias(x.data(), b.data(), y.data(), 2, 3);
  EXPECT_EQ(y, (std::vector<float>{11, 22, 33, 14, 25, 36}));
}

TEST(AttentionWindow, BandedMask) {
  const int64_t n = 6, heads = 2, kvHeads = 1, hd = 4, maxSeq = 8;
  std::mt19937 rng(5);
  std::normal_distribution<float> dist;
  auto fill = [&](size_t count) {
    std::vector<float> v(count);
    for (float &e : v)
      e = dist(rng);
    return v;
  };
  std::vector<float> q = fill(n * heads * hd), k = fill(n * kvHeads * hd),
                     v = fill(n * kvHeads * hd);
  auto run = [&](int64_t window) {
    std::vector<float> kc(maxSeq * kvHeads * hd), vc(kc.size()),
        out(n * heads * hd);
    if (window > 0)
      kiln_k_attention_window(q.data(), k.data(), v.data(), kc.data(),
                              vc.data(), out.data(), n, 0, heads, kvHeads, hd,
                              maxSeq, 0.5f, window);
    else
      kiln_k_attention(q.data(), k.data(), v.data(), kc.data(), vc.data(),
                       out.data(), n, 0, heads, kvHeads, hd, maxSeq, 0.5f);
    return out;
  };
  EXPECT_EQ(run(n), run(0));
  std::vector<float> own = run(1);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t d = 0; d < hd; ++d)
        EXPECT_FLOAT_EQ(own[size_t((i * heads + h) * hd + d)],
                        v[size_t(i * hd + d)]);
  // Window 3 differs from full attention once a row has more than 3 keys.
  std::vector<float> w3 = run(3), full = run(0);
  EXPECT_NE(w3[size_t(5 * heads * hd)], full[size_t(5 * heads * hd)]);
  EXPECT_EQ(w3[0], full[0]);
}

} // namespace
