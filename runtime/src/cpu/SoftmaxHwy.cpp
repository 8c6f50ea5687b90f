//===- SoftmaxHwy.cpp - Attention softmax rows on Highway -------*- C++ -*-===//
//
// The softmax of one row of attention scores for the tiled prefill attention
// (Attention.cpp, attentionTiles): s[t] for t in [first, last] becomes
// exp(s[t] - max) / sum, every other s[t] of [0, n) becomes 0. The
// exponentials are Highway's Exp (hwy/contrib/math, at most 1 ulp from
// exp) in vector lanes, summed in float lanes; per target like
// QuantKernelsHwy.cpp. Highway's Exp maps NaN to 0, so a row holding a NaN
// score is done with expf instead and stays NaN (a NaN in the model must
// reach the logits, where kiln-run reports it).
//
//===----------------------------------------------------------------------===//

#ifndef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS HWY_SSSE3
#endif

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/SoftmaxHwy.cpp"
#include "hwy/foreach_target.h" // IWYU pragma: keep

#include "hwy/highway.h"
#include "hwy/contrib/math/math-inl.h"

#include "cpu/Kernels.h"

#include <algorithm>
#include <cmath>

#include "cpu/HwyCommon-inl.h" // DF, DI

HWY_BEFORE_NAMESPACE();
namespace kiln::rt::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

void SoftmaxRow(float *HWY_RESTRICT s, int64_t first, int64_t last,
                int64_t n, float *maxOut, float *sumOut) {
  const DF df;
  const int64_t lanes = int64_t(hn::Lanes(df));
  float *p = s + first;
  const int64_t count = last - first + 1;
  // The maximum, and whether any score is NaN.
  const DI di;
  auto vmax = hn::Set(df, -INFINITY);
  auto nan = hn::Zero(di); // all ones in the lanes that saw a NaN
  int64_t i = 0;
  for (; i + lanes <= count; i += lanes) {
    const auto v = hn::LoadU(df, p + i);
    vmax = hn::Max(vmax, v);
    nan = hn::Or(nan, hn::VecFromMask(di, hn::RebindMask(di, hn::IsNaN(v))));
  }
  float maxScore = hn::GetLane(hn::MaxOfLanes(df, vmax));
  bool anyNan = !hn::AllTrue(di, hn::Eq(nan, hn::Zero(di)));
  for (int64_t t = i; t < count; ++t) {
    anyNan |= std::isnan(p[t]);
    maxScore = std::max(maxScore, p[t]);
  }
  if (anyNan) {
    double sum = 0.0;
    for (int64_t t = 0; t < count; ++t)
      sum += (p[t] = expf(p[t] - maxScore));
    if (sumOut)
      *sumOut = float(sum);
    const float inv = float(1.0 / sum);
    for (int64_t t = 0; t < count; ++t)
      p[t] *= inv;
  } else {
    const auto vm = hn::Set(df, maxScore);
    auto vsum = hn::Zero(df);
    for (i = 0; i + lanes <= count; i += lanes) {
      const auto e = hn::Exp(df, hn::Sub(hn::LoadU(df, p + i), vm));
      hn::StoreU(e, df, p + i);
      vsum = hn::Add(vsum, e);
    }
    if (i < count) { // the tail through a -inf padded vector: exp gives 0
      HWY_ALIGN float tail[HWY_MAX_BYTES / sizeof(float)];
      std::fill(tail, tail + lanes, -INFINITY);
      std::copy(p + i, p + count, tail);
      const auto e = hn::Exp(df, hn::Sub(hn::Load(df, tail), vm));
      hn::Store(e, df, tail);
      std::copy(tail, tail + (count - i), p + i);
      vsum = hn::Add(vsum, e);
    }
    const float sum = hn::GetLane(hn::SumOfLanes(df, vsum));
    if (sumOut)
      *sumOut = sum;
    const auto inv = hn::Set(df, 1.0f / sum);
    for (i = 0; i + lanes <= count; i += lanes)
      hn::StoreU(hn::Mul(hn::LoadU(df, p + i), inv), df, p + i);
    for (; i < count; ++i)
      p[i] *= hn::GetLane(inv);
  }
  if (maxOut)
    *maxOut = maxScore;
  std::fill(s, s + first, 0.0f);
  std::fill(s + last + 1, s + n, 0.0f);
}

} // namespace HWY_NAMESPACE
} // namespace kiln::rt::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kiln::rt::cpu {

HWY_EXPORT(SoftmaxRow);

void softmaxRow(float *s, int64_t first, int64_t last, int64_t n,
                float *maxOut, float *sumOut) {
  HWY_DYNAMIC_DISPATCH(SoftmaxRow)(s, first, last, n, maxOut, sumOut);
}

} // namespace kiln::rt::cpu
#endif // HWY_ONCE
