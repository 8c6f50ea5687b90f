//===- AmxGemmTest.cpp - the AMX prefill GEMM against float64 --------------===//
//
// cpu/Kernels.h amxGemmF32 / gemmWeightTile: C = x W^T over AMX tiles with x
// and W split into three bf16 pieces each. Checked against a float64
// reference written from the definition, on shapes with partial token /
// row tiles and a depth that is not a multiple of 32, with and without
// accumulation; and exactly on one-hot products, which only hold if every
// bf16 piece of a full 24-bit significand (x's and w's third) is summed.
// Skipped where the CPU or the OS offers no AMX.
//
//===----------------------------------------------------------------------===//
#include "cpu/Kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace cpu = kiln::rt::cpu;

namespace {

/// Values with full 24-bit significands over several binades.
std::vector<float> randomValues(size_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> mant(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exp(-6, 6);
  std::vector<float> v(count);
  for (float &f : v)
    f = std::ldexp(mant(rng), exp(rng));
  return v;
}

/// x is [n, ldx] and the product reads its columns [k0, k0 + depth).
void checkShape(int64_t n, int64_t rows, int64_t depth, bool accumulate,
                int64_t ldx, int64_t ldc, int64_t k0 = 0) {
  SCOPED_TRACE(testing::Message() << "n=" << n << " rows=" << rows
                                  << " depth=" << depth
                                  << " accumulate=" << accumulate);
  std::vector<float> x = randomValues(size_t(n * ldx), 1 + uint32_t(n));
  std::vector<float> w = randomValues(size_t(rows * depth), 7 + uint32_t(rows));
  std::vector<float> c = randomValues(size_t(n * ldc), 3);
  const std::vector<float> c0 = c;
  cpu::amxGemmF32(x.data(), n, ldx, k0, w.data(), depth, rows, depth, c.data(),
                  ldc, accumulate);
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t r = 0; r < ldc; ++r) {
      const float got = c[size_t(t * ldc + r)];
      if (r >= rows) { // columns past `rows` are left alone
        ASSERT_EQ(got, c0[size_t(t * ldc + r)]);
        continue;
      }
      double want = accumulate ? double(c0[size_t(t * ldc + r)]) : 0.0;
      double mag = std::fabs(want);
      for (int64_t k = 0; k < depth; ++k) {
        const double p = double(x[size_t(t * ldx + k0 + k)]) *
                         double(w[size_t(r * depth + k)]);
        want += p;
        mag += std::fabs(p);
      }
      // float32 summation of depth exact products: a few ulps of the
      // magnitude; a lost bf16 piece (2^-16 or 2^-8 of each product) or a
      // misplaced tile element is orders of magnitude more.
      ASSERT_NEAR(got, want, 4e-7 * mag + 1e-30) << "t=" << t << " r=" << r;
    }
  }
}

} // namespace

TEST(AmxGemmTest, MatchesFloat64Reference) {
  if (!cpu::amxAvailable())
    GTEST_SKIP() << "no AMX on this CPU / OS (or KILN_AMX=0)";
  checkShape(16, 16, 32, false, 32, 16);
  checkShape(37, 70, 200, false, 211, 75); // partial tiles, padded depth
  checkShape(20, 130, 512, true, 512, 130);
  checkShape(64, 64, 1024, false, 1024, 64);
  checkShape(3, 5, 7, true, 9, 6);
  checkShape(40, 33, 100, true, 300, 40, 192); // a later depth chunk
}

TEST(AmxGemmTest, OneHotProductsAreExact) {
  if (!cpu::amxAvailable())
    GTEST_SKIP() << "no AMX on this CPU / OS (or KILN_AMX=0)";
  const int64_t depth = 64, n = 16, rows = 16;
  std::vector<float> x = randomValues(size_t(n * depth), 11);
  std::vector<float> w(size_t(rows * depth), 0.0f), c(size_t(n * rows));
  for (int64_t r = 0; r < rows; ++r)
    w[size_t(r * depth + 3 * r)] = 1.0f; // row r picks x[t, 3r]
  cpu::amxGemmF32(x.data(), n, depth, 0, w.data(), depth, rows, depth,
                  c.data(), rows, false);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t r = 0; r < rows; ++r)
      ASSERT_EQ(c[size_t(t * rows + r)], x[size_t(t * depth + 3 * r)]);
  // And the transpose: one-hot tokens pick full-precision weights.
  std::vector<float> wf = randomValues(size_t(rows * depth), 13);
  std::vector<float> xo(size_t(n * depth), 0.0f);
  for (int64_t t = 0; t < n; ++t)
    xo[size_t(t * depth + 2 * t + 1)] = 1.0f;
  cpu::amxGemmF32(xo.data(), n, depth, 0, wf.data(), depth, rows, depth,
                  c.data(), rows, false);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t r = 0; r < rows; ++r)
      ASSERT_EQ(c[size_t(t * rows + r)], wf[size_t(r * depth + 2 * t + 1)]);
}

TEST(AmxGemmTest, WeightTileFallsBackToSgemm) {
  // gemmWeightTile below kAmxMinTokens (and without AMX) is OpenBLAS's.
  const int64_t n = 2, rows = 3, depth = 4;
  const float x[8] = {1, 2, 3, 4, -1, 0, 1, 0};
  const float w[12] = {1, 0, 0, 0, 0, 1, 0, 0, 1, 1, 1, 1};
  float c[6] = {10, 10, 10, 10, 10, 10};
  cpu::gemmWeightTile(x, n, depth, 0, w, rows, depth, c, rows, true);
  const float want[6] = {11, 12, 20, 9, 10, 10};
  for (int i = 0; i < 6; ++i)
    EXPECT_EQ(c[i], want[i]) << i;
}

TEST(AmxGemmTest, DenseRowsMatchFloat64Reference) {
  // gemmDenseF32: float32 weight rows of stride `in`, kAmxDepth columns at
  // a time (AMX) or one sgemm (otherwise); the same contract either way.
  const int64_t n = 24, in = 1100, rows = 40;
  std::vector<float> x = randomValues(size_t(n * in), 21);
  std::vector<float> w = randomValues(size_t(rows * in), 22);
  std::vector<float> c(size_t(n * rows), 0.0f);
  cpu::gemmDenseF32(x.data(), n, in, w.data(), rows, c.data(), rows);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t r = 0; r < rows; ++r) {
      double want = 0.0, mag = 0.0;
      for (int64_t k = 0; k < in; ++k) {
        const double p = double(x[size_t(t * in + k)]) * double(w[size_t(r * in + k)]);
        want += p;
        mag += std::fabs(p);
      }
      ASSERT_NEAR(c[size_t(t * rows + r)], want, 4e-7 * mag) << t << " " << r;
    }
}
