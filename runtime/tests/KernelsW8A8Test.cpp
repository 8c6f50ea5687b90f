//===- KernelsW8A8Test.cpp - SmoothQuant W8A8 kernels and Highway dispatch ===//
//
// kiln_k_linear_w8a8{,_f16,_bf16} (kernel_abi.h) against a scalar reference
// written from the ABI formula (activation scale, round half away from zero
// by hand, int64 dot products, sx * scale * float(sum) in float): the
// kernels compute the same integers and the same float expression, so the
// outputs must be identical bit for bit, for dynamic per-token and static
// per-tensor activation scales, n = 1 (decode) and n > 1 (prefill), widths
// that are not multiples of any vector length, zero activation rows, zero
// weight rows and clipped static scales. Then the Highway dispatch itself:
// every SIMD level this CPU supports gives exactly the scalar target's W8A8
// results and the scalar target's W8A16 / W4A16 GEMV results up to float
// summation order, and the dispatched target changes with the level.
//
//===----------------------------------------------------------------------===//
#include "SimdLevels.h"
#include "cpu/WholeOpKernels.h"
#include "cpu/Kernels.h"
#include "kiln_rt/kernel_abi.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

using kiln::rt::cpu::SimdLevel;
namespace cpu = kiln::rt::cpu;
using kiln::rt::test::levelName;
using kiln::rt::test::ScopedSimdLevel;
using kiln::rt::test::supportedLevels;

namespace {

/// The W8A8 formula of kernel_abi.h, written here from scratch: float32
/// activations in, float32 results (before any 16-bit rounding) out.
std::vector<float> refW8A8(const std::vector<float> &x,
                           const std::vector<int8_t> &q,
                           const std::vector<float> &scales, int64_t n,
                           int64_t in, int64_t out, float actScale) {
  std::vector<float> y(size_t(n * out));
  std::vector<int> xq(static_cast<size_t>(in));
  for (int64_t r = 0; r < n; ++r) {
    const float *xr = x.data() + r * in;
    float sx = actScale;
    if (actScale == 0.0f) {
      float amax = 0.0f;
      for (int64_t i = 0; i < in; ++i)
        amax = std::max(amax, std::fabs(xr[i]));
      sx = amax / 127.0f;
    }
    for (int64_t i = 0; i < in; ++i) {
      if (sx == 0.0f) {
        xq[size_t(i)] = 0;
        continue;
      }
      float v = xr[i] / sx;
      // Round half away from zero by hand: |v| + 0.5 is exact in double.
      double a = std::floor(std::fabs(double(v)) + 0.5);
      int iv = int(std::min(127.0, a));
      xq[size_t(i)] = v < 0 ? -iv : iv;
    }
    for (int64_t o = 0; o < out; ++o) {
      int64_t acc = 0;
      for (int64_t i = 0; i < in; ++i)
        acc += int64_t(xq[size_t(i)]) * int64_t(q[size_t(o * in + i)]);
      y[size_t(r * out + o)] = sx * scales[size_t(o)] * float(acc);
    }
  }
  return y;
}

struct F32Api {
  using T = float;
  static constexpr const char *kName = "f32";
  static T round(float f) { return f; }
  static float widen(T f) { return f; }
  static uint32_t bits(T f) { return cpu::floatBits(f); }
  static constexpr auto linear = kiln_k_linear_w8a8;
};
struct F16Api {
  using T = kiln_f16_t;
  static constexpr const char *kName = "f16";
  static T round(float f) { return cpu::floatToF16(f); }
  static float widen(T h) { return cpu::f16ToFloat(h); }
  static uint32_t bits(T h) { return h; }
  static constexpr auto linear = kiln_k_linear_w8a8_f16;
};
struct Bf16Api {
  using T = kiln_bf16_t;
  static constexpr const char *kName = "bf16";
  static T round(float f) { return cpu::floatToBf16(f); }
  static float widen(T h) { return cpu::bf16ToFloat(h); }
  static uint32_t bits(T h) { return h; }
  static constexpr auto linear = kiln_k_linear_w8a8_bf16;
};

template <class Api> class W8A8Kernels : public ::testing::Test {};
using Types = ::testing::Types<F32Api, F16Api, Bf16Api>;
class TypeName {
public:
  template <class T> static std::string GetName(int) { return T::kName; }
};
TYPED_TEST_SUITE(W8A8Kernels, Types, TypeName);

struct Shape {
  int64_t n, in, out;
};
/// Decode and prefill; widths below / between / above the int16 vector
/// lengths (8, 16, 32 lanes), odd `out`, > 64-row accumulator blocks.
const Shape kShapes[] = {{1, 1, 1},    {1, 13, 7},     {1, 172, 65},
                         {1, 64, 64},  {1, 1100, 301}, {3, 31, 5},
                         {5, 172, 65}, {17, 333, 130}, {40, 512, 97}};

std::string shapeName(const Shape &s, float actScale) {
  return "n" + std::to_string(s.n) + "_in" + std::to_string(s.in) + "_out" +
         std::to_string(s.out) + (actScale == 0.0f ? "_dynamic" : "_static");
}

struct Problem {
  std::vector<typename F32Api::T> xf; ///< activations as float (widened)
  std::vector<int8_t> q;
  std::vector<float> scales;
};

/// Random int8 weights in [-127, 127] with weight row 1 all zero, random
/// positive scales; activations representable in Api::T with activation row
/// 0 all zero (a zero dynamic scale) and, in row n - 1 when n > 1, an
/// outlier channel (SmoothQuant's reason to exist) that clips under a small
/// static scale.
template <class Api>
Problem makeProblem(const Shape &s, uint32_t seed,
                    std::vector<typename Api::T> &x) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  Problem p;
  p.q.resize(size_t(s.out * s.in));
  for (int8_t &v : p.q)
    v = int8_t(int(gen() % 255) - 127);
  if (s.out > 1)
    std::fill(p.q.begin() + s.in, p.q.begin() + 2 * s.in, int8_t(0));
  p.scales.resize(size_t(s.out));
  for (float &v : p.scales)
    v = 0.001f + std::fabs(dist(gen)) * 0.01f;
  x.resize(size_t(s.n * s.in));
  p.xf.resize(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    float v = dist(gen);
    if (int64_t(i) < s.in)
      v = 0.0f;
    if (s.n > 1 && int64_t(i) == (s.n - 1) * s.in + s.in / 2)
      v = 40.0f;
    x[i] = Api::round(v);
    p.xf[i] = Api::widen(x[i]);
  }
  return p;
}

TYPED_TEST(W8A8Kernels, MatchesFormulaBitForBit) {
  using Api = TypeParam;
  using T = typename Api::T;
  for (SimdLevel level : supportedLevels()) {
    ScopedSimdLevel scoped(level);
    for (const Shape &s : kShapes)
      for (float actScale : {0.0f, 0.02f}) {
        SCOPED_TRACE(std::string(cpu::quantKernelTarget()) + " " +
                     shapeName(s, actScale));
        std::vector<T> x;
        Problem p = makeProblem<Api>(s, 11, x);
        std::vector<float> ref =
            refW8A8(p.xf, p.q, p.scales, s.n, s.in, s.out, actScale);
        std::vector<T> y(ref.size(), Api::round(NAN));
        Api::linear(x.data(), p.q.data(), p.scales.data(), y.data(), s.n, s.in,
                    s.out, actScale);
        for (size_t i = 0; i < y.size(); ++i)
          ASSERT_EQ(Api::bits(y[i]), Api::bits(Api::round(ref[i])))
              << "y[" << i / size_t(s.out) << ", " << i % size_t(s.out)
              << "] = " << Api::widen(y[i]) << ", formula " << ref[i];
        // The zero activation row and the zero weight row give exact zeros.
        for (int64_t o = 0; o < s.out && actScale == 0.0f; ++o)
          EXPECT_EQ(Api::widen(y[size_t(o)]), 0.0f);
        for (int64_t r = 0; r < s.n && s.out > 1; ++r)
          EXPECT_EQ(Api::widen(y[size_t(r * s.out + 1)]), 0.0f);
      }
  }
}

/// The quantization is what SmoothQuant promises: close to the float
/// product on the dequantized weights for ordinary rows (per-token scales).
TEST(W8A8Kernels, CloseToFloatLinear) {
  const Shape s{4, 333, 50};
  std::vector<float> x;
  Problem p = makeProblem<F32Api>(s, 12, x);
  std::vector<float> w(size_t(s.out * s.in));
  for (int64_t o = 0; o < s.out; ++o)
    for (int64_t i = 0; i < s.in; ++i)
      w[size_t(o * s.in + i)] =
          p.scales[size_t(o)] * float(p.q[size_t(o * s.in + i)]);
  std::vector<float> ref(size_t(s.n * s.out)), y(ref.size());
  kiln_k_linear(x.data(), w.data(), ref.data(), s.n, s.in, s.out);
  kiln_k_linear_w8a8(x.data(), p.q.data(), p.scales.data(), y.data(), s.n, s.in,
                     s.out, 0.0f);
  // Rows 1 and 2 have no outlier: error about sqrt(in) * step / 2.
  for (int64_t r = 1; r < 3; ++r) {
    double maxDiff = 0, maxRef = 0;
    for (int64_t o = 0; o < s.out; ++o) {
      size_t at = size_t(r * s.out + o);
      maxDiff = std::max(maxDiff, std::fabs(double(y[at]) - ref[at]));
      maxRef = std::max(maxRef, std::fabs(double(ref[at])));
    }
    EXPECT_LT(maxDiff / maxRef, 2e-2) << "row " << r;
  }
}

TEST(W8A8Kernels, EmptyShapes) {
  std::vector<int8_t> q(8, 1);
  std::vector<float> scales(4, 1.0f), x(8, 1.0f), y(8, -1.0f);
  kiln_k_linear_w8a8(x.data(), q.data(), scales.data(), y.data(), 0, 4, 2, 0);
  kiln_k_linear_w8a8(x.data(), q.data(), scales.data(), y.data(), 1, 4, 0, 0);
  for (float v : y)
    EXPECT_EQ(v, -1.0f);
  kiln_k_linear_w8a8(x.data(), q.data(), scales.data(), y.data(), 2, 0, 4, 0);
  for (float v : y)
    EXPECT_EQ(v, 0.0f);
}

//===----------------------------------------------------------------------===//
// Highway dispatch: every target against the scalar one
//===----------------------------------------------------------------------===//

TEST(HighwayDispatch, TargetFollowsSimdLevel) {
#ifdef HWY_COMPILE_ONLY_STATIC
  GTEST_SKIP() << "built with HWY_COMPILE_ONLY_STATIC (scripts/test.sh's "
                  "sanitizer build): one Highway target, nothing to dispatch";
#endif
  std::vector<std::string> names;
  for (SimdLevel level : supportedLevels()) {
    ScopedSimdLevel scoped(level);
    names.push_back(cpu::quantKernelTarget());
  }
  EXPECT_EQ(names.front(), "SCALAR");
  if (cpu::maxSimdLevel() >= SimdLevel::Avx2) {
    EXPECT_EQ(names[1], "AVX2");
  }
  if (cpu::maxSimdLevel() >= SimdLevel::Avx512) {
    EXPECT_EQ(names[2], "AVX3");
  }
}

TEST(HighwayDispatch, W8A8EqualsScalarTarget) {
  for (const Shape &s : kShapes)
    for (float actScale : {0.0f, 0.02f}) {
      SCOPED_TRACE(shapeName(s, actScale));
      std::vector<float> x;
      Problem p = makeProblem<F32Api>(s, 13, x);
      std::vector<float> scalar(size_t(s.n * s.out));
      {
        ScopedSimdLevel scoped(SimdLevel::Generic);
        kiln_k_linear_w8a8(x.data(), p.q.data(), p.scales.data(), scalar.data(),
                           s.n, s.in, s.out, actScale);
      }
      std::vector<int32_t> accScalar(size_t(s.n * s.out));
      std::vector<int8_t> xq(size_t(s.n * s.in));
      for (int64_t r = 0; r < s.n; ++r)
        cpu::quantizeActivationRow(x.data() + r * s.in, xq.data() + r * s.in,
                                   s.in, actScale);
      {
        ScopedSimdLevel scoped(SimdLevel::Generic);
        cpu::gemmRowsI8I8(xq.data(), s.n, p.q.data(), s.in, s.out,
                          accScalar.data());
      }
      for (SimdLevel level : supportedLevels()) {
        ScopedSimdLevel scoped(level);
        SCOPED_TRACE(cpu::quantKernelTarget());
        std::vector<float> y(scalar.size(), NAN);
        kiln_k_linear_w8a8(x.data(), p.q.data(), p.scales.data(), y.data(), s.n,
                           s.in, s.out, actScale);
        EXPECT_EQ(std::memcmp(y.data(), scalar.data(), 4 * y.size()), 0);
        std::vector<int32_t> acc(accScalar.size(), -1);
        cpu::gemmRowsI8I8(xq.data(), s.n, p.q.data(), s.in, s.out, acc.data());
        EXPECT_EQ(acc, accScalar);
      }
    }
}

/// The float GEMVs on every target against the scalar target: equal up to
/// float summation order (1e-6 of the sum of |terms|).
TEST(HighwayDispatch, FloatGemvsMatchScalarTarget) {
  std::mt19937 gen(14);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (int64_t in : {1, 7, 16, 33, 172, 333, 1100})
    for (int64_t gs : {0, 32, 6}) {
      SCOPED_TRACE("in " + std::to_string(in) + " group " + std::to_string(gs));
      const int64_t rows = 9, groups = gs > 0 ? (in + gs - 1) / gs : 1;
      const int64_t gs4 = gs > 0 ? gs : 128, groups4 = (in + gs4 - 1) / gs4;
      std::vector<float> x(static_cast<size_t>(in)), s8(size_t(rows * groups)),
          s4(size_t(rows * groups4));
      std::vector<int8_t> q8(size_t(rows * in)),
          q4(size_t(rows * cpu::q4RowBytes(in))), z4(size_t(rows * groups4));
      for (float &v : x)
        v = dist(gen);
      for (float &v : s8)
        v = std::fabs(dist(gen)) * 0.01f;
      for (float &v : s4)
        v = std::fabs(dist(gen)) * 0.01f;
      for (int8_t &v : q8)
        v = int8_t(int(gen() % 255) - 127);
      for (int8_t &v : q4)
        v = int8_t(gen() & 0xff);
      for (int8_t &v : z4)
        v = int8_t(gen() % 16);
      auto bound = [&](int64_t r) { // sum of |terms| of row r (8-bit)
        double m = 0;
        for (int64_t i = 0; i < in; ++i)
          m += std::fabs(double(x[size_t(i)]) * q8[size_t(r * in + i)]);
        return m;
      };
      std::vector<float> y8(static_cast<size_t>(rows)),
          y4(static_cast<size_t>(rows));
      {
        ScopedSimdLevel scoped(SimdLevel::Generic);
        cpu::gemvRowsI8(x.data(), q8.data(), s8.data(), y8.data(), in, rows,
                        gs);
        cpu::gemvRowsQ4(x.data(), q4.data(), s4.data(), z4.data(), y4.data(),
                        in, rows, gs4);
      }
      for (SimdLevel level : supportedLevels()) {
        ScopedSimdLevel scoped(level);
        SCOPED_TRACE(cpu::quantKernelTarget());
        std::vector<float> g8(size_t(rows), NAN), g4(size_t(rows), NAN);
        cpu::gemvRowsI8(x.data(), q8.data(), s8.data(), g8.data(), in, rows,
                        gs);
        cpu::gemvRowsQ4(x.data(), q4.data(), s4.data(), z4.data(), g4.data(),
                        in, rows, gs4);
        for (int64_t r = 0; r < rows; ++r) {
          double smax = 0;
          for (int64_t g = 0; g < groups; ++g)
            smax = std::max(smax, double(s8[size_t(r * groups + g)]));
          EXPECT_NEAR(g8[size_t(r)], y8[size_t(r)], 1e-6 * smax * bound(r))
              << "w8 row " << r;
          double s4max = 0;
          for (int64_t g = 0; g < groups4; ++g)
            s4max = std::max(s4max, double(s4[size_t(r * groups4 + g)]));
          double m4 = 0;
          for (int64_t i = 0; i < in; ++i)
            m4 += std::fabs(x[size_t(i)]) * 15.0;
          EXPECT_NEAR(g4[size_t(r)], y4[size_t(r)], 1e-6 * s4max * m4)
              << "w4 row " << r;
        }
      }
    }
}

} // namespace
