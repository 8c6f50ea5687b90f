//===- QuantKernelsHwy.cpp - Quantized CPU kernels on Highway -*- C++ -*-===//
//
// The SIMD inner loops of the quantized linear layers (kernel_abi.h: W8A16
// per-channel and group-wise, W4A16, W8A8), written once with Google Highway
// (https://github.com/google/highway, 1.0.3 API) and compiled for every x86
// target Highway attains: AVX-512 (HWY_AVX3), AVX2 (+FMA, F16C), SSE4 and the
// portable scalar fallback (HWY_SCALAR; GCC < 12.3 has no working EMU128).
// foreach_target.h re-includes this file once per target; HWY_EXPORT builds a
// table of the per-target functions and HWY_DYNAMIC_DISPATCH calls the best
// one the CPU supports (chosen on the first call). The dispatching wrappers
// at the end are declared in Kernels.h.
//
// Numerics: the float kernels accumulate float products in vector lanes (FMA
// where the target has it) and reduce the lanes at the end, so results differ
// between targets only by float summation order. The int8 x int8 kernel (W8A8)
// accumulates exact int32 sums and is bit-identical on every target.
//
//===----------------------------------------------------------------------===//

// SSSE3 adds nothing over SSE4 for these loops and costs one more compilation.
#ifndef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS HWY_SSSE3
#endif

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/QuantKernelsHwy.cpp"
#include "hwy/foreach_target.h" // IWYU pragma: keep

#include "hwy/highway.h"

#include "cpu/Kernels.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "cpu/HwyCommon-inl.h" // DF, DI, DI8, DU8, LoadI8AsF32, SumLanes

HWY_BEFORE_NAMESPACE();
namespace kiln::rt::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using D16 = hn::ScalableTag<int16_t>;  // int16 lanes of the int8 dot
using D16I8 = hn::Rebind<int8_t, D16>; // int8, as many lanes as D16
using D32 = hn::Repartition<int32_t, D16>;

void WidenI8(const int8_t *HWY_RESTRICT src, float *HWY_RESTRICT dst,
             int64_t count) {
  const DF df;
  const int64_t n = int64_t(hn::Lanes(df));
  int64_t i = 0;
  for (; i + n <= count; i += n)
    hn::StoreU(LoadI8AsF32(src + i), df, dst + i);
  for (; i < count; ++i)
    dst[i] = float(src[i]);
}

/// dst[k] = scales[g] * float(q[begin + k]), g = (begin + k) / groupSize.
void DequantI8(const int8_t *HWY_RESTRICT q, const float *HWY_RESTRICT scales,
               float *HWY_RESTRICT dst, int64_t begin, int64_t count,
               int64_t groupSize) {
  const DF df;
  const int64_t n = int64_t(hn::Lanes(df));
  const int64_t end = begin + count;
  for (int64_t i = begin; i < end;) {
    const int64_t g = i / groupSize, e = std::min(end, (g + 1) * groupSize);
    const float s = scales[g];
    const auto sv = hn::Set(df, s);
    for (; i + n <= e; i += n, dst += n)
      hn::StoreU(hn::Mul(sv, LoadI8AsF32(q + i)), df, dst);
    for (; i < e; ++i)
      *dst++ = s * float(q[i]);
  }
}

/// Per-channel int8 GEMV over R rows at once (x loaded once per step for all
/// of them, two accumulators per row): y[r] = scales[r] * dot(q[r], x).
template <int R>
HWY_INLINE void
DotRowsI8(const float *HWY_RESTRICT x, const int8_t *HWY_RESTRICT q,
          const float *HWY_RESTRICT scales, float *HWY_RESTRICT y, int64_t in) {
  const DF df;
  const int64_t n = int64_t(hn::Lanes(df));
  hn::Vec<DF> a[R], b[R];
  for (int r = 0; r < R; ++r)
    a[r] = b[r] = hn::Zero(df);
  int64_t j = 0;
  for (; j + 2 * n <= in; j += 2 * n) {
    if (j % 64 == 0)
      PrefetchNextRows<R>(reinterpret_cast<const uint8_t *>(q), in, j, 64);
    const auto xa = hn::LoadU(df, x + j), xb = hn::LoadU(df, x + j + n);
    HWY_UNROLL(4)
    for (int r = 0; r < R; ++r) {
      a[r] = hn::MulAdd(LoadI8AsF32(q + r * in + j), xa, a[r]);
      b[r] = hn::MulAdd(LoadI8AsF32(q + r * in + j + n), xb, b[r]);
    }
  }
  if (j + n <= in) {
    const auto xa = hn::LoadU(df, x + j);
    for (int r = 0; r < R; ++r)
      a[r] = hn::MulAdd(LoadI8AsF32(q + r * in + j), xa, a[r]);
    j += n;
  }
  for (int r = 0; r < R; ++r) {
    float s = SumLanes(hn::Add(a[r], b[r]));
    for (int64_t k = j; k < in; ++k)
      s += float(q[r * in + k]) * x[k];
    y[r] = scales[r] * s;
  }
}

/// Group-wise int8 GEMV over R rows: per group of groupSize inputs a vector
/// sum of x * q, scaled by scales[r, g] into a vector total per row (tails of
/// groups shorter than a vector summed in scalar and scaled likewise).
template <int R>
HWY_INLINE void
DotRowsI8Grouped(const float *HWY_RESTRICT x, const int8_t *HWY_RESTRICT q,
                 const float *HWY_RESTRICT scales, int64_t groups,
                 float *HWY_RESTRICT y, int64_t in, int64_t groupSize) {
  const DF df;
  const int64_t n = int64_t(hn::Lanes(df));
  hn::Vec<DF> tot[R];
  float tail[R];
  for (int r = 0; r < R; ++r) {
    tot[r] = hn::Zero(df);
    tail[r] = 0.0f;
  }
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t c0 = g * groupSize, c1 = std::min(in, c0 + groupSize);
    PrefetchNextRows<R>(reinterpret_cast<const uint8_t *>(q), in, c0,
                        c1 - c0);
    if (g % 16 == 0)
      PrefetchNextRows<R>(reinterpret_cast<const uint8_t *>(scales),
                          groups * 4, g * 4, 64);
    hn::Vec<DF> a[R];
    HWY_UNROLL(4)
    for (int r = 0; r < R; ++r)
      a[r] = hn::Zero(df);
    int64_t j = c0;
    for (; j + n <= c1; j += n) {
      const auto xa = hn::LoadU(df, x + j);
      HWY_UNROLL(4)
      for (int r = 0; r < R; ++r)
        a[r] = hn::MulAdd(LoadI8AsF32(q + r * in + j), xa, a[r]);
    }
    HWY_UNROLL(4)
    for (int r = 0; r < R; ++r)
      tot[r] = hn::MulAdd(a[r], hn::Set(df, scales[r * groups + g]), tot[r]);
    if (HWY_UNLIKELY(j < c1)) // a group that is not whole vectors
      for (int r = 0; r < R; ++r) {
        float t = 0.0f;
        for (int64_t k = j; k < c1; ++k)
          t += float(q[r * in + k]) * x[k];
        tail[r] += scales[r * groups + g] * t;
      }
  }
  for (int r = 0; r < R; ++r)
    y[r] = SumLanes(tot[r]) + tail[r];
}

void GemvI8(const float *HWY_RESTRICT x, const int8_t *HWY_RESTRICT q,
            const float *HWY_RESTRICT scales, float *HWY_RESTRICT y, int64_t in,
            int64_t rows, int64_t groupSize) {
  int64_t r = 0;
  if (groupSize <= 0) {
    for (; r + 4 <= rows; r += 4)
      DotRowsI8<4>(x, q + r * in, scales + r, y + r, in);
    for (; r < rows; ++r)
      DotRowsI8<1>(x, q + r * in, scales + r, y + r, in);
    return;
  }
  const int64_t groups = (in + groupSize - 1) / groupSize;
  for (; r + 4 <= rows; r += 4)
    DotRowsI8Grouped<4>(x, q + r * in, scales + r * groups, groups, y + r, in,
                        groupSize);
  for (; r < rows; ++r)
    DotRowsI8Grouped<1>(x, q + r * in, scales + r * groups, groups, y + r, in,
                        groupSize);
}

/// 2 * Lanes(df) packed nibbles (Lanes(df) bytes at p, byte k = elements 2k
/// low, 2k + 1 high) as floats q - z: even elements in `lo`, odd in `hi`.
HWY_INLINE void LoadQ4(const int8_t *HWY_RESTRICT p, hn::Vec<DI> z,
                       hn::Vec<DF> &lo, hn::Vec<DF> &hi) {
  const DF df;
  const DI di;
  const DU8 du8;
  const auto bytes =
      hn::PromoteTo(di, hn::LoadU(du8, reinterpret_cast<const uint8_t *>(p)));
  lo = hn::ConvertTo(df, hn::Sub(hn::And(bytes, hn::Set(di, 0x0f)), z));
  hi = hn::ConvertTo(df, hn::Sub(hn::ShiftRight<4>(bytes), z));
}

/// dst[k] = scales[g] * float(q[begin + k] - zeros[g]) for k < count.
void DequantQ4(const int8_t *HWY_RESTRICT q, const float *HWY_RESTRICT scales,
               const int8_t *HWY_RESTRICT zeros, float *HWY_RESTRICT dst,
               int64_t begin, int64_t count, int64_t groupSize) {
  const DF df;
  const DI di;
  const int64_t n = int64_t(hn::Lanes(df));
  const int64_t end = begin + count;
  for (int64_t i = begin; i < end;) {
    const int64_t g = i / groupSize, e = std::min(end, (g + 1) * groupSize);
    const float s = scales[g];
    const int zi = zeros[g];
    if (i & 1) // only when begin is odd: realign to a byte
      *dst++ = s * float(q4At(q, i++) - zi);
    const auto sv = hn::Set(df, s);
    const auto z = hn::Set(di, zi);
    for (; i + 2 * n <= e; i += 2 * n, dst += 2 * n) {
      hn::Vec<DF> lo, hi;
      LoadQ4(q + (i >> 1), z, lo, hi);
      hn::StoreInterleaved2(hn::Mul(sv, lo), hn::Mul(sv, hi), df, dst);
    }
    for (; i < e; ++i)
      *dst++ = s * float(q4At(q, i) - zi);
  }
}

/// W4A16 GEMV over R packed rows (rowBytes apart): per group, x * (q - z)
/// accumulated with x split into even / odd elements (LoadInterleaved2, once
/// per step for all rows) against the low / high nibbles, scaled by the
/// group's scale into a vector total per row; scalar tails.
template <int R>
HWY_INLINE void
DotRowsQ4(const float *HWY_RESTRICT x, const int8_t *HWY_RESTRICT q,
          int64_t rowBytes, const float *HWY_RESTRICT scales,
          const int8_t *HWY_RESTRICT zeros, int64_t groups,
          float *HWY_RESTRICT y, int64_t in, int64_t groupSize) {
  const DF df;
  const DI di;
  const int64_t n = int64_t(hn::Lanes(df));
  hn::Vec<DF> tot[R];
  float tail[R];
  for (int r = 0; r < R; ++r) {
    tot[r] = hn::Zero(df);
    tail[r] = 0.0f;
  }
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t c0 = g * groupSize, c1 = std::min(in, c0 + groupSize);
    PrefetchNextRows<R>(reinterpret_cast<const uint8_t *>(q), rowBytes,
                        c0 / 2, (c1 - c0 + 1) / 2);
    if (g % 16 == 0) {
      PrefetchNextRows<R>(reinterpret_cast<const uint8_t *>(scales),
                          groups * 4, g * 4, 64);
      PrefetchNextRows<R>(reinterpret_cast<const uint8_t *>(zeros), groups,
                          g, 16);
    }
    hn::Vec<DF> a[R], b[R];
    hn::Vec<DI> z[R];
    hn::Vec<DF> table[R];
    HWY_UNROLL(4)
    for (int r = 0; r < R; ++r) {
      a[r] = b[r] = hn::Zero(df);
      z[r] = hn::Set(di, int32_t(zeros[r * groups + g]));
      if constexpr (kHasNibbleTable)
        table[r] = hn::Sub(hn::Iota(df, 0.0f),
                           hn::Set(df, float(zeros[r * groups + g])));
    }
    int64_t j = c0; // even unless groupSize is odd (never emitted): scalar
    for (; (j & 1) == 0 && j + 2 * n <= c1; j += 2 * n) {
      hn::Vec<DF> xe, xo;
      hn::LoadInterleaved2(df, x + j, xe, xo);
      HWY_UNROLL(4)
      for (int r = 0; r < R; ++r) {
        hn::Vec<DF> lo, hi;
        if constexpr (kHasNibbleTable) {
          const auto bytes = LoadU8AsI32(reinterpret_cast<const uint8_t *>(
              q + r * rowBytes + (j >> 1)));
          lo = NibbleTable(table[r], bytes);
          hi = NibbleTable(table[r], hn::ShiftRight<4>(bytes));
        } else {
          LoadQ4(q + r * rowBytes + (j >> 1), z[r], lo, hi);
        }
        a[r] = hn::MulAdd(lo, xe, a[r]);
        b[r] = hn::MulAdd(hi, xo, b[r]);
      }
    }
    HWY_UNROLL(4)
    for (int r = 0; r < R; ++r)
      tot[r] = hn::MulAdd(hn::Add(a[r], b[r]),
                          hn::Set(df, scales[r * groups + g]), tot[r]);
    if (HWY_UNLIKELY(j < c1)) // a group that is not whole vectors
      for (int r = 0; r < R; ++r) {
        const int zi = zeros[r * groups + g];
        float t = 0.0f;
        for (int64_t k = j; k < c1; ++k)
          t += x[k] * float(q4At(q + r * rowBytes, k) - zi);
        tail[r] += scales[r * groups + g] * t;
      }
  }
  for (int r = 0; r < R; ++r)
    y[r] = SumLanes(tot[r]) + tail[r];
}

void GemvQ4(const float *HWY_RESTRICT x, const int8_t *HWY_RESTRICT q,
            const float *HWY_RESTRICT scales, const int8_t *HWY_RESTRICT zeros,
            float *HWY_RESTRICT y, int64_t in, int64_t rows,
            int64_t groupSize) {
  const int64_t rowBytes = q4RowBytes(in), groups = q4Groups(in, groupSize);
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4)
    DotRowsQ4<4>(x, q + r * rowBytes, rowBytes, scales + r * groups,
                 zeros + r * groups, groups, y + r, in, groupSize);
  for (; r < rows; ++r)
    DotRowsQ4<1>(x, q + r * rowBytes, rowBytes, scales + r * groups,
                 zeros + r * groups, groups, y + r, in, groupSize);
}

/// int32 dot products of one int8 activation row with R int8 weight rows
/// (`in` apart): int8 widened to int16, pairs multiplied and added into
/// int32 lanes (ReorderWidenMulAccumulate: vpmaddwd on x86), lanes summed at
/// the end. Exact while in * 127 * 127 < 2^31 (in < 133,000).
template <int R>
HWY_INLINE void DotI8I8(const int8_t *HWY_RESTRICT x,
                        const int8_t *HWY_RESTRICT q, int64_t in,
                        int32_t *HWY_RESTRICT acc) {
  const D16 d16;
  const D16I8 d8;
  const D32 d32;
  const int64_t n = int64_t(hn::Lanes(d16));
  hn::Vec<D32> s0[R], s1[R];
  for (int r = 0; r < R; ++r)
    s0[r] = s1[r] = hn::Zero(d32);
  int64_t j = 0;
  for (; j + n <= in; j += n) {
    const auto xv = hn::PromoteTo(d16, hn::LoadU(d8, x + j));
    for (int r = 0; r < R; ++r) {
      const auto wv = hn::PromoteTo(d16, hn::LoadU(d8, q + r * in + j));
      s0[r] = hn::ReorderWidenMulAccumulate(d32, xv, wv, s0[r], s1[r]);
    }
  }
  for (int r = 0; r < R; ++r) {
    int32_t s = hn::GetLane(hn::SumOfLanes(d32, hn::Add(s0[r], s1[r])));
    for (int64_t k = j; k < in; ++k)
      s += int32_t(x[k]) * int32_t(q[r * in + k]);
    acc[r] = s;
  }
}

void GemmI8I8(const int8_t *HWY_RESTRICT xq, int64_t n,
              const int8_t *HWY_RESTRICT q, int64_t in, int64_t rows,
              int32_t *HWY_RESTRICT acc) {
  int64_t r = 0;
  // Four weight rows (4 * in bytes, in L1) against every activation row.
  for (; r + 4 <= rows; r += 4)
    for (int64_t t = 0; t < n; ++t) {
      int32_t s[4];
      DotI8I8<4>(xq + t * in, q + r * in, in, s);
      for (int k = 0; k < 4; ++k)
        acc[t * rows + r + k] = s[k];
    }
  for (; r < rows; ++r)
    for (int64_t t = 0; t < n; ++t)
      DotI8I8<1>(xq + t * in, q + r * in, in, acc + t * rows + r);
}

} // namespace HWY_NAMESPACE
} // namespace kiln::rt::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kiln::rt::cpu {

HWY_EXPORT(WidenI8);
HWY_EXPORT(DequantI8);
HWY_EXPORT(GemvI8);
HWY_EXPORT(DequantQ4);
HWY_EXPORT(GemvQ4);
HWY_EXPORT(GemmI8I8);

void widenI8(const int8_t *src, float *dst, int64_t count) {
  HWY_DYNAMIC_DISPATCH(WidenI8)(src, dst, count);
}
void dequantRowI8(const int8_t *q, const float *scales, float *dst,
                  int64_t begin, int64_t count, int64_t groupSize) {
  HWY_DYNAMIC_DISPATCH(DequantI8)(q, scales, dst, begin, count, groupSize);
}
void gemvRowsI8(const float *x, const int8_t *q, const float *scales, float *y,
                int64_t in, int64_t rows, int64_t groupSize) {
  HWY_DYNAMIC_DISPATCH(GemvI8)(x, q, scales, y, in, rows, groupSize);
}
void dequantRowQ4(const int8_t *q, const float *scales, const int8_t *zeros,
                  float *dst, int64_t begin, int64_t count, int64_t groupSize) {
  HWY_DYNAMIC_DISPATCH(DequantQ4)
  (q, scales, zeros, dst, begin, count, groupSize);
}
void gemvRowsQ4(const float *x, const int8_t *q, const float *scales,
                const int8_t *zeros, float *y, int64_t in, int64_t rows,
                int64_t groupSize) {
  HWY_DYNAMIC_DISPATCH(GemvQ4)(x, q, scales, zeros, y, in, rows, groupSize);
}
void gemmRowsI8I8(const int8_t *xq, int64_t n, const int8_t *q, int64_t in,
                  int64_t rows, int32_t *acc) {
  HWY_DYNAMIC_DISPATCH(GemmI8I8)(xq, n, q, in, rows, acc);
}

const char *quantKernelTarget() {
  return hwy::TargetName(hwy::SupportedTargets() & HWY_TARGETS &
                         -(hwy::SupportedTargets() & HWY_TARGETS));
}

void setQuantKernelTargetsForTesting(SimdLevel level) {
  int64_t mask = 0; // 0: every supported target (the default)
  switch (level) {
  case SimdLevel::Generic:
    mask = HWY_SCALAR;
    break;
  case SimdLevel::Avx2:
    mask = HWY_AVX2 | HWY_SSE4 | HWY_SCALAR;
    break;
  case SimdLevel::Avx512:
    break;
  }
  hwy::SetSupportedTargetsForTest(mask);
  hwy::GetChosenTarget().Update(hwy::SupportedTargets());
}

} // namespace kiln::rt::cpu
#endif // HWY_ONCE
