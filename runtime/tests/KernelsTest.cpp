//===- KernelsTest.cpp - CPU kernels vs double-precision references -------===//
//
// Every kernel of kiln_rt/kernel_abi.h on random inputs against a naive
// float64 implementation of its documented formula; tolerance 1e-5 relative
// (to the largest reference magnitude) unless the formula itself rounds in
// float (RoPE angles).
//
//===----------------------------------------------------------------------===//
#include "SimdLevels.h"
#include "cpu/WholeOpKernels.h"
#include "kiln_rt/kernel_abi.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <ostream>
#include <random>
#include <vector>

namespace {

std::vector<float> randomVector(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float &x : v)
    x = dist(gen);
  return v;
}

/// max |got - ref| / max |ref| (the relative error the numpy checks use).
double relError(const std::vector<float> &got, const std::vector<double> &ref) {
  EXPECT_EQ(got.size(), ref.size());
  double maxDiff = 0, maxRef = 1e-30;
  for (size_t i = 0; i < got.size() && i < ref.size(); ++i) {
    maxDiff = std::max(maxDiff, std::fabs(double(got[i]) - ref[i]));
    maxRef = std::max(maxRef, std::fabs(ref[i]));
  }
  return maxDiff / maxRef;
}

TEST(Kernels, Embedding) {
  const int64_t vocab = 37, dim = 19;
  auto table = randomVector(vocab * dim, 1);
  std::vector<int32_t> tokens = {0, 36, 5, 5, 17};
  std::vector<float> out(tokens.size() * dim);
  kiln_k_embedding(tokens.data(), int64_t(tokens.size()), table.data(), vocab,
                   dim, out.data());
  for (size_t i = 0; i < tokens.size(); ++i)
    for (int64_t j = 0; j < dim; ++j)
      EXPECT_EQ(out[i * dim + j], table[tokens[i] * dim + j]);
}

class RmsNormTest : public ::testing::TestWithParam<std::pair<int64_t, int64_t>> {};

TEST_P(RmsNormTest, MatchesReference) {
  auto [n, dim] = GetParam();
  const float eps = 1e-5f;
  auto x = randomVector(n * dim, 2, 3.0f);
  auto w = randomVector(dim, 3);
  std::vector<float> y(n * dim);
  kiln_k_rms_norm(x.data(), w.data(), y.data(), n, dim, eps);
  std::vector<double> ref(n * dim);
  for (int64_t i = 0; i < n; ++i) {
    double ss = 0;
    for (int64_t j = 0; j < dim; ++j)
      ss += double(x[i * dim + j]) * x[i * dim + j];
    double s = 1.0 / std::sqrt(ss / dim + eps);
    for (int64_t j = 0; j < dim; ++j)
      ref[i * dim + j] = double(w[j]) * x[i * dim + j] * s;
  }
  EXPECT_LT(relError(y, ref), 1e-5);
  // In place (emitted code may reuse a buffer).
  kiln_k_rms_norm(x.data(), w.data(), x.data(), n, dim, eps);
  EXPECT_LT(relError(x, ref), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Shapes, RmsNormTest,
                         ::testing::Values(std::make_pair(1, 64),
                                           std::make_pair(7, 288),
                                           std::make_pair(33, 4096)));

struct LinearShape {
  int64_t n, in, out;
};
std::ostream &operator<<(std::ostream &os, const LinearShape &s) {
  return os << "n" << s.n << "_in" << s.in << "_out" << s.out;
}
class LinearTest : public ::testing::TestWithParam<LinearShape> {};

TEST_P(LinearTest, MatchesReference) {
  LinearShape s = GetParam();
  auto x = randomVector(s.n * s.in, 4);
  auto w = randomVector(s.out * s.in, 5, 0.1f);
  std::vector<float> y(s.n * s.out, -1.0f);
  kiln_k_linear(x.data(), w.data(), y.data(), s.n, s.in, s.out);
  std::vector<double> ref(s.n * s.out);
  for (int64_t i = 0; i < s.n; ++i)
    for (int64_t o = 0; o < s.out; ++o) {
      double acc = 0;
      for (int64_t j = 0; j < s.in; ++j)
        acc += double(x[i * s.in + j]) * w[o * s.in + j];
      ref[i * s.out + o] = acc;
    }
  EXPECT_LT(relError(y, ref), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, LinearTest,
    ::testing::Values(LinearShape{1, 64, 64}, LinearShape{1, 172, 64},
                      LinearShape{1, 64, 512}, LinearShape{1, 13, 7},
                      LinearShape{1, 4096, 1000}, LinearShape{1, 11008, 300},
                      LinearShape{2, 64, 32}, LinearShape{5, 172, 64},
                      // The few-row float32 GEMV (2 to 8 tokens, odd row
                      // counts, columns past the vector width).
                      LinearShape{3, 13, 7}, LinearShape{8, 300, 129},
                      LinearShape{7, 1000, 33},
                      LinearShape{17, 288, 770}, LinearShape{64, 512, 1024}));

struct RopeShape {
  int64_t n, heads, headDim, rotDim, pos;
};
std::ostream &operator<<(std::ostream &os, const RopeShape &s) {
  return os << "n" << s.n << "_h" << s.heads << "_hd" << s.headDim << "_rot"
            << s.rotDim << "_pos" << s.pos;
}
class RopeTest : public ::testing::TestWithParam<RopeShape> {};

TEST_P(RopeTest, MatchesReference) {
  RopeShape s = GetParam();
  const float theta = 10000.0f;
  int64_t width = s.heads * s.headDim;
  auto x = randomVector(s.n * width, 6);
  std::vector<float> y(x.size());
  kiln_k_rope(x.data(), y.data(), s.n, s.heads, s.headDim, s.rotDim, s.pos,
              theta);
  std::vector<double> ref(x.size());
  for (int64_t r = 0; r < s.n; ++r)
    for (int64_t h = 0; h < s.heads; ++h)
      for (int64_t j = 0; j < s.headDim; ++j) {
        int64_t at = r * width + h * s.headDim + j;
        if (j >= s.rotDim) {
          ref[at] = x[at];
          continue;
        }
        int64_t i = j / 2;
        double angle = double(s.pos + r) *
                       std::pow(double(theta), -2.0 * i / double(s.headDim));
        double c = std::cos(angle), sn = std::sin(angle);
        double v0 = x[at - (j % 2)], v1 = x[at - (j % 2) + 1];
        ref[at] = (j % 2 == 0) ? v0 * c - v1 * sn : v0 * sn + v1 * c;
      }
  // Angles are rounded to float (as in run.c): error grows with position.
  double tol = 1e-5 + 1e-7 * double(s.pos + s.n);
  EXPECT_LT(relError(y, ref), tol);
  // In place.
  kiln_k_rope(x.data(), x.data(), s.n, s.heads, s.headDim, s.rotDim, s.pos,
              theta);
  EXPECT_LT(relError(x, ref), tol);
}

INSTANTIATE_TEST_SUITE_P(Shapes, RopeTest,
                         ::testing::Values(RopeShape{1, 8, 8, 8, 0},
                                           RopeShape{1, 4, 8, 8, 37},
                                           RopeShape{5, 8, 8, 8, 3},
                                           RopeShape{3, 2, 16, 8, 11},
                                           RopeShape{9, 32, 128, 128, 500}));

struct AttnShape {
  int64_t n, pos, heads, kvHeads, headDim, maxSeq;
  int64_t window = 0; ///< sliding window (kiln_k_attention_window); 0: none
};
std::ostream &operator<<(std::ostream &os, const AttnShape &s) {
  return os << "n" << s.n << "_pos" << s.pos << "_h" << s.heads << "_kvh"
            << s.kvHeads << "_hd" << s.headDim << "_max" << s.maxSeq << "_w"
            << s.window;
}
class AttentionTest : public ::testing::TestWithParam<AttnShape> {};

void attentionMatchesReference(const AttnShape &s);

// At every SIMD level (the tiled path's softmax is a Highway kernel).
TEST_P(AttentionTest, MatchesReference) {
  for (kiln::rt::cpu::SimdLevel level : kiln::rt::test::supportedLevels()) {
    kiln::rt::test::ScopedSimdLevel scoped(level);
    SCOPED_TRACE(kiln::rt::test::levelName(level));
    attentionMatchesReference(GetParam());
  }
}

void attentionMatchesReference(const AttnShape &s) {
  int64_t qDim = s.heads * s.headDim, kvDim = s.kvHeads * s.headDim;
  float scale = 1.0f / std::sqrt(float(s.headDim));
  auto q = randomVector(s.n * qDim, 7);
  auto k = randomVector(s.n * kvDim, 8);
  auto v = randomVector(s.n * kvDim, 9);
  // Earlier positions already in the cache; rows past pos + n must stay.
  auto kCache = randomVector(s.maxSeq * kvDim, 10);
  auto vCache = randomVector(s.maxSeq * kvDim, 11);
  auto kBefore = kCache, vBefore = vCache;
  std::vector<float> out(s.n * qDim);
  if (s.window > 0)
    kiln_k_attention_window(q.data(), k.data(), v.data(), kCache.data(),
                            vCache.data(), out.data(), s.n, s.pos, s.heads,
                            s.kvHeads, s.headDim, s.maxSeq, scale, s.window);
  else
    kiln_k_attention(q.data(), k.data(), v.data(), kCache.data(),
                     vCache.data(), out.data(), s.n, s.pos, s.heads,
                     s.kvHeads, s.headDim, s.maxSeq, scale);
  for (int64_t t = 0; t < s.maxSeq; ++t)
    for (int64_t d = 0; d < kvDim; ++d) {
      bool isNew = t >= s.pos && t < s.pos + s.n;
      float ek = isNew ? k[(t - s.pos) * kvDim + d] : kBefore[t * kvDim + d];
      float ev = isNew ? v[(t - s.pos) * kvDim + d] : vBefore[t * kvDim + d];
      ASSERT_EQ(kCache[t * kvDim + d], ek) << "k_cache row " << t;
      ASSERT_EQ(vCache[t * kvDim + d], ev) << "v_cache row " << t;
    }
  std::vector<double> ref(out.size());
  int64_t group = s.heads / s.kvHeads;
  for (int64_t i = 0; i < s.n; ++i)
    for (int64_t h = 0; h < s.heads; ++h) {
      int64_t kvh = h / group, last = s.pos + i;
      int64_t first = s.window > 0 ? std::max<int64_t>(0, last - s.window + 1)
                                   : 0;
      std::vector<double> att(last + 1, 0.0);
      double mx = -1e300;
      for (int64_t t = first; t <= last; ++t) {
        double dot = 0;
        for (int64_t d = 0; d < s.headDim; ++d)
          dot += double(q[i * qDim + h * s.headDim + d]) *
                 kCache[t * kvDim + kvh * s.headDim + d];
        att[t] = dot * scale;
        mx = std::max(mx, att[t]);
      }
      double sum = 0;
      for (int64_t t = first; t <= last; ++t)
        sum += (att[t] = std::exp(att[t] - mx));
      for (int64_t d = 0; d < s.headDim; ++d) {
        double acc = 0;
        for (int64_t t = first; t <= last; ++t)
          acc += att[t] / sum * vCache[t * kvDim + kvh * s.headDim + d];
        ref[i * qDim + h * s.headDim + d] = acc;
      }
    }
  EXPECT_LT(relError(out, ref), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, AttentionTest,
    ::testing::Values(AttnShape{1, 0, 8, 4, 8, 16},      // first token, GQA
                      AttnShape{1, 9, 8, 4, 8, 16},      // decode, pos > 0
                      AttnShape{5, 0, 8, 4, 8, 16},      // prefill
                      AttnShape{4, 6, 8, 4, 8, 16},      // chunked prefill
                      AttnShape{3, 2, 4, 4, 16, 8},      // MHA
                      AttnShape{2, 5, 8, 1, 8, 12},      // MQA
                      AttnShape{7, 100, 32, 8, 128, 128}, // Llama-3 shape
                      // 16+ tokens: the tiled prefill path (32-row query
                      // tiles, sgemm), whole and partial tiles, after a
                      // cache prefix, and with a sliding window.
                      AttnShape{16, 0, 4, 4, 8, 16},
                      AttnShape{40, 0, 8, 4, 16, 64},
                      AttnShape{33, 20, 9, 3, 64, 64},
                      AttnShape{70, 0, 4, 2, 16, 80, 7},
                      AttnShape{20, 30, 4, 2, 16, 64, 10},
                      AttnShape{1, 60, 4, 2, 16, 64, 10} // decode, window
                      ));

void nanReachesTheOutput();

// A NaN score reaches the output in the tiled prefill path too (its vector
// exponential maps NaN to 0, so such rows take expf): a NaN in one key row
// makes every query row that sees it NaN and leaves the earlier ones finite.
TEST(AttentionTiles, NanReachesTheOutput) {
  for (kiln::rt::cpu::SimdLevel level : kiln::rt::test::supportedLevels()) {
    kiln::rt::test::ScopedSimdLevel scoped(level);
    SCOPED_TRACE(kiln::rt::test::levelName(level));
    nanReachesTheOutput();
  }
}

void nanReachesTheOutput() {
  const int64_t n = 40, heads = 2, kvHeads = 1, hd = 16, maxSeq = 48;
  const int64_t qDim = heads * hd, kvDim = kvHeads * hd;
  auto q = randomVector(n * qDim, 3);
  auto k = randomVector(n * kvDim, 4);
  auto v = randomVector(n * kvDim, 5);
  k[size_t(21 * kvDim + 2)] = NAN; // key 21: one NaN score per later row
  std::vector<float> kc(size_t(maxSeq * kvDim)), vc(kc.size()),
      out(size_t(n * qDim));
  kiln_k_attention(q.data(), k.data(), v.data(), kc.data(), vc.data(),
                   out.data(), n, 0, heads, kvHeads, hd, maxSeq, 0.25f);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t h = 0; h < heads; ++h) {
      float o = out[size_t(i * qDim + h * hd)];
      if (i >= 21)
        EXPECT_TRUE(std::isnan(o)) << "row " << i << " head " << h;
      else
        EXPECT_TRUE(std::isfinite(o)) << "row " << i << " head " << h;
    }
}

TEST(Kernels, Elementwise) {
  const int64_t count = 100003; // above the threading threshold, odd
  auto a = randomVector(count, 12, 4.0f);
  auto b = randomVector(count, 13);
  std::vector<float> y(count);
  std::vector<double> ref(count);

  kiln_k_swiglu(a.data(), b.data(), y.data(), count);
  for (int64_t i = 0; i < count; ++i)
    ref[i] = double(a[i]) / (1.0 + std::exp(-double(a[i]))) * b[i];
  EXPECT_LT(relError(y, ref), 1e-6);

  kiln_k_silu(a.data(), y.data(), count);
  for (int64_t i = 0; i < count; ++i)
    ref[i] = double(a[i]) / (1.0 + std::exp(-double(a[i])));
  EXPECT_LT(relError(y, ref), 1e-6);

  kiln_k_add(a.data(), b.data(), y.data(), count);
  for (int64_t i = 0; i < count; ++i)
    EXPECT_EQ(y[i], a[i] + b[i]);
  kiln_k_mul(a.data(), b.data(), y.data(), 5);
  for (int64_t i = 0; i < 5; ++i)
    EXPECT_EQ(y[i], a[i] * b[i]);
}

} // namespace
