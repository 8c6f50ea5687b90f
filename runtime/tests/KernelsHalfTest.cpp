//===- KernelsHalfTest.cpp - f16 / bf16 kernels vs the float32 ones -------===//
//
// The 16-bit kernels of kiln_rt/kernel_abi.h against the float32 kernels run
// on the same (exactly widened) inputs with their outputs rounded to the
// 16-bit type: only float accumulation order may differ, so the relative
// error max|a - b| / max|b| stays below 2e-3 (f16) / 1e-2 (bf16). Conversions
// are checked bit for bit, at every SIMD level this CPU supports.
//
//===----------------------------------------------------------------------===//
#include "SimdLevels.h"
#include "cpu/WholeOpKernels.h"
#include "cpu/Kernels.h"
#include "kiln_rt/kernel_abi.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <ostream>
#include <random>
#include <string>
#include <vector>

using kiln::rt::cpu::SimdLevel;
namespace cpu = kiln::rt::cpu;
using kiln::rt::test::levelName;
using kiln::rt::test::ScopedSimdLevel;
using kiln::rt::test::supportedLevels;

namespace {

/// The f16 entry points and conversions.
struct F16Api {
  static constexpr const char *kName = "f16";
  static constexpr double kTol = 2e-3;
  static uint16_t round(float f) { return cpu::floatToF16(f); }
  static float widen(uint16_t h) { return cpu::f16ToFloat(h); }
  static constexpr auto embedding = kiln_k_embedding_f16;
  static constexpr auto rmsNorm = kiln_k_rms_norm_f16;
  static constexpr auto linear = kiln_k_linear_f16;
  static constexpr auto linearF32 = kiln_k_linear_f16_f32;
  static constexpr auto rope = kiln_k_rope_f16;
  static constexpr auto attention = kiln_k_attention_f16;
  static constexpr auto swiglu = kiln_k_swiglu_f16;
  static constexpr auto silu = kiln_k_silu_f16;
  static constexpr auto add = kiln_k_add_f16;
  static constexpr auto mul = kiln_k_mul_f16;
};

/// The bf16 entry points and conversions.
struct Bf16Api {
  static constexpr const char *kName = "bf16";
  static constexpr double kTol = 1e-2;
  static uint16_t round(float f) { return cpu::floatToBf16(f); }
  static float widen(uint16_t h) { return cpu::bf16ToFloat(h); }
  static constexpr auto embedding = kiln_k_embedding_bf16;
  static constexpr auto rmsNorm = kiln_k_rms_norm_bf16;
  static constexpr auto linear = kiln_k_linear_bf16;
  static constexpr auto linearF32 = kiln_k_linear_bf16_f32;
  static constexpr auto rope = kiln_k_rope_bf16;
  static constexpr auto attention = kiln_k_attention_bf16;
  static constexpr auto swiglu = kiln_k_swiglu_bf16;
  static constexpr auto silu = kiln_k_silu_bf16;
  static constexpr auto add = kiln_k_add_bf16;
  static constexpr auto mul = kiln_k_mul_bf16;
};

/// Random values already representable in the 16-bit type of Api: the bits
/// (for the 16-bit kernel) and the same values as float (for the f32 one).
template <class Api> struct Input {
  std::vector<uint16_t> bits;
  std::vector<float> values;
};
template <class Api>
Input<Api> randomInput(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  Input<Api> in;
  in.bits.resize(n);
  in.values.resize(n);
  for (size_t i = 0; i < n; ++i) {
    in.bits[i] = Api::round(dist(gen));
    in.values[i] = Api::widen(in.bits[i]);
  }
  return in;
}

template <class Api>
std::vector<float> widenAll(const std::vector<uint16_t> &b) {
  std::vector<float> f(b.size());
  for (size_t i = 0; i < b.size(); ++i)
    f[i] = Api::widen(b[i]);
  return f;
}

/// The float32 result as the 16-bit kernel must produce it: rounded once.
template <class Api> std::vector<float> roundAll(const std::vector<float> &f) {
  std::vector<float> r(f.size());
  for (size_t i = 0; i < f.size(); ++i)
    r[i] = Api::widen(Api::round(f[i]));
  return r;
}

/// max |got - ref| / max |ref|.
double relError(const std::vector<float> &got, const std::vector<float> &ref) {
  EXPECT_EQ(got.size(), ref.size());
  double maxDiff = 0, maxRef = 1e-30;
  for (size_t i = 0; i < got.size() && i < ref.size(); ++i) {
    if (std::isnan(got[i]) != std::isnan(ref[i]))
      return INFINITY;
    maxDiff = std::max(maxDiff, std::fabs(double(got[i]) - double(ref[i])));
    maxRef = std::max(maxRef, std::fabs(double(ref[i])));
  }
  return maxDiff / maxRef;
}

//===----------------------------------------------------------------------===//
// Conversions
//===----------------------------------------------------------------------===//

uint32_t bitsOf(float f) { return cpu::floatBits(f); }

TEST(HalfConvert, F16Widen) {
  EXPECT_EQ(cpu::f16ToFloat(0x3c00), 1.0f);
  EXPECT_EQ(cpu::f16ToFloat(0xc000), -2.0f);
  EXPECT_EQ(cpu::f16ToFloat(0x7bff), 65504.0f);
  EXPECT_EQ(cpu::f16ToFloat(0x0400), 0x1p-14f);            // smallest normal
  EXPECT_EQ(cpu::f16ToFloat(0x0001), 0x1p-24f);            // smallest subnormal
  EXPECT_EQ(cpu::f16ToFloat(0x03ff), 1023 * 0x1p-24f);     // largest subnormal
  EXPECT_EQ(bitsOf(cpu::f16ToFloat(0x8000)), 0x80000000u); // -0
  EXPECT_EQ(cpu::f16ToFloat(0x7c00), INFINITY);
  EXPECT_EQ(cpu::f16ToFloat(0xfc00), -INFINITY);
  EXPECT_TRUE(std::isnan(cpu::f16ToFloat(0x7e00)));
  EXPECT_TRUE(std::isnan(cpu::f16ToFloat(0x7c01))); // signalling
  EXPECT_TRUE(std::isnan(cpu::f16ToFloat(0xfd00)));
  // Every finite f16 survives a round trip.
  for (uint32_t h = 0; h < 0x10000; ++h)
    if ((h & 0x7c00) != 0x7c00)
      ASSERT_EQ(cpu::floatToF16(cpu::f16ToFloat(uint16_t(h))), h) << h;
#ifdef __FLT16_MAX__
  for (uint32_t h = 0; h < 0x10000; ++h) {
    uint16_t b = uint16_t(h);
    _Float16 ref;
    std::memcpy(&ref, &b, 2);
    float want = float(ref);
    if (std::isnan(want))
      ASSERT_TRUE(std::isnan(cpu::f16ToFloat(b))) << h;
    else
      ASSERT_EQ(bitsOf(cpu::f16ToFloat(b)), bitsOf(want)) << h;
  }
#endif
}

TEST(HalfConvert, F16RoundToNearestEven) {
  EXPECT_EQ(cpu::floatToF16(1.0f), 0x3c00);
  EXPECT_EQ(cpu::floatToF16(1.0f + 0x1p-11f), 0x3c00);     // tie -> even
  EXPECT_EQ(cpu::floatToF16(1.0f + 3 * 0x1p-11f), 0x3c02); // tie -> even
  EXPECT_EQ(cpu::floatToF16(1.0f + 0x1p-11f + 0x1p-20f), 0x3c01);
  EXPECT_EQ(cpu::floatToF16(-1.0f - 0x1p-11f), 0xbc00);
  EXPECT_EQ(cpu::floatToF16(65504.0f), 0x7bff);
  EXPECT_EQ(cpu::floatToF16(65519.0f), 0x7bff);
  EXPECT_EQ(cpu::floatToF16(65520.0f), 0x7c00); // tie with 2^16 -> inf
  EXPECT_EQ(cpu::floatToF16(1e10f), 0x7c00);
  EXPECT_EQ(cpu::floatToF16(-1e10f), 0xfc00);
  EXPECT_EQ(cpu::floatToF16(INFINITY), 0x7c00);
  EXPECT_EQ(cpu::floatToF16(-INFINITY), 0xfc00);
  EXPECT_EQ(cpu::floatToF16(-0.0f), 0x8000);
  // Subnormals (step 2^-24).
  EXPECT_EQ(cpu::floatToF16(0x1p-24f), 0x0001);
  EXPECT_EQ(cpu::floatToF16(0x1p-25f), 0x0000); // tie -> even 0
  EXPECT_EQ(cpu::floatToF16(0x1p-25f * 1.0001f), 0x0001);
  EXPECT_EQ(cpu::floatToF16(3 * 0x1p-25f), 0x0002); // tie -> even
  EXPECT_EQ(cpu::floatToF16(5 * 0x1p-25f), 0x0002); // tie -> even
  EXPECT_EQ(cpu::floatToF16(-0x1p-24f), 0x8001);
  EXPECT_EQ(cpu::floatToF16(0x1p-14f - 0x1p-25f), 0x0400); // up to normal
  EXPECT_EQ(cpu::floatToF16(0x1p-14f - 0x1p-24f), 0x03ff);
  EXPECT_EQ(cpu::floatToF16(1e-30f), 0x0000);
  EXPECT_EQ(cpu::floatToF16(-1e-40f), 0x8000); // float subnormal
  // NaN stays NaN, sign kept, even with only low payload bits.
  float nanLow = cpu::bitsFloat(0x7f800001u);
  EXPECT_EQ(cpu::floatToF16(NAN) & 0x7e00, 0x7e00);
  EXPECT_EQ(cpu::floatToF16(nanLow) & 0x7e00, 0x7e00);
  EXPECT_EQ(cpu::floatToF16(-NAN) & 0x8000, 0x8000);
#ifdef __FLT16_MAX__
  // Against the compiler's conversion on random bit patterns.
  std::mt19937 gen(21);
  for (int i = 0; i < 1000000; ++i) {
    float f = cpu::bitsFloat(uint32_t(gen()));
    if (std::isnan(f))
      continue;
    _Float16 ref = _Float16(f);
    uint16_t want;
    std::memcpy(&want, &ref, 2);
    ASSERT_EQ(cpu::floatToF16(f), want) << f;
  }
#endif
}

TEST(HalfConvert, Bf16) {
  EXPECT_EQ(cpu::bf16ToFloat(0x3f80), 1.0f);
  EXPECT_EQ(cpu::bf16ToFloat(0x0001), 0x1p-133f); // float subnormal, exact
  EXPECT_EQ(cpu::floatToBf16(1.0f), 0x3f80);
  EXPECT_EQ(cpu::floatToBf16(1.0f + 0x1p-8f), 0x3f80);     // tie -> even
  EXPECT_EQ(cpu::floatToBf16(1.0f + 3 * 0x1p-8f), 0x3f82); // tie -> even
  EXPECT_EQ(cpu::floatToBf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);
  EXPECT_EQ(cpu::floatToBf16(-1.0f - 0x1p-8f), 0xbf80);
  EXPECT_EQ(cpu::floatToBf16(std::numeric_limits<float>::max()), 0x7f80);
  EXPECT_EQ(cpu::floatToBf16(-std::numeric_limits<float>::max()), 0xff80);
  EXPECT_EQ(cpu::floatToBf16(INFINITY), 0x7f80);
  EXPECT_EQ(cpu::floatToBf16(-0.0f), 0x8000);
  EXPECT_EQ(cpu::floatToBf16(cpu::bitsFloat(0x00018000u)),
            0x0002); // subnormal tie
  EXPECT_EQ(cpu::floatToBf16(cpu::bitsFloat(0x00008000u)), 0x0000);
  // NaN stays NaN: truncating 0x7f800001 would give inf.
  for (uint32_t nan : {0x7f800001u, 0x7fc00000u, 0xff800001u, 0x7fffffffu}) {
    uint16_t b = cpu::floatToBf16(cpu::bitsFloat(nan));
    EXPECT_TRUE(std::isnan(cpu::bf16ToFloat(b))) << std::hex << nan;
    EXPECT_EQ(b & 0x8000, (nan >> 16) & 0x8000);
  }
  for (uint32_t h = 0; h < 0x10000; ++h)
    if ((h & 0x7f80) != 0x7f80 || (h & 0x7f) == 0) // all but NaNs
      ASSERT_EQ(cpu::floatToBf16(cpu::bf16ToFloat(uint16_t(h))), h) << h;
}

/// Vector conversions equal the scalar ones bit for bit at every level,
/// including NaN payloads, infinities, subnormals and odd lengths.
TEST(HalfConvert, SimdMatchesScalar) {
  std::vector<uint16_t> all(0x10000);
  for (uint32_t h = 0; h < 0x10000; ++h)
    all[h] = uint16_t(h);
  std::mt19937 gen(22);
  std::vector<float> floats(200003);
  for (size_t i = 0; i < floats.size(); ++i)
    floats[i] = cpu::bitsFloat(uint32_t(gen()));
  // Plus values near f16 / bf16 rounding boundaries and special cases.
  for (uint32_t h = 0; h < 0x10000; h += 7) {
    float f = cpu::f16ToFloat(uint16_t(h));
    floats.push_back(f);
    floats.push_back(std::nextafter(f, INFINITY));
    floats.push_back(cpu::bitsFloat(cpu::floatBits(f) + 0x1000)); // f16 tie
    floats.push_back(cpu::bitsFloat((h << 16) | 0x8000));         // bf16 tie
  }
  for (float f : {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 65520.0f, 0x1p-25f})
    floats.push_back(f);
  for (SimdLevel level : supportedLevels()) {
    SCOPED_TRACE(levelName(level));
    ScopedSimdLevel scoped(level);
    std::vector<float> wide(all.size() - 3);
    cpu::widenF16(all.data() + 3, wide.data(), int64_t(wide.size()));
    for (size_t i = 0; i < wide.size(); ++i)
      ASSERT_EQ(bitsOf(wide[i]), bitsOf(cpu::f16ToFloat(all[i + 3]))) << i;
    cpu::widenBf16(all.data() + 3, wide.data(), int64_t(wide.size()));
    for (size_t i = 0; i < wide.size(); ++i)
      ASSERT_EQ(bitsOf(wide[i]), bitsOf(cpu::bf16ToFloat(all[i + 3]))) << i;
    std::vector<uint16_t> narrow(floats.size());
    cpu::narrowF16(floats.data(), narrow.data(), int64_t(narrow.size()));
    for (size_t i = 0; i < narrow.size(); ++i)
      ASSERT_EQ(narrow[i], cpu::floatToF16(floats[i]))
          << std::hex << bitsOf(floats[i]);
    cpu::narrowBf16(floats.data(), narrow.data(), int64_t(narrow.size()));
    for (size_t i = 0; i < narrow.size(); ++i)
      ASSERT_EQ(narrow[i], cpu::floatToBf16(floats[i]))
          << std::hex << bitsOf(floats[i]);
  }
}

//===----------------------------------------------------------------------===//
// Kernels
//===----------------------------------------------------------------------===//

template <class Api> class HalfKernels : public ::testing::Test {};
using HalfTypes = ::testing::Types<F16Api, Bf16Api>;
class HalfName {
public:
  template <class T> static std::string GetName(int) { return T::kName; }
};
TYPED_TEST_SUITE(HalfKernels, HalfTypes, HalfName);

TYPED_TEST(HalfKernels, Embedding) {
  using Api = TypeParam;
  const int64_t vocab = 37, dim = 19;
  auto table = randomInput<Api>(vocab * dim, 1);
  std::vector<int32_t> tokens = {0, 36, 5, 5, 17};
  std::vector<uint16_t> out(tokens.size() * dim);
  Api::embedding(tokens.data(), int64_t(tokens.size()), table.bits.data(),
                 vocab, dim, out.data());
  for (size_t i = 0; i < tokens.size(); ++i)
    for (int64_t j = 0; j < dim; ++j)
      EXPECT_EQ(out[i * dim + j], table.bits[tokens[i] * dim + j]);
}

TYPED_TEST(HalfKernels, RmsNorm) {
  using Api = TypeParam;
  for (auto [n, dim] :
       {std::pair<int64_t, int64_t>{1, 64}, {7, 291}, {33, 4096}}) {
    SCOPED_TRACE("n " + std::to_string(n) + " dim " + std::to_string(dim));
    const float eps = 1e-5f;
    auto x = randomInput<Api>(n * dim, 2, 3.0f);
    auto w = randomInput<Api>(dim, 3);
    std::vector<float> ref(n * dim);
    kiln_k_rms_norm(x.values.data(), w.values.data(), ref.data(), n, dim, eps);
    ref = roundAll<Api>(ref);
    std::vector<uint16_t> y(n * dim);
    Api::rmsNorm(x.bits.data(), w.bits.data(), y.data(), n, dim, eps);
    EXPECT_LT(relError(widenAll<Api>(y), ref), Api::kTol);
    // In place.
    Api::rmsNorm(x.bits.data(), w.bits.data(), x.bits.data(), n, dim, eps);
    EXPECT_LT(relError(widenAll<Api>(x.bits), ref), Api::kTol);
  }
}

struct LinearShape {
  int64_t n, in, out;
};

TYPED_TEST(HalfKernels, Linear) {
  using Api = TypeParam;
  const LinearShape shapes[] = {
      {1, 64, 64},     {1, 13, 7},     {1, 172, 65},    {1, 1100, 300},
      {1, 4096, 1000}, {1, 11008, 37}, {1, 4103, 129},  {2, 64, 32},
      {5, 13, 7},      {5, 172, 64},   {17, 1100, 300}, {64, 512, 1024}};
  for (SimdLevel level : supportedLevels()) {
    ScopedSimdLevel scoped(level);
    for (const LinearShape &s : shapes) {
      SCOPED_TRACE(std::string(levelName(level)) + " n" + std::to_string(s.n) +
                   "_in" + std::to_string(s.in) + "_out" +
                   std::to_string(s.out));
      if (level != cpu::maxSimdLevel() && s.in * s.out > 1 << 20)
        continue; // large shapes once, at the level in use
      auto x = randomInput<Api>(s.n * s.in, 4);
      auto w = randomInput<Api>(s.out * s.in, 5, 0.1f);
      std::vector<float> ref(s.n * s.out);
      kiln_k_linear(x.values.data(), w.values.data(), ref.data(), s.n, s.in,
                    s.out);
      // Classifier: float32 logits, compared unrounded.
      std::vector<float> logits(s.n * s.out, -1.0f);
      Api::linearF32(x.bits.data(), w.bits.data(), logits.data(), s.n, s.in,
                     s.out);
      EXPECT_LT(relError(logits, ref), 1e-5);
      std::vector<uint16_t> y(s.n * s.out, 0xffff);
      Api::linear(x.bits.data(), w.bits.data(), y.data(), s.n, s.in, s.out);
      EXPECT_LT(relError(widenAll<Api>(y), roundAll<Api>(ref)), Api::kTol);
    }
  }
}

struct RopeShape {
  int64_t n, heads, headDim, rotDim, pos;
};

TYPED_TEST(HalfKernels, Rope) {
  using Api = TypeParam;
  const RopeShape shapes[] = {{1, 8, 8, 8, 0},
                              {1, 4, 8, 8, 37},
                              {5, 8, 8, 8, 3},
                              {3, 2, 16, 8, 11}, // partial rotation
                              {9, 32, 128, 128, 500}};
  const float theta = 10000.0f;
  for (const RopeShape &s : shapes) {
    SCOPED_TRACE("n" + std::to_string(s.n) + "_pos" + std::to_string(s.pos));
    int64_t width = s.heads * s.headDim;
    auto x = randomInput<Api>(s.n * width, 6);
    std::vector<float> ref(x.values.size());
    kiln_k_rope(x.values.data(), ref.data(), s.n, s.heads, s.headDim, s.rotDim,
                s.pos, theta);
    ref = roundAll<Api>(ref);
    std::vector<uint16_t> y(x.bits.size());
    Api::rope(x.bits.data(), y.data(), s.n, s.heads, s.headDim, s.rotDim, s.pos,
              theta);
    EXPECT_LT(relError(widenAll<Api>(y), ref), Api::kTol);
    // Pass-through dimensions are copied exactly.
    for (int64_t r = 0; r < s.n; ++r)
      for (int64_t h = 0; h < s.heads; ++h)
        for (int64_t j = s.rotDim; j < s.headDim; ++j) {
          int64_t at = r * width + h * s.headDim + j;
          ASSERT_EQ(y[at], x.bits[at]);
        }
    // In place.
    Api::rope(x.bits.data(), x.bits.data(), s.n, s.heads, s.headDim, s.rotDim,
              s.pos, theta);
    EXPECT_LT(relError(widenAll<Api>(x.bits), ref), Api::kTol);
  }
}

struct AttnShape {
  int64_t n, pos, heads, kvHeads, headDim, maxSeq;
};

TYPED_TEST(HalfKernels, Attention) {
  using Api = TypeParam;
  const AttnShape shapes[] = {
      {1, 0, 8, 4, 8, 16},       // first token, GQA
      {1, 9, 8, 4, 8, 16},       // decode, pos > 0
      {5, 0, 8, 4, 8, 16},       // prefill
      {4, 6, 8, 4, 8, 16},       // chunked prefill
      {3, 2, 4, 4, 16, 8},       // MHA
      {2, 5, 8, 1, 8, 12},       // MQA
      {1, 150, 8, 2, 24, 160},   // decode across several converted chunks
      {7, 100, 32, 8, 128, 128}, // Llama-3 shape
  };
  for (const AttnShape &s : shapes) {
    SCOPED_TRACE("n" + std::to_string(s.n) + "_pos" + std::to_string(s.pos) +
                 "_h" + std::to_string(s.heads) + "_kvh" +
                 std::to_string(s.kvHeads));
    int64_t qDim = s.heads * s.headDim, kvDim = s.kvHeads * s.headDim;
    float scale = 1.0f / std::sqrt(float(s.headDim));
    auto q = randomInput<Api>(s.n * qDim, 7);
    auto k = randomInput<Api>(s.n * kvDim, 8);
    auto v = randomInput<Api>(s.n * kvDim, 9);
    auto kCache = randomInput<Api>(s.maxSeq * kvDim, 10);
    auto vCache = randomInput<Api>(s.maxSeq * kvDim, 11);
    std::vector<float> ref(s.n * qDim);
    std::vector<float> kRef = kCache.values, vRef = vCache.values;
    kiln_k_attention(q.values.data(), k.values.data(), v.values.data(),
                     kRef.data(), vRef.data(), ref.data(), s.n, s.pos, s.heads,
                     s.kvHeads, s.headDim, s.maxSeq, scale);
    ref = roundAll<Api>(ref);
    std::vector<uint16_t> kc = kCache.bits, vc = vCache.bits;
    std::vector<uint16_t> out(s.n * qDim);
    Api::attention(q.bits.data(), k.bits.data(), v.bits.data(), kc.data(),
                   vc.data(), out.data(), s.n, s.pos, s.heads, s.kvHeads,
                   s.headDim, s.maxSeq, scale);
    // New rows appended unchanged, the rest untouched.
    for (int64_t t = 0; t < s.maxSeq; ++t)
      for (int64_t d = 0; d < kvDim; ++d) {
        bool isNew = t >= s.pos && t < s.pos + s.n;
        uint16_t ek = isNew ? k.bits[(t - s.pos) * kvDim + d]
                            : kCache.bits[t * kvDim + d];
        uint16_t ev = isNew ? v.bits[(t - s.pos) * kvDim + d]
                            : vCache.bits[t * kvDim + d];
        ASSERT_EQ(kc[t * kvDim + d], ek) << "k_cache row " << t;
        ASSERT_EQ(vc[t * kvDim + d], ev) << "v_cache row " << t;
      }
    EXPECT_LT(relError(widenAll<Api>(out), ref), Api::kTol);
    // K/V written straight into the cache by the caller (aliasing allowed).
    std::vector<uint16_t> out2(out.size());
    Api::attention(q.bits.data(), kc.data() + s.pos * kvDim,
                   vc.data() + s.pos * kvDim, kc.data(), vc.data(), out2.data(),
                   s.n, s.pos, s.heads, s.kvHeads, s.headDim, s.maxSeq, scale);
    EXPECT_EQ(out2, out);
  }
}

TYPED_TEST(HalfKernels, Elementwise) {
  using Api = TypeParam;
  for (int64_t count :
       {int64_t(13), int64_t(100003)}) { // odd; below/above threading
    SCOPED_TRACE(count);
    auto a = randomInput<Api>(count, 12, 4.0f);
    auto b = randomInput<Api>(count, 13);
    std::vector<float> ref(count);
    std::vector<uint16_t> y(count);

    kiln_k_swiglu(a.values.data(), b.values.data(), ref.data(), count);
    Api::swiglu(a.bits.data(), b.bits.data(), y.data(), count);
    EXPECT_LT(relError(widenAll<Api>(y), roundAll<Api>(ref)), Api::kTol);

    kiln_k_silu(a.values.data(), ref.data(), count);
    Api::silu(a.bits.data(), y.data(), count);
    EXPECT_LT(relError(widenAll<Api>(y), roundAll<Api>(ref)), Api::kTol);

    // One rounding of an exact float operation: bit-exact.
    kiln_k_add(a.values.data(), b.values.data(), ref.data(), count);
    Api::add(a.bits.data(), b.bits.data(), y.data(), count);
    for (int64_t i = 0; i < count; ++i)
      ASSERT_EQ(y[i], Api::round(ref[i])) << i;
    kiln_k_mul(a.values.data(), b.values.data(), ref.data(), count);
    Api::mul(a.bits.data(), b.bits.data(), y.data(), count);
    for (int64_t i = 0; i < count; ++i)
      ASSERT_EQ(y[i], Api::round(ref[i])) << i;
    // In place.
    Api::add(a.bits.data(), b.bits.data(), a.bits.data(), count);
    kiln_k_add(a.values.data(), b.values.data(), ref.data(), count);
    for (int64_t i = 0; i < count; ++i)
      ASSERT_EQ(a.bits[i], Api::round(ref[i])) << i;
  }
}

/// The 16-bit decode GEMV at every SIMD level against a double reference on
/// the widened weights (covers the 4-row blocks and all tails).
TEST(HalfGemv, AllSimdLevels) {
  for (int64_t in : {1, 7, 8, 15, 16, 17, 31, 32, 33, 47, 64, 257}) {
    for (int64_t rows : {1, 3, 4, 5, 9}) {
      auto x = randomInput<F16Api>(in, 30);
      auto wh = randomInput<F16Api>(rows * in, 31);
      auto wb = randomInput<Bf16Api>(rows * in, 31);
      for (SimdLevel level : supportedLevels()) {
        SCOPED_TRACE(std::string(levelName(level)) + " in " +
                     std::to_string(in) + " rows " + std::to_string(rows));
        ScopedSimdLevel scoped(level);
        std::vector<float> yh(rows), yb(rows);
        cpu::gemvRowsF16(x.values.data(), wh.bits.data(), yh.data(), in, rows);
        cpu::gemvRowsBf16(x.values.data(), wb.bits.data(), yb.data(), in, rows);
        for (int64_t r = 0; r < rows; ++r) {
          double refH = 0, refB = 0, mag = 0;
          for (int64_t j = 0; j < in; ++j) {
            refH += double(x.values[j]) * wh.values[r * in + j];
            refB += double(x.values[j]) * wb.values[r * in + j];
            mag += std::fabs(double(x.values[j]) * wh.values[r * in + j]);
          }
          EXPECT_NEAR(yh[r], refH, 1e-6 * (mag + 1)) << "row " << r;
          EXPECT_NEAR(yb[r], refB, 1e-5 * (mag + 1)) << "row " << r;
        }
      }
    }
  }
}

} // namespace
