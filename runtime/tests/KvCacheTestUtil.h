//===- KvCacheTestUtil.h - Shared helpers of the 8-bit KV cache tests -*- C++
//-*-===//
//
// What the INT8, FP8 and centered KV cache kernel tests share: the element
// types under test, random inputs representable in them, the relative error
// measure, and test-side implementations of the append formulas of
// kernel_abi.h (INT8 rounding by hand, FP8 by exhaustive search over the OCP
// E4M3FN values), written independently of the runtime's encoders.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_RUNTIME_TESTS_KVCACHETESTUTIL_H
#define KILN_RUNTIME_TESTS_KVCACHETESTUTIL_H

#include "cpu/Kernels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace kiln::rt::test {

/// Element types of the attention kernels: T, exact widening, rounding once,
/// a NaN poison value and the output tolerance against a float32 reference
/// (accumulation order and the 16-bit rounding of the output only).
struct F32Elems {
  using T = float;
  static constexpr const char *kName = "f32";
  static constexpr double kTol = 1e-5;
  static T round(float f) { return f; }
  static float widen(T f) { return f; }
  static T poison() { return std::numeric_limits<float>::quiet_NaN(); }
};
struct F16Elems {
  using T = kiln_f16_t;
  static constexpr const char *kName = "f16";
  static constexpr double kTol = 2e-3;
  static T round(float f) { return cpu::floatToF16(f); }
  static float widen(T h) { return cpu::f16ToFloat(h); }
  static T poison() { return 0x7e00; }
};
struct Bf16Elems {
  using T = kiln_bf16_t;
  static constexpr const char *kName = "bf16";
  static constexpr double kTol = 1e-2;
  static T round(float f) { return cpu::floatToBf16(f); }
  static float widen(T h) { return cpu::bf16ToFloat(h); }
  static T poison() { return 0x7fc0; }
};

/// Typed-test names: Api::kName.
class KvName {
public:
  template <class T> static std::string GetName(int) { return T::kName; }
};

/// max |got - ref| / max |ref|; infinite when NaNs disagree.
inline double relError(const std::vector<float> &got,
                       const std::vector<float> &ref) {
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

/// Random values representable in Api::T: the elements and their widened
/// float values.
template <class Api> struct Input {
  std::vector<typename Api::T> elems;
  std::vector<float> values;
};
template <class Api>
Input<Api> randomInput(size_t n, std::mt19937 &gen, float sigma = 1.0f) {
  std::normal_distribution<float> dist(0.0f, sigma);
  Input<Api> in;
  in.elems.resize(n);
  in.values.resize(n);
  for (size_t i = 0; i < n; ++i) {
    in.elems[i] = Api::round(dist(gen));
    in.values[i] = Api::widen(in.elems[i]);
  }
  return in;
}

/// Attention shape and the tokens of each call of a sequence.
struct KvShape {
  int64_t heads, kvHeads, headDim, maxSeq;
  std::vector<int64_t> steps; ///< tokens per call: prefill, chunks, decodes
};
inline std::string shapeName(const KvShape &s) {
  return "h" + std::to_string(s.heads) + "_kvh" + std::to_string(s.kvHeads) +
         "_hd" + std::to_string(s.headDim);
}

/// The INT8 quantization formula of kernel_abi.h (kiln_k_attention_kv8):
/// returns the scale, fills q.
inline float refQuantizeInt8(const float *x, int8_t *q, int64_t headDim) {
  float amax = 0.0f;
  for (int64_t d = 0; d < headDim; ++d)
    amax = std::max(amax, std::fabs(x[d]));
  float scale = amax / 127.0f;
  for (int64_t d = 0; d < headDim; ++d) {
    if (scale == 0.0f) {
      q[d] = 0;
      continue;
    }
    float r = x[d] / scale;
    // Round half away from zero, by hand.
    // (in double, where |r| + 0.5 is exact).
    float a = float(std::floor(std::fabs(double(r)) + 0.5));
    float v = std::copysign(a, r);
    v = std::min(127.0f, std::max(-127.0f, v));
    q[d] = int8_t(v);
  }
  return scale;
}

/// The OCP E4M3FN value of `code` from the spec's formula; NaN for
/// S.1111.111.
inline double specValue(int code) {
  int s = code >> 7, e = (code >> 3) & 15, m = code & 7;
  if (e == 15 && m == 7)
    return std::numeric_limits<double>::quiet_NaN();
  double mag =
      e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
  return s ? -mag : mag;
}

/// Nearest E4M3FN code of x by exhaustive search over the finite codes,
/// ties to the even code (mantissa LSB 0), magnitudes beyond 448 saturated;
/// the sign of zero follows x.
inline uint8_t nearestCode(double x) {
  if (std::isnan(x))
    return std::signbit(x) ? 0xff : 0x7f;
  double a = std::fabs(x);
  int best = 0;
  double bestDiff = INFINITY;
  for (int c = 0; c < 0x7f; ++c) { // positive finite codes 0x00..0x7e
    double d = std::fabs(a - specValue(c));
    if (d < bestDiff || (d == bestDiff && (c & 1) == 0 && (best & 1) == 1)) {
      best = c;
      bestDiff = d;
    }
  }
  if (a > 448.0)
    best = 0x7e;
  return uint8_t(best | (std::signbit(x) ? 0x80 : 0));
}

/// The FP8 append formula of kernel_abi.h (kiln_k_attention_kvf8) with the
/// exhaustive-search encoder: returns the scale, fills q.
inline float refQuantizeFp8(const float *x, uint8_t *q, int64_t headDim) {
  float amax = 0.0f;
  for (int64_t d = 0; d < headDim; ++d)
    amax = std::max(amax, std::fabs(x[d]));
  float scale = amax / 448.0f;
  for (int64_t d = 0; d < headDim; ++d)
    q[d] = scale == 0.0f ? 0 : nearestCode(double(x[d] / scale));
  return scale;
}

} // namespace kiln::rt::test

#endif // KILN_RUNTIME_TESTS_KVCACHETESTUTIL_H
