//===- KernelsKvQuantTest.cpp - attention over an INT8 KV cache -----------===//
//
// kiln_k_attention_kv8{,_f16,_bf16} (kernel_abi.h): (1) the appended cache
// rows and scales equal a test-side implementation of the quantization
// formula exactly, rows outside [pos, pos + n) untouched; (2) the attention
// output equals kiln_k_attention run on float32 caches holding the
// dequantized values scale * q (rel. error max|a - b| / max|b| below 1e-5 for
// f32, 2e-3 f16, 1e-2 bf16: accumulation order and the 16-bit rounding of
// the output only); (3) against kiln_k_attention on the original,
// unquantized K/V the error stays below 2e-2 (the quantization itself is
// sane). Sequences run prefill, then chunked prefill, then decode steps,
// with GQA / MHA / MQA and head_dim 8, 16, 64.
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

struct F32Api : F32Elems {
  static constexpr auto attention = kiln_k_attention_kv8;
};
struct F16Api : F16Elems {
  static constexpr auto attention = kiln_k_attention_kv8_f16;
};
struct Bf16Api : Bf16Elems {
  static constexpr auto attention = kiln_k_attention_kv8_bf16;
};

template <class Api> class KvQuantKernels : public ::testing::Test {};
using KvTypes = ::testing::Types<F32Api, F16Api, Bf16Api>;
TYPED_TEST_SUITE(KvQuantKernels, KvTypes, KvName);

const KvShape kShapes[] = {
    {8, 4, 8, 16, {5, 1, 1, 3, 1}},           // GQA, head_dim 8
    {8, 2, 16, 96, {70, 4, 1, 1, 1}},         // GQA, across 64-row chunks
    {4, 4, 64, 24, {1, 1, 7, 1, 1}},          // MHA, starts with decode
    {8, 1, 64, 40, {12, 1, 1, 1}},            // MQA
    {32, 8, 64, 48, {9, 1, 1}},               // Llama-3-like heads
};

// (1) Appended rows are the formula's q and scales, bit for bit.
TYPED_TEST(KvQuantKernels, KvAppendMatchesFormula) {
  using Api = TypeParam;
  using T = typename Api::T;
  for (const KvShape &s : kShapes) {
    SCOPED_TRACE(shapeName(s));
    std::mt19937 gen(17);
    const int64_t kvDim = s.kvHeads * s.headDim, qDim = s.heads * s.headDim;
    std::vector<int8_t> kc(s.maxSeq * kvDim, int8_t(0x55)),
        vc(s.maxSeq * kvDim, int8_t(0x55));
    std::vector<float> ks(s.maxSeq * s.kvHeads, 12345.0f),
        vs(s.maxSeq * s.kvHeads, 12345.0f);
    std::vector<int8_t> expK = kc, expV = vc;
    std::vector<float> expKs = ks, expVs = vs;
    int64_t pos = 0;
    float scale = 1.0f / std::sqrt(float(s.headDim));
    for (size_t step = 0; step < s.steps.size(); ++step) {
      int64_t n = s.steps[step];
      auto q = randomInput<Api>(n * qDim, gen);
      auto k = randomInput<Api>(n * kvDim, gen);
      auto v = randomInput<Api>(n * kvDim, gen);
      // Special rows in the first step: all zeros (scale 0), and exact ties
      // (amax 127 gives scale 1: +-2.5 -> +-3, +-0.5 -> +-1, 126.5 -> 127).
      if (step == 0) {
        for (int64_t d = 0; d < s.headDim; ++d) {
          k.elems[d] = Api::round(0.0f);
          if (s.kvHeads > 1 || n > 1) {
            int64_t base = s.kvHeads > 1 ? s.headDim : kvDim;
            const float ties[] = {127.0f, 2.5f, -2.5f, 0.5f, -0.5f, 126.5f,
                                  -1.5f, 1.5f};
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
          expKs[si] = refQuantizeInt8(&k.values[src], &expK[dst], s.headDim);
          expVs[si] = refQuantizeInt8(&v.values[src], &expV[dst], s.headDim);
          // Dequantization error at most half a step.
          for (int64_t d = 0; d < s.headDim; ++d) {
            EXPECT_LE(std::fabs(k.values[src + d] - expKs[si] * expK[dst + d]),
                      0.5001f * expKs[si]);
            EXPECT_LE(std::fabs(v.values[src + d] - expVs[si] * expV[dst + d]),
                      0.5001f * expVs[si]);
          }
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
        ASSERT_EQ(cpu::floatBits(ks[i]), cpu::floatBits(expKs[i]))
            << "k_scales " << i;
        ASSERT_EQ(cpu::floatBits(vs[i]), cpu::floatBits(expVs[i]))
            << "v_scales " << i;
      }
      if (step == 0) {
        // The zero row and the tie row really hit their special cases.
        EXPECT_EQ(ks[pos * s.kvHeads], 0.0f);
        if (s.kvHeads > 1 || n > 1) {
          int64_t base = s.kvHeads > 1 ? s.headDim : kvDim;
          int64_t si = s.kvHeads > 1 ? 1 : s.kvHeads;
          EXPECT_EQ(vs[si], 1.0f);
          const int expect[] = {127, 3, -3, 1, -1, 127, -2, 2};
          for (int64_t d = 0; d < s.headDim; ++d)
            EXPECT_EQ(int(vc[base + d]), expect[d % 8]) << d;
        }
      }
      pos += n;
    }
  }
}

// (2) + (3): outputs against kiln_k_attention on dequantized and on original
// float32 caches, over a prefill / chunk / decode sequence.
TYPED_TEST(KvQuantKernels, KvAttentionMatchesDequantized) {
  using Api = TypeParam;
  using T = typename Api::T;
  for (const KvShape &s : kShapes) {
    SCOPED_TRACE(shapeName(s));
    std::mt19937 gen(29);
    const int64_t kvDim = s.kvHeads * s.headDim, qDim = s.heads * s.headDim;
    std::vector<int8_t> kc(s.maxSeq * kvDim, 0), vc(s.maxSeq * kvDim, 0);
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

      // (2) Float32 caches holding the dequantized values; the new rows are
      // passed as k / v (already stored there, aliasing allowed).
      std::vector<float> kDq(s.maxSeq * kvDim), vDq(s.maxSeq * kvDim);
      for (int64_t t = 0; t < s.maxSeq; ++t)
        for (int64_t j = 0; j < kvDim; ++j) {
          int64_t h = j / s.headDim;
          kDq[t * kvDim + j] = ks[t * s.kvHeads + h] * float(kc[t * kvDim + j]);
          vDq[t * kvDim + j] = vs[t * s.kvHeads + h] * float(vc[t * kvDim + j]);
        }
      std::vector<float> ref(n * qDim);
      kiln_k_attention(q.values.data(), kDq.data() + pos * kvDim,
                       vDq.data() + pos * kvDim, kDq.data(), vDq.data(),
                       ref.data(), n, pos, s.heads, s.kvHeads, s.headDim,
                       s.maxSeq, scale);
      for (float &r : ref) // the 16-bit kernels round their output once
        r = Api::widen(Api::round(r));
      EXPECT_LT(relError(got, ref), Api::kTol);

      // (3) The original, unquantized values.
      std::vector<float> ref2(n * qDim);
      kiln_k_attention(q.values.data(), k.values.data(), v.values.data(),
                       kOrig.data(), vOrig.data(), ref2.data(), n, pos,
                       s.heads, s.kvHeads, s.headDim, s.maxSeq, scale);
      EXPECT_LT(relError(got, ref2), 2e-2);
      pos += n;
    }
  }
}

} // namespace
