//===- BlockKernelsHwy.cpp - GGML block-format GEMV on Highway -*- C++ -*-===//
//
// The decode GEMV of weights kept in GGML block formats (kernel_abi.h
// kiln_k_linear_blocks, kiln_rt/block_formats.h): the blocks are read as
// stored and their integers widened in registers, never written out as
// floats. Per block (or K-quant sub-block) the integer codes are dotted with
// x in float lanes, and the block's scale is applied once to that sum:
//   Q8_0:  d * sum(q * x)
//   Q4_0:  d * sum(q * x) - 8 d * sum(x)
//   Q4_1:  d * sum(q * x) + m * sum(x)
//   Q5_0:  d * sum(q * x) - 16 d * sum(x)    (q with its fifth bit from qh)
//   Q5_1:  d * sum(q * x) + m * sum(x)
//   Q2_K / Q4_K / Q5_K:
//          sum_g (d * sc_g) * sum_g(q * x) - (dmin * min_g) * sum_g(x)
//   Q3_K:  sum_g (d * (sc_g - 32)) * sum_g(q * x), q = low - (high ? 0 : 4)
//   Q6_K:  sum_g (d * sc_g) * sum_g((q - 32) * x)
// where sum(x) over each 16 inputs is computed once per call (blockXSums16)
// and shared by every row. This is the formula of block_formats.h
// reassociated, so results equal decoding to float and then dotting up to float
// summation order.
// Written once with Google Highway (1.0.3 API) and dispatched per CPU like
// QuantKernelsHwy.cpp.
//
//===----------------------------------------------------------------------===//

#ifndef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS HWY_SSSE3
#endif

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/BlockKernelsHwy.cpp"
#include "hwy/foreach_target.h" // IWYU pragma: keep

#include "hwy/highway.h"

#include "cpu/Kernels.h"
#include "kiln_rt/block_formats.h"

#include <cstring>

#include "cpu/HwyCommon-inl.h" // DF, DI, DI8, DU8, LoadI8AsF32, SumLanes

HWY_BEFORE_NAMESPACE();
namespace kiln::rt::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

/// Lanes(df) bytes at p widened to int32 lanes.
HWY_INLINE hn::Vec<DI> LoadU8AsI32(const uint8_t *HWY_RESTRICT p) {
  const DI di;
  const DU8 du8;
  return hn::PromoteTo(di, hn::LoadU(du8, p));
}

/// Lanes of DF, a compile-time constant on every x86 target (so that the
/// per-block loops unroll and their accumulators stay in registers).
constexpr int64_t kLanes = int64_t(HWY_LANES(float));

/// The f16 field at p as float: the F16C conversion on AVX2 / AVX-512
/// (GCC and Clang lower _Float16 to vcvtph2ps there), the portable decoder
/// of block_formats.h elsewhere. Both are exact.
HWY_INLINE float F16(const uint8_t *HWY_RESTRICT p) {
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3 || \
    HWY_TARGET == HWY_AVX3_DL
  _Float16 h;
  std::memcpy(&h, p, 2);
  return float(h);
#else
  return kiln_block_f16(p);
#endif
}

/// R rows of Q8_0 / Q4_0 / Q4_1 (32-element blocks).
template <int64_t F, int R>
HWY_INLINE void GemvLegacy(const float *HWY_RESTRICT x,
                           const float *HWY_RESTRICT xs16,
                           const uint8_t *HWY_RESTRICT w, float *HWY_RESTRICT y,
                           int64_t in) {
  const DF df;
  const DI di;
  constexpr int64_t N = kLanes;
  constexpr int64_t kBytes = kiln_block_bytes(F);
  const int64_t blocks = in / 32, rowBytes = blocks * kBytes;
  hn::Vec<DF> acc[R];
  float offset[R];
  for (int r = 0; r < R; ++r) {
    acc[r] = hn::Zero(df);
    offset[r] = 0.0f;
  }
  const auto low = hn::Set(di, 0x0f);
  for (int64_t b = 0; b < blocks; ++b) {
    const float *xb = x + 32 * b;
    hn::Vec<DF> s[R];
    for (int r = 0; r < R; ++r)
      s[r] = hn::Zero(df);
    if constexpr (F == KILN_BLOCK_Q8_0) {
      for (int64_t k = 0; k < 32; k += N) {
        const auto xv = hn::LoadU(df, xb + k);
        for (int r = 0; r < R; ++r)
          s[r] = hn::MulAdd(
              LoadI8AsF32(reinterpret_cast<const int8_t *>(
                  w + r * rowBytes + b * kBytes + 2 + k)), xv, s[r]);
      }
    } else if constexpr (F == KILN_BLOCK_Q5_0 || F == KILN_BLOCK_Q5_1) {
      // Fifth bit of element i: bit i of the little-endian 32-bit qh.
      constexpr int64_t kQh = F == KILN_BLOCK_Q5_1 ? 4 : 2, kQs = kQh + 4;
      const auto lanes = hn::Iota(di, 0);
      for (int64_t k = 0; k < 16; k += N) {
        const auto xl = hn::LoadU(df, xb + k);
        const auto xh = hn::LoadU(df, xb + 16 + k);
        for (int r = 0; r < R; ++r) {
          const uint8_t *blk = w + r * rowBytes + b * kBytes;
          uint32_t qh;
          std::memcpy(&qh, blk + kQh, 4);
          const auto bits = hn::Set(di, int32_t(qh));
          const auto one = hn::Set(di, 1);
          const auto hiL = hn::ShiftLeft<4>(
              hn::And(hn::Shr(hn::BitCast(hn::RebindToUnsigned<DI>(), bits),
                              hn::BitCast(hn::RebindToUnsigned<DI>(),
                                          hn::Add(lanes, hn::Set(di, int32_t(k))))),
                      hn::BitCast(hn::RebindToUnsigned<DI>(), one)));
          const auto hiH = hn::ShiftLeft<4>(
              hn::And(hn::Shr(hn::BitCast(hn::RebindToUnsigned<DI>(), bits),
                              hn::BitCast(hn::RebindToUnsigned<DI>(),
                                          hn::Add(lanes, hn::Set(di, int32_t(k + 16))))),
                      hn::BitCast(hn::RebindToUnsigned<DI>(), one)));
          const auto bytes = LoadU8AsI32(blk + kQs + k);
          const auto ql = hn::Or(hn::And(bytes, low), hn::BitCast(di, hiL));
          const auto qhv = hn::Or(hn::ShiftRight<4>(bytes), hn::BitCast(di, hiH));
          s[r] = hn::MulAdd(hn::ConvertTo(df, ql), xl, s[r]);
          s[r] = hn::MulAdd(hn::ConvertTo(df, qhv), xh, s[r]);
        }
      }
    } else {
      constexpr int64_t kQs = F == KILN_BLOCK_Q4_1 ? 4 : 2;
      for (int64_t k = 0; k < 16; k += N) {
        const auto xl = hn::LoadU(df, xb + k);
        const auto xh = hn::LoadU(df, xb + 16 + k);
        for (int r = 0; r < R; ++r) {
          const auto bytes = LoadU8AsI32(w + r * rowBytes + b * kBytes + kQs + k);
          s[r] = hn::MulAdd(hn::ConvertTo(df, hn::And(bytes, low)), xl, s[r]);
          s[r] = hn::MulAdd(hn::ConvertTo(df, hn::ShiftRight<4>(bytes)), xh,
                            s[r]);
        }
      }
    }
    const float xsum = xs16[2 * b] + xs16[2 * b + 1];
    for (int r = 0; r < R; ++r) {
      const uint8_t *blk = w + r * rowBytes + b * kBytes;
      const float d = F16(blk);
      acc[r] = hn::MulAdd(s[r], hn::Set(df, d), acc[r]);
      if constexpr (F == KILN_BLOCK_Q4_0)
        offset[r] -= 8.0f * d * xsum;
      else if constexpr (F == KILN_BLOCK_Q5_0)
        offset[r] -= 16.0f * d * xsum;
      else if constexpr (F == KILN_BLOCK_Q4_1 || F == KILN_BLOCK_Q5_1)
        offset[r] += F16(blk + 2) * xsum;
    }
  }
  for (int r = 0; r < R; ++r)
    y[r] = SumLanes(acc[r]) + offset[r];
}

/// One row of Q4_K or Q5_K (256-element super-blocks of 8 sub-blocks of
/// 32; Q5_K adds the fifth bits in qh[32]).
template <int64_t F>
HWY_INLINE float GemvQ45K(const float *HWY_RESTRICT x,
                          const float *HWY_RESTRICT xs16,
                          const uint8_t *HWY_RESTRICT row, int64_t in) {
  constexpr bool kQ5 = F == KILN_BLOCK_Q5_K;
  constexpr int64_t kBytes = kiln_block_bytes(F), kQs = kQ5 ? 48 : 16;
  const DF df;
  const DI di;
  constexpr int64_t N = kLanes;
  const auto low = hn::Set(di, 0x0f);
  auto acc = hn::Zero(df);
  float offset = 0.0f;
  const auto one = hn::Set(di, 1);
  for (int64_t b = 0; b < in / 256; ++b) {
    const uint8_t *blk = row + b * kBytes;
    const float d = F16(blk), dmin = F16(blk + 2);
    const float *xb = x + 256 * b;
    for (int g = 0; g < 8; ++g) {
      const int c = g / 2, nib = g % 2;
      const uint8_t *qs = blk + kQs + 32 * c;
      const float *xg = xb + 32 * g;
      auto s = hn::Zero(df);
      for (int64_t l = 0; l < 32; l += N) {
        const auto bytes = LoadU8AsI32(qs + l);
        auto q = nib ? hn::ShiftRight<4>(bytes) : hn::And(bytes, low);
        if constexpr (kQ5) // bit (2c + n) of qh[l]
          q = hn::Or(q, hn::ShiftLeft<4>(hn::And(
                            hn::ShiftRightSame(LoadU8AsI32(blk + 16 + l), g),
                            one)));
        s = hn::MulAdd(hn::ConvertTo(df, q), hn::LoadU(df, xg + l), s);
      }
      uint8_t sc, mn;
      kiln_block_k4_scale_min(blk + 4, g, &sc, &mn);
      acc = hn::MulAdd(s, hn::Set(df, d * float(sc)), acc);
      const int64_t g16 = (256 * b + 32 * g) / 16;
      offset -= dmin * float(mn) * (xs16[g16] + xs16[g16 + 1]);
    }
  }
  return SumLanes(acc) + offset;
}

/// One row of Q6_K (256-element super-blocks of 16 groups of 16).
HWY_INLINE float GemvQ6K(const float *HWY_RESTRICT x,
                         const uint8_t *HWY_RESTRICT row, int64_t in) {
  const DF df;
  const DI di;
  constexpr int64_t N = kLanes;
  const auto low = hn::Set(di, 0x0f), two = hn::Set(di, 3),
             bias = hn::Set(di, 32);
  auto acc = hn::Zero(df);
  for (int64_t b = 0; b < in / 256; ++b) {
    const uint8_t *blk = row + b * 210;
    const float d = F16(blk + 208);
    const int8_t *scales = reinterpret_cast<const int8_t *>(blk + 192);
    const float *xb = x + 256 * b;
    for (int g = 0; g < 16; ++g) {
      // Element e = 128h + 32s + l: low nibble s / 2 of ql[64h + 32(s % 2)
      // + l], high two bits 2s..2s+1 of qh[32h + l].
      const int e0 = 16 * g, h = e0 / 128, s = (e0 % 128) / 32, l0 = e0 % 32;
      const uint8_t *ql = blk + 64 * h + 32 * (s % 2) + l0;
      const uint8_t *qh = blk + 128 + 32 * h + l0;
      auto sum = hn::Zero(df);
      for (int64_t k = 0; k < 16; k += N) {
        const auto lb = LoadU8AsI32(ql + k);
        const auto nib = s >= 2 ? hn::ShiftRight<4>(lb) : hn::And(lb, low);
        const auto hi = hn::And(hn::ShiftRightSame(LoadU8AsI32(qh + k), 2 * s),
                                two);
        const auto q = hn::Sub(hn::Or(nib, hn::ShiftLeft<4>(hi)), bias);
        sum = hn::MulAdd(hn::ConvertTo(df, q), hn::LoadU(df, xb + e0 + k), sum);
      }
      acc = hn::MulAdd(sum, hn::Set(df, d * float(scales[g])), acc);
    }
  }
  return SumLanes(acc);
}

/// One row of Q2_K or Q3_K (256-element super-blocks of 16 groups of 16,
/// two-bit codes; Q3_K adds a third bit from hmask and signed scales).
template <int64_t F>
HWY_INLINE float GemvQ23K(const float *HWY_RESTRICT x,
                          const float *HWY_RESTRICT xs16,
                          const uint8_t *HWY_RESTRICT row, int64_t in) {
  constexpr bool kQ3 = F == KILN_BLOCK_Q3_K;
  constexpr int64_t kBytes = kiln_block_bytes(F);
  const DF df;
  const DI di;
  constexpr int64_t N = kLanes;
  const auto three = hn::Set(di, 3), one = hn::Set(di, 1),
             four = hn::Set(di, 4);
  auto acc = hn::Zero(df);
  float offset = 0.0f;
  for (int64_t b = 0; b < in / 256; ++b) {
    const uint8_t *blk = row + b * kBytes;
    const uint8_t *qs = blk + (kQ3 ? 32 : 16);
    const float d = F16(blk + (kQ3 ? 108 : 80));
    const float dmin = kQ3 ? 0.0f : F16(blk + 82);
    const float *xb = x + 256 * b;
    for (int g = 0; g < 16; ++g) {
      // Element e = 128h + 32s + l: bits 2s..2s+1 of qs[32h + l] (Q3_K:
      // and bit 4h + s of hmask[l], set meaning "no -4").
      const int e0 = 16 * g, h = e0 / 128, s2 = (e0 % 128) / 32, l0 = e0 % 32;
      auto sum = hn::Zero(df);
      for (int64_t k = 0; k < 16; k += N) {
        auto q = hn::And(
            hn::ShiftRightSame(LoadU8AsI32(qs + 32 * h + l0 + k), 2 * s2),
            three);
        if constexpr (kQ3) {
          const auto hb = hn::And(
              hn::ShiftRightSame(LoadU8AsI32(blk + l0 + k), 4 * h + s2), one);
          q = hn::Add(hn::Sub(q, four), hn::ShiftLeft<2>(hb));
        }
        sum = hn::MulAdd(hn::ConvertTo(df, q), hn::LoadU(df, xb + e0 + k), sum);
      }
      if constexpr (kQ3) {
        const uint8_t *sc = blk + 96;
        int lo = (g < 8 ? sc[g] : sc[g - 8] >> 4) & 0x0f;
        int hi = (sc[8 + g % 4] >> (2 * (g / 4))) & 3;
        float scale = float(int8_t(uint8_t(lo | (hi << 4))) - 32);
        acc = hn::MulAdd(sum, hn::Set(df, d * scale), acc);
      } else {
        const uint8_t sc = blk[g];
        acc = hn::MulAdd(sum, hn::Set(df, d * float(sc & 0x0f)), acc);
        offset -= dmin * float(sc >> 4) * xs16[(256 * b + e0) / 16];
      }
    }
  }
  return SumLanes(acc) + offset;
}

template <int64_t F>
HWY_INLINE void GemvLegacyRows(const float *x, const float *xs16,
                               const uint8_t *w, float *y, int64_t in,
                               int64_t rows) {
  const int64_t rowBytes = in / 32 * kiln_block_bytes(F);
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4)
    GemvLegacy<F, 4>(x, xs16, w + r * rowBytes, y + r, in);
  for (; r < rows; ++r)
    GemvLegacy<F, 1>(x, xs16, w + r * rowBytes, y + r, in);
}

/// y[r] = dot(row r) for the rows of a K-quant matrix (256-element
/// super-blocks, kiln_block_bytes(F) bytes each).
template <int64_t F, class RowDot>
HWY_INLINE void EachKRow(const uint8_t *HWY_RESTRICT w, float *HWY_RESTRICT y,
                         int64_t in, int64_t rows, RowDot dot) {
  const int64_t rowBytes = in / 256 * kiln_block_bytes(F);
  for (int64_t r = 0; r < rows; ++r)
    y[r] = dot(w + r * rowBytes);
}

void GemvBlocks(int64_t format, const float *HWY_RESTRICT x,
                const float *HWY_RESTRICT xs16, const uint8_t *HWY_RESTRICT w,
                float *HWY_RESTRICT y, int64_t in, int64_t rows) {
  switch (format) {
  case KILN_BLOCK_Q8_0:
    return GemvLegacyRows<KILN_BLOCK_Q8_0>(x, xs16, w, y, in, rows);
  case KILN_BLOCK_Q4_0:
    return GemvLegacyRows<KILN_BLOCK_Q4_0>(x, xs16, w, y, in, rows);
  case KILN_BLOCK_Q4_1:
    return GemvLegacyRows<KILN_BLOCK_Q4_1>(x, xs16, w, y, in, rows);
  case KILN_BLOCK_Q5_0:
    return GemvLegacyRows<KILN_BLOCK_Q5_0>(x, xs16, w, y, in, rows);
  case KILN_BLOCK_Q5_1:
    return GemvLegacyRows<KILN_BLOCK_Q5_1>(x, xs16, w, y, in, rows);
  case KILN_BLOCK_Q2_K:
    return EachKRow<KILN_BLOCK_Q2_K>(w, y, in, rows, [&](const uint8_t *row) {
      return GemvQ23K<KILN_BLOCK_Q2_K>(x, xs16, row, in);
    });
  case KILN_BLOCK_Q3_K:
    return EachKRow<KILN_BLOCK_Q3_K>(w, y, in, rows, [&](const uint8_t *row) {
      return GemvQ23K<KILN_BLOCK_Q3_K>(x, xs16, row, in);
    });
  case KILN_BLOCK_Q4_K:
    return EachKRow<KILN_BLOCK_Q4_K>(w, y, in, rows, [&](const uint8_t *row) {
      return GemvQ45K<KILN_BLOCK_Q4_K>(x, xs16, row, in);
    });
  case KILN_BLOCK_Q5_K:
    return EachKRow<KILN_BLOCK_Q5_K>(w, y, in, rows, [&](const uint8_t *row) {
      return GemvQ45K<KILN_BLOCK_Q5_K>(x, xs16, row, in);
    });
  case KILN_BLOCK_Q6_K:
    return EachKRow<KILN_BLOCK_Q6_K>(w, y, in, rows, [&](const uint8_t *row) {
      return GemvQ6K(x, row, in);
    });
  default:
    return;
  }
}

} // namespace HWY_NAMESPACE
} // namespace kiln::rt::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kiln::rt::cpu {

HWY_EXPORT(GemvBlocks);

void blockXSums16(const float *x, int64_t in, float *sums) {
  for (int64_t g = 0; g < in / 16; ++g) {
    float s = 0.0f;
    for (int64_t k = 0; k < 16; ++k)
      s += x[16 * g + k];
    sums[g] = s;
  }
}

void gemvRowsBlocksSimd(int64_t format, const float *x, const float *xsum16,
                        const uint8_t *w, float *y, int64_t in, int64_t rows) {
  HWY_DYNAMIC_DISPATCH(GemvBlocks)(format, x, xsum16, w, y, in, rows);
}

} // namespace kiln::rt::cpu
#endif // HWY_ONCE
