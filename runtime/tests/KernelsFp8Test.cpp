//===- KernelsFp8Test.cpp - FP8 E4M3FN codec and the FP8 KV cache ---------===//
//
// (1) The E4M3FN conversions of Kernels.h against the OCP OFP8 spec (rev.
// 1.0): all 256 codes decode to the value of the spec's formula (computed
// here with ldexp), every finite code round-trips, float -> E4M3 equals a
// brute-force nearest search over the 254 finite values with ties to the
// even code (normal and subnormal ranges, millions of inputs), ties go to
// even, magnitudes >= 448 and infinities saturate, NaN stays NaN.
// (2) kiln_k_attention_kvf8{,_f16,_bf16}: appended cache rows and scales equal
// the formula (scale = amax / 448, code = nearest E4M3 of x / scale, found by
// the brute-force search, not by the runtime's encoder) bit for bit, rows
// outside [pos, pos + n) untouched; the attention output equals
// kiln_k_attention on float32 caches holding scale * e4m3(code) (rel. error
// below 1e-5 f32, 2e-3 f16, 1e-2 bf16) and stays within 8e-2 of attention
// on the unquantized K/V (3 mantissa bits: up to 2^-4 relative per value).
//
//===----------------------------------------------------------------------===//
#include "KvCacheTestUtil.h"
#include "cpu/Kernels.h"
#include "kiln_rt/kernel_abi.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace cpu = kiln::rt::cpu;
using namespace kiln::rt::test;

namespace {

TEST(E4M3, DecodeAll256Codes) {
  for (int c = 0; c < 256; ++c) {
    float got = cpu::e4m3ToFloat(uint8_t(c));
    double want = specValue(c);
    SCOPED_TRACE("code " + std::to_string(c));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got));
      continue;
    }
    EXPECT_EQ(double(got), want);
    EXPECT_EQ(std::signbit(got), bool(c & 0x80)); // -0 too
  }
  // Landmarks of the spec.
  EXPECT_EQ(cpu::e4m3ToFloat(0x7e), 448.0f);
  EXPECT_EQ(cpu::e4m3ToFloat(0xfe), -448.0f);
  EXPECT_EQ(cpu::e4m3ToFloat(0x08), 0x1p-6f);   // smallest normal
  EXPECT_EQ(cpu::e4m3ToFloat(0x01), 0x1p-9f);   // smallest subnormal
  EXPECT_EQ(cpu::e4m3ToFloat(0x07), 0x1.cp-7f); // largest subnormal 7/8 2^-6
  EXPECT_EQ(cpu::e4m3ToFloat(0x38), 1.0f);
  EXPECT_TRUE(std::isnan(cpu::e4m3ToFloat(0x7f)));
  EXPECT_TRUE(std::isnan(cpu::e4m3ToFloat(0xff)));
}

TEST(E4M3, EncodeRoundTripsEveryFiniteCode) {
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7f) == 0x7f)
      continue;
    EXPECT_EQ(int(cpu::floatToE4M3(cpu::e4m3ToFloat(uint8_t(c)))), c) << c;
  }
}

TEST(E4M3, TiesRoundToEven) {
  for (int c = 0; c < 0x7e; ++c) { // each pair of neighbours c, c + 1
    double lo = specValue(c), hi = specValue(c + 1);
    float mid = float((lo + hi) / 2); // exact: 4 significant bits
    ASSERT_EQ(double(mid), (lo + hi) / 2);
    int even = (c & 1) == 0 ? c : c + 1;
    EXPECT_EQ(int(cpu::floatToE4M3(mid)), even) << "between " << c;
    EXPECT_EQ(int(cpu::floatToE4M3(-mid)), even | 0x80) << "between -" << c;
    // Just off the tie: nearest, not even.
    EXPECT_EQ(int(cpu::floatToE4M3(std::nextafter(mid, 0.0f))), c);
    EXPECT_EQ(int(cpu::floatToE4M3(std::nextafter(mid, 1000.0f))), c + 1);
  }
  EXPECT_EQ(int(cpu::floatToE4M3(0x1p-10f)), 0x00); // half the smallest step
  EXPECT_EQ(int(cpu::floatToE4M3(-0x1p-10f)), 0x80);
  EXPECT_EQ(int(cpu::floatToE4M3(1.5f * 0x1p-9f)), 0x02);
  EXPECT_EQ(int(cpu::floatToE4M3(1.0625f)), 0x38); // 1 + 1/16: tie -> 1.0
  EXPECT_EQ(int(cpu::floatToE4M3(1.1875f)), 0x3a); // 1 + 3/16: tie -> 1.25
}

TEST(E4M3, SaturatesAndKeepsNaN) {
  const float inf = std::numeric_limits<float>::infinity();
  for (float big :
       {448.0f, 449.0f, 464.0f, 480.0f, 512.0f, 1e6f, 3.4e38f, inf}) {
    EXPECT_EQ(int(cpu::floatToE4M3(big)), 0x7e) << big;
    EXPECT_EQ(int(cpu::floatToE4M3(-big)), 0xfe) << big;
  }
  const float qnan = std::numeric_limits<float>::quiet_NaN();
  const float snan = std::numeric_limits<float>::signaling_NaN();
  EXPECT_EQ(int(cpu::floatToE4M3(qnan)), 0x7f);
  EXPECT_EQ(int(cpu::floatToE4M3(-qnan)), 0xff);
  EXPECT_EQ(int(cpu::floatToE4M3(snan)), 0x7f);
  EXPECT_EQ(int(cpu::floatToE4M3(cpu::bitsFloat(0x7f800001u))), 0x7f);
  EXPECT_EQ(int(cpu::floatToE4M3(0.0f)), 0x00);
  EXPECT_EQ(int(cpu::floatToE4M3(-0.0f)), 0x80);
  EXPECT_EQ(int(cpu::floatToE4M3(1e-30f)), 0x00);
  EXPECT_EQ(int(cpu::floatToE4M3(cpu::bitsFloat(1))), 0x00); // float denormal
}

/// Every 1024th float from 2^-12 to 480 (8192 per binade, both signs;
/// strides of 2^10 ulps hit all E4M3 values and midpoints, which have at
/// most 5 significant bits) against the exhaustive search.
TEST(E4M3, EncodeMatchesNearestSearch) {
  const uint32_t lo = cpu::floatBits(0x1p-12f), hi = cpu::floatBits(480.0f);
  int64_t checked = 0;
  for (uint32_t u = lo; u <= hi; u += 1u << 10) {
    float f = cpu::bitsFloat(u);
    ASSERT_EQ(int(cpu::floatToE4M3(f)), int(nearestCode(f))) << f;
    ASSERT_EQ(int(cpu::floatToE4M3(-f)), int(nearestCode(-f))) << -f;
    ++checked;
  }
  EXPECT_GT(checked, 150000);
}

//===----------------------------------------------------------------------===//
// kiln_k_attention_kvf8
//===----------------------------------------------------------------------===//

struct F32Api : F32Elems {
  static constexpr auto attention = kiln_k_attention_kvf8;
};
struct F16Api : F16Elems {
  static constexpr auto attention = kiln_k_attention_kvf8_f16;
};
struct Bf16Api : Bf16Elems {
  static constexpr auto attention = kiln_k_attention_kvf8_bf16;
};

template <class Api> class Fp8KvKernels : public ::testing::Test {};
using KvTypes = ::testing::Types<F32Api, F16Api, Bf16Api>;
TYPED_TEST_SUITE(Fp8KvKernels, KvTypes, KvName);

const KvShape kShapes[] = {
    {8, 4, 8, 16, {5, 1, 1, 3, 1}},   // GQA, head_dim 8 (stories260K)
    {8, 2, 16, 96, {70, 4, 1, 1, 1}}, // GQA, across 64-row chunks
    {4, 4, 64, 24, {1, 1, 7, 1, 1}},  // MHA, starts with decode
    {8, 1, 64, 40, {12, 1, 1, 1}},    // MQA
};

TYPED_TEST(Fp8KvKernels, AppendMatchesFormula) {
  using Api = TypeParam;
  using T = typename Api::T;
  for (const KvShape &s : kShapes) {
    SCOPED_TRACE(shapeName(s));
    std::mt19937 gen(23);
    const int64_t kvDim = s.kvHeads * s.headDim, qDim = s.heads * s.headDim;
    std::vector<uint8_t> kc(s.maxSeq * kvDim, 0x55), vc(s.maxSeq * kvDim, 0x55);
    std::vector<float> ks(s.maxSeq * s.kvHeads, 12345.0f),
        vs(s.maxSeq * s.kvHeads, 12345.0f);
    std::vector<uint8_t> expK = kc, expV = vc;
    std::vector<float> expKs = ks, expVs = vs;
    int64_t pos = 0;
    float scale = 1.0f / std::sqrt(float(s.headDim));
    for (size_t step = 0; step < s.steps.size(); ++step) {
      int64_t n = s.steps[step];
      // Wide dynamic range: small values land on the subnormal grid.
      auto q = randomInput<Api>(n * qDim, gen);
      auto k = randomInput<Api>(n * kvDim, gen, 3.0f);
      auto v = randomInput<Api>(n * kvDim, gen, 0.01f);
      if (step == 0) {
        // A zero row (scale 0, all codes +0) and a row of exact ties: amax
        // 448 gives scale 1, 1.0625 / 1.1875 / 0.0009765625 (2^-10) are
        // halfway between E4M3 values.
        const float ties[] = {448.0f,    1.0625f,         -1.1875f, 0x1p-10f,
                              -0x1p-10f, 3.0f * 0x1p-10f, 0.0f,     -448.0f};
        for (int64_t d = 0; d < s.headDim; ++d) {
          k.elems[d] = Api::round(0.0f);
          if (s.kvHeads > 1 || n > 1) {
            int64_t base = s.kvHeads > 1 ? s.headDim : kvDim;
            v.elems[base + d] = Api::round(ties[d % 8]);
          }
        }
        for (size_t i = 0; i < k.elems.size(); ++i)
          k.values[i] = Api::widen(k.elems[i]);
        for (size_t i = 0; i < v.elems.size(); ++i)
          v.values[i] = Api::widen(v.elems[i]);
      }
      for (int64_t i = 0; i < n; ++i)
        for (int64_t h = 0; h < s.kvHeads; ++h) {
          int64_t src = i * kvDim + h * s.headDim;
          int64_t dst = (pos + i) * kvDim + h * s.headDim;
          int64_t si = (pos + i) * s.kvHeads + h;
          expKs[si] = refQuantizeFp8(&k.values[src], &expK[dst], s.headDim);
          expVs[si] = refQuantizeFp8(&v.values[src], &expV[dst], s.headDim);
        }
      std::vector<T> out(n * qDim, Api::poison());
      Api::attention(q.elems.data(), k.elems.data(), v.elems.data(), kc.data(),
                     vc.data(), ks.data(), vs.data(), out.data(), n, pos,
                     s.heads, s.kvHeads, s.headDim, s.maxSeq, scale);
      for (size_t i = 0; i < kc.size(); ++i) {
        ASSERT_EQ(int(kc[i]), int(expK[i])) << "k_cache elem " << i;
        ASSERT_EQ(int(vc[i]), int(expV[i])) << "v_cache elem " << i;
      }
      for (size_t i = 0; i < ks.size(); ++i) {
        ASSERT_EQ(cpu::floatBits(ks[i]), cpu::floatBits(expKs[i])) << i;
        ASSERT_EQ(cpu::floatBits(vs[i]), cpu::floatBits(expVs[i])) << i;
      }
      if (step == 0) {
        EXPECT_EQ(ks[pos * s.kvHeads], 0.0f);
        for (int64_t d = 0; d < s.headDim; ++d)
          EXPECT_EQ(int(kc[d]), 0) << d;
        if (s.kvHeads > 1 || n > 1) {
          int64_t base = s.kvHeads > 1 ? s.headDim : kvDim;
          int64_t si = s.kvHeads > 1 ? 1 : s.kvHeads;
          EXPECT_EQ(vs[si], 1.0f);
          const int expect[] = {0x7e, 0x38, 0xba, 0x00, 0x80, 0x02, 0x00, 0xfe};
          for (int64_t d = 0; d < s.headDim; ++d)
            EXPECT_EQ(int(vc[base + d]), expect[d % 8]) << d;
        }
      }
      pos += n;
    }
  }
}

TYPED_TEST(Fp8KvKernels, AttentionMatchesDequantized) {
  using Api = TypeParam;
  using T = typename Api::T;
  for (const KvShape &s : kShapes) {
    SCOPED_TRACE(shapeName(s));
    std::mt19937 gen(31);
    const int64_t kvDim = s.kvHeads * s.headDim, qDim = s.heads * s.headDim;
    std::vector<uint8_t> kc(s.maxSeq * kvDim, 0), vc(s.maxSeq * kvDim, 0);
    std::vector<float> ks(s.maxSeq * s.kvHeads, 0.0f),
        vs(s.maxSeq * s.kvHeads, 0.0f);
    std::vector<float> kOrig(s.maxSeq * kvDim), vOrig(s.maxSeq * kvDim);
    float scale = 1.0f / std::sqrt(float(s.headDim));
    int64_t pos = 0;
    for (int64_t n : s.steps) {
      SCOPED_TRACE("n" + std::to_string(n) + "_pos" + std::to_string(pos));
      auto q = randomInput<Api>(n * qDim, gen);
      auto k = randomInput<Api>(n * kvDim, gen);
      auto v = randomInput<Api>(n * kvDim, gen);
      std::vector<T> out(n * qDim, Api::poison());
      Api::attention(q.elems.data(), k.elems.data(), v.elems.data(), kc.data(),
                     vc.data(), ks.data(), vs.data(), out.data(), n, pos,
                     s.heads, s.kvHeads, s.headDim, s.maxSeq, scale);
      std::vector<float> got(out.size());
      for (size_t i = 0; i < out.size(); ++i)
        got[i] = Api::widen(out[i]);

      std::vector<float> kDq(s.maxSeq * kvDim), vDq(s.maxSeq * kvDim);
      for (int64_t t = 0; t < s.maxSeq; ++t)
        for (int64_t j = 0; j < kvDim; ++j) {
          int64_t h = j / s.headDim;
          kDq[t * kvDim + j] =
              ks[t * s.kvHeads + h] * float(specValue(kc[t * kvDim + j]));
          vDq[t * kvDim + j] =
              vs[t * s.kvHeads + h] * float(specValue(vc[t * kvDim + j]));
        }
      std::vector<float> ref(n * qDim);
      kiln_k_attention(q.values.data(), kDq.data() + pos * kvDim,
                       vDq.data() + pos * kvDim, kDq.data(), vDq.data(),
                       ref.data(), n, pos, s.heads, s.kvHeads, s.headDim,
                       s.maxSeq, scale);
      for (float &r : ref)
        r = Api::widen(Api::round(r));
      EXPECT_LT(relError(got, ref), Api::kTol);

      std::vector<float> ref2(n * qDim);
      kiln_k_attention(q.values.data(), k.values.data(), v.values.data(),
                       kOrig.data(), vOrig.data(), ref2.data(), n, pos, s.heads,
                       s.kvHeads, s.headDim, s.maxSeq, scale);
      EXPECT_LT(relError(got, ref2), 8e-2);
      pos += n;
    }
  }
}

} // namespace
