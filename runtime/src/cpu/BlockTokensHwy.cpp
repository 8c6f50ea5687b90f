//===- BlockTokensHwy.cpp - GGML block GEMV for a few tokens ---*- C++ -*-===//
//
// The multi-token GEMV of weights kept in GGML block formats (Kernels.h
// gemvTokensBlocksSimd): the few-row steps of speculative verification and
// of the serving engine's batched decode. Like the decode GEMV
// (BlockKernelsHwy.cpp) the blocks are read as stored and their codes
// widened in registers; here they are also dequantized there (the block
// formula of block_formats.h, rounded once by the FMA) and dotted with up to
// 8 tokens' activations (4 on AVX2), so a pass over the weights serves
// several tokens. Written once with Google Highway and dispatched per CPU.
//
//===----------------------------------------------------------------------===//

#ifndef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS HWY_SSSE3
#endif

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/BlockTokensHwy.cpp"
#include "hwy/foreach_target.h" // IWYU pragma: keep

#include "hwy/highway.h"

#include "cpu/Kernels.h"
#include "kiln_rt/block_formats.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "cpu/HwyCommon-inl.h"      // DF, DI, DU8, LoadI8AsF32, SumLanes
#include "cpu/BlockHwyCommon-inl.h" // kLanes, F16, StageScales, K4ScalesMins

HWY_BEFORE_NAMESPACE();
namespace kiln::rt::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

/// Tokens per pass over the weights: 8 on AVX-512 (2 rows x 8 tokens of
/// accumulators in its 32 registers), 4 elsewhere (AVX2's 16).
constexpr int64_t kTokensPerPass = kLanes >= 16 ? 8 : 4;

/// Calls f(std::integral_constant<int, T>(), t0) for consecutive token
/// groups [t0, t0 + T) covering n tokens, T <= kTokensPerPass: the kernels'
/// token count is a compile-time constant, so their accumulators stay in
/// registers.
template <class F> HWY_INLINE void ForTokenGroups(int64_t n, F f) {
  constexpr int64_t K = kTokensPerPass;
  for (int64_t t0 = 0; t0 < n; t0 += K) {
    switch (std::min<int64_t>(K, n - t0)) {
    case 1:
      f(std::integral_constant<int, 1>(), t0);
      break;
    case 2:
      f(std::integral_constant<int, 2>(), t0);
      break;
    case 3:
      f(std::integral_constant<int, 3>(), t0);
      break;
    case 4:
      f(std::integral_constant<int, 4>(), t0);
      break;
    case 5:
      f(std::integral_constant<int, (K >= 5 ? 5 : 1)>(), t0);
      break;
    case 6:
      f(std::integral_constant<int, (K >= 6 ? 6 : 1)>(), t0);
      break;
    case 7:
      f(std::integral_constant<int, (K >= 7 ? 7 : 1)>(), t0);
      break;
    default:
      f(std::integral_constant<int, int(K)>(), t0);
      break;
    }
  }
}

/// Rows of a matrix kRows at a time (the last one alone):
/// f(std::integral_constant<int, R>(), r) for rows [r, r + R).
template <class F> HWY_INLINE void ForRowPairs(int64_t rows, F f) {
  int64_t r = 0;
  for (; r + 2 <= rows; r += 2)
    f(std::integral_constant<int, 2>(), r);
  for (; r < rows; ++r)
    f(std::integral_constant<int, 1>(), r);
}

/// R rows of Q8_0 / Q4_0 / Q4_1 / Q5_0 / Q5_1 against T token rows (x[t *
/// in], y[t * ldy + r]): the few-row steps of speculative verification and
/// of the serving engine. Each block's codes are widened once and
/// dequantized in registers (w = d q + m, d (q - 8), d (q - 16): the
/// formulas of block_formats.h, rounded once by the FMA), then dotted with
/// every token's x, so a token costs two FMAs per block and row instead of
/// GemvLegacy's whole widening; no per-token input sums. Equal to
/// GemvLegacy up to float summation order.
template <int64_t F, int R, int T>
HWY_INLINE void GemvLegacyTokens(const float *HWY_RESTRICT x,
                                 const uint8_t *HWY_RESTRICT w,
                                 float *HWY_RESTRICT y, int64_t in,
                                 int64_t ldy) {
  const DF df;
  const DI di;
  constexpr int64_t N = kLanes;
  constexpr int64_t kBytes = kiln_block_bytes(F);
  const int64_t blocks = in / 32, rowBytes = blocks * kBytes;
  constexpr int64_t kPrefetchEvery = 64 / kBytes; // as GemvLegacy
  constexpr int kPrefetchAhead = F == KILN_BLOCK_Q8_0 ? 1 : 3;
  hn::Vec<DF> acc[R][T];
  HWY_UNROLL(4)
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t)
      acc[r][t] = hn::Zero(df);
  const auto low = hn::Set(di, 0x0f);
  constexpr bool kNibbleTable =
      kHasNibbleTable && (F == KILN_BLOCK_Q4_0 || F == KILN_BLOCK_Q4_1);
  const auto table = hn::Add(hn::Iota(df, 0.0f),
                             hn::Set(df, F == KILN_BLOCK_Q4_0 ? -8.0f : 0.0f));
  constexpr bool kHasMin = F == KILN_BLOCK_Q4_1 || F == KILN_BLOCK_Q5_1;
  // The code offset folded into the dequantization: -8 for Q4_0 (unless
  // the table holds q - 8), -16 for Q5_0.
  constexpr float kCodeOffset = F == KILN_BLOCK_Q5_0 ? -16.0f
                                : F == KILN_BLOCK_Q4_0 && !kNibbleTable
                                    ? -8.0f
                                    : 0.0f;
  HWY_ALIGN float scale[R][kScaleStage];
  HWY_ALIGN float minimum[kHasMin ? R : 1][kScaleStage];
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t j = b % kScaleStage;
    if (j == 0) {
      const int64_t nb = std::min(kScaleStage, blocks - b);
      StageScales<R, kBytes>(w + b * kBytes, rowBytes, 0, nb, scale);
      if constexpr (kHasMin)
        StageScales<R, kBytes>(w + b * kBytes, rowBytes, 2, nb, minimum);
    }
    const float *xb = x + 32 * b; // token t's block at xb + t * in
    if (b % kPrefetchEvery == 0)
      PrefetchNextRows<R, kPrefetchAhead>(w, rowBytes, b * kBytes, 1);
    // The R rows' dequantized codes of columns [k, k + N) of the block
    // (and of [16 + k, 16 + k + N) for the nibble and 5-bit formats), then
    // every token's x loaded once for the R rows.
    auto dequant = [&](int r, hn::Vec<DF> q) HWY_ATTR {
      const auto d = hn::Set(df, scale[r][j]);
      if constexpr (kHasMin)
        return hn::MulAdd(q, d, hn::Set(df, minimum[r][j]));
      else if constexpr (kCodeOffset != 0.0f)
        return hn::MulAdd(q, d, hn::Set(df, kCodeOffset * scale[r][j]));
      else
        return hn::Mul(q, d);
    };
    auto dot = [&](const hn::Vec<DF> *wv, int64_t k) HWY_ATTR {
      HWY_UNROLL(8)
      for (int t = 0; t < T; ++t) {
        const auto xv = hn::LoadU(df, xb + t * in + k);
        HWY_UNROLL(4)
        for (int r = 0; r < R; ++r)
          acc[r][t] = hn::MulAdd(wv[r], xv, acc[r][t]);
      }
    };
    hn::Vec<DF> lo[R], hi[R];
    if constexpr (F == KILN_BLOCK_Q8_0) {
      for (int64_t k = 0; k < 32; k += N) {
        HWY_UNROLL(4)
        for (int r = 0; r < R; ++r)
          lo[r] = dequant(r, LoadI8AsF32(reinterpret_cast<const int8_t *>(
                                 w + r * rowBytes + b * kBytes + 2 + k)));
        dot(lo, k);
      }
    } else {
      for (int64_t k = 0; k < 16; k += N) {
        HWY_UNROLL(4)
        for (int r = 0; r < R; ++r) {
          const uint8_t *blk = w + r * rowBytes + b * kBytes;
          if constexpr (F == KILN_BLOCK_Q5_0 || F == KILN_BLOCK_Q5_1) {
            // Fifth bit of element i: bit i of the little-endian 32-bit qh.
            constexpr int64_t kQh = F == KILN_BLOCK_Q5_1 ? 4 : 2,
                              kQs = kQh + 4;
            using DU = hn::RebindToUnsigned<DI>;
            const DU du;
            uint32_t qh;
            std::memcpy(&qh, blk + kQh, 4);
            const auto bits = hn::Set(du, qh);
            const auto one = hn::Set(du, 1u);
            const auto lanes = hn::BitCast(du, hn::Iota(di, 0));
            const auto hiL = hn::ShiftLeft<4>(hn::And(
                hn::Shr(bits, hn::Add(lanes, hn::Set(du, uint32_t(k)))), one));
            const auto hiH = hn::ShiftLeft<4>(hn::And(
                hn::Shr(bits, hn::Add(lanes, hn::Set(du, uint32_t(k + 16)))),
                one));
            const auto bytes = LoadU8AsI32(blk + kQs + k);
            lo[r] = dequant(r, hn::ConvertTo(df, hn::Or(hn::And(bytes, low),
                                                        hn::BitCast(di, hiL))));
            hi[r] = dequant(r, hn::ConvertTo(df, hn::Or(hn::ShiftRight<4>(bytes),
                                                        hn::BitCast(di, hiH))));
          } else {
            constexpr int64_t kQs = F == KILN_BLOCK_Q4_1 ? 4 : 2;
            const auto bytes = LoadU8AsI32(blk + kQs + k);
            if constexpr (kNibbleTable) {
              lo[r] = dequant(r, NibbleTable(table, bytes));
              hi[r] = dequant(r, NibbleTable(table, hn::ShiftRight<4>(bytes)));
            } else {
              lo[r] = dequant(r, hn::ConvertTo(df, hn::And(bytes, low)));
              hi[r] = dequant(r, hn::ConvertTo(df, hn::ShiftRight<4>(bytes)));
            }
          }
        }
        dot(lo, k);
        dot(hi, 16 + k);
      }
    }
  }
  HWY_UNROLL(4)
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t)
      y[t * ldy + r] = SumLanes(acc[r][t]);
}

/// Rows of a legacy-format matrix for n tokens (GemvLegacyTokens), two
/// rows against up to kTokensPerPass tokens at a time, a next token group
/// re-reading the rows from L1. A pass over the rows costs about one
/// decode GEMV (reading and widening the codes) plus two FMAs per block
/// and token, so the groups are as wide as the registers allow.
template <int64_t F>
HWY_INLINE void GemvLegacyTokenRows(const float *x, const uint8_t *w,
                                    float *y, int64_t ldy, int64_t in,
                                    int64_t rows, int64_t n) {
  const int64_t rowBytes = in / 32 * kiln_block_bytes(F);
  ForRowPairs(rows, [&](auto r, int64_t r0) HWY_ATTR {
    ForTokenGroups(n, [&](auto t, int64_t t0) HWY_ATTR {
      GemvLegacyTokens<F, decltype(r)::value, decltype(t)::value>(
          x + t0 * in, w + r0 * rowBytes, y + t0 * ldy + r0, in, ldy);
    });
  });
}

/// One row of Q4_K / Q5_K (F) or Q6_K against T token rows (x[t * in],
/// y[t * ldy]), the K-quant counterpart of GemvLegacyTokens: per super-block
/// the scales (and mins) are unpacked once, each 16-lane chunk of codes is
/// widened and dequantized in registers (Q4_K / Q5_K: d sc_j q - dmin m_j;
/// Q6_K: d sc_g (q - 32)) and dotted with every token's x, two FMAs' worth
/// per token instead of a whole GEMV. Equal to GemvQ45K / GemvQ6K up to
/// float summation order.
template <int64_t F, int T>
HWY_INLINE void GemvKTokens(const float *HWY_RESTRICT x,
                            const uint8_t *HWY_RESTRICT w,
                            float *HWY_RESTRICT y, int64_t in, int64_t ldy) {
  const DF df;
  const DI di;
  constexpr int64_t N = kLanes;
  constexpr int64_t kBytes = kiln_block_bytes(F);
  hn::Vec<DF> acc[T];
  for (int t = 0; t < T; ++t)
    acc[t] = hn::Zero(df);
  const auto low = hn::Set(di, 0x0f);
  auto dot = [&](hn::Vec<DF> wv, const float *xp) HWY_ATTR {
    HWY_UNROLL(8)
    for (int t = 0; t < T; ++t)
      acc[t] = hn::MulAdd(wv, hn::LoadU(df, xp + t * in), acc[t]);
  };
  for (int64_t b = 0; b < in / 256; ++b) {
    const uint8_t *blk = w + b * kBytes;
    PrefetchNextRows<1>(w, 0, b * kBytes + 4 * kBytes, kBytes);
    const float *xb = x + 256 * b;
    if constexpr (F == KILN_BLOCK_Q6_K) {
      const float d = F16(blk + 208);
      const auto top = hn::Set(di, 0x30);
      const int8_t *sc = reinterpret_cast<const int8_t *>(blk + 192);
      for (int h = 0; h < 2; ++h)
        for (int64_t l = 0; l < 32; l += N) {
          const auto ql0 = LoadU8AsI32(blk + 64 * h + l);
          const auto ql1 = LoadU8AsI32(blk + 64 * h + 32 + l);
          const auto qh = LoadU8AsI32(blk + 128 + 32 * h + l);
          const hn::Vec<DI> q[4] = {
              hn::OrAnd(hn::And(ql0, low), hn::ShiftLeft<4>(qh), top),
              hn::OrAnd(hn::And(ql1, low), hn::ShiftLeft<2>(qh), top),
              hn::OrAnd(hn::ShiftRight<4>(ql0), qh, top),
              hn::OrAnd(hn::ShiftRight<4>(ql1), hn::ShiftRight<2>(qh), top)};
          for (int s4 = 0; s4 < 4; ++s4) {
            // Element 128h + 32 s4 + l: group 8h + 2 s4 + l / 16 (lanes of
            // one chunk never straddle a group: N <= 16).
            const float ds = d * float(sc[8 * h + 2 * s4 + l / 16]);
            dot(hn::MulAdd(hn::ConvertTo(df, q[s4]), hn::Set(df, ds),
                           hn::Set(df, -32.0f * ds)),
                xb + 128 * h + 32 * s4 + l);
          }
        }
    } else {
      constexpr bool kQ5 = F == KILN_BLOCK_Q5_K;
      constexpr int64_t kQs = kQ5 ? 48 : 16;
      const auto bit4 = hn::Set(di, 0x10);
      HWY_ALIGN uint8_t sm[16];
      K4ScalesMins(blk + 4, sm);
      const float d = F16(blk), dmin = F16(blk + 2);
      for (int c = 0; c < 4; ++c) {
        const auto slo = hn::Set(df, d * float(sm[2 * c])),
                   shi = hn::Set(df, d * float(sm[2 * c + 1]));
        const auto mlo = hn::Set(df, -dmin * float(sm[8 + 2 * c])),
                   mhi = hn::Set(df, -dmin * float(sm[8 + 2 * c + 1]));
        for (int64_t l = 0; l < 32; l += N) {
          const auto bytes = LoadU8AsI32(blk + kQs + 32 * c + l);
          auto lo = hn::And(bytes, low);
          auto hi = hn::ShiftRight<4>(bytes);
          if constexpr (kQ5) { // bits 2c and 2c + 1 of qh[l]
            const auto t = hn::ShiftRightSame(LoadU8AsI32(blk + 16 + l), 2 * c);
            lo = hn::OrAnd(lo, hn::ShiftLeft<4>(t), bit4);
            hi = hn::OrAnd(hi, hn::ShiftLeft<3>(t), bit4);
          }
          dot(hn::MulAdd(hn::ConvertTo(df, lo), slo, mlo), xb + 64 * c + l);
          dot(hn::MulAdd(hn::ConvertTo(df, hi), shi, mhi),
              xb + 64 * c + 32 + l);
        }
      }
    }
  }
  for (int t = 0; t < T; ++t)
    y[t * ldy] = SumLanes(acc[t]);
}

/// Rows of a Q4_K / Q5_K / Q6_K matrix for n tokens (GemvKTokens), up to
/// kTokensPerPass tokens per pass over a row.
template <int64_t F>
HWY_INLINE void GemvKTokenRows(const float *x, const uint8_t *w, float *y,
                               int64_t ldy, int64_t in, int64_t rows,
                               int64_t n) {
  const int64_t rowBytes = in / 256 * kiln_block_bytes(F);
  for (int64_t r = 0; r < rows; ++r)
    ForTokenGroups(n, [&](auto t, int64_t t0) HWY_ATTR {
      GemvKTokens<F, decltype(t)::value>(x + t0 * in, w + r * rowBytes,
                                         y + t0 * ldy + r, in, ldy);
    });
}

/// y[t * ldy + r] for the formats hasMultiTokenBlockGemv names (the
/// others never reach here: gemvTokensBlocksSimd runs them one token at a
/// time).
void GemvBlocksTokens(int64_t format, const float *HWY_RESTRICT x,
                      const uint8_t *HWY_RESTRICT w, float *HWY_RESTRICT y,
                      int64_t ldy, int64_t in, int64_t rows, int64_t n) {
  switch (format) {
  case KILN_BLOCK_Q8_0:
    return GemvLegacyTokenRows<KILN_BLOCK_Q8_0>(x, w, y, ldy, in, rows, n);
  case KILN_BLOCK_Q4_0:
    return GemvLegacyTokenRows<KILN_BLOCK_Q4_0>(x, w, y, ldy, in, rows, n);
  case KILN_BLOCK_Q4_1:
    return GemvLegacyTokenRows<KILN_BLOCK_Q4_1>(x, w, y, ldy, in, rows, n);
  case KILN_BLOCK_Q5_0:
    return GemvLegacyTokenRows<KILN_BLOCK_Q5_0>(x, w, y, ldy, in, rows, n);
  case KILN_BLOCK_Q5_1:
    return GemvLegacyTokenRows<KILN_BLOCK_Q5_1>(x, w, y, ldy, in, rows, n);
  case KILN_BLOCK_Q4_K:
    return GemvKTokenRows<KILN_BLOCK_Q4_K>(x, w, y, ldy, in, rows, n);
  case KILN_BLOCK_Q5_K:
    return GemvKTokenRows<KILN_BLOCK_Q5_K>(x, w, y, ldy, in, rows, n);
  case KILN_BLOCK_Q6_K:
    return GemvKTokenRows<KILN_BLOCK_Q6_K>(x, w, y, ldy, in, rows, n);
  default:
    return;
  }
}

} // namespace HWY_NAMESPACE
} // namespace kiln::rt::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kiln::rt::cpu {

HWY_EXPORT(GemvBlocksTokens);

void gemvTokensBlocksSimd(int64_t format, const float *x, const float *xsum16,
                          const uint8_t *w, float *y, int64_t ldy, int64_t in,
                          int64_t rows, int64_t n) {
  if (!hasMultiTokenBlockGemv(format)) {
    for (int64_t t = 0; t < n; ++t)
      gemvRowsBlocksSimd(format, x + t * in, xsum16 + t * (in / 16), w,
                         y + t * ldy, in, rows);
    return;
  }
  HWY_DYNAMIC_DISPATCH(GemvBlocksTokens)(format, x, w, y, ldy, in, rows, n);
}

bool hasMultiTokenBlockGemv(int64_t format) {
  return format == KILN_BLOCK_Q8_0 || format == KILN_BLOCK_Q4_0 ||
         format == KILN_BLOCK_Q4_1 || format == KILN_BLOCK_Q5_0 ||
         format == KILN_BLOCK_Q5_1 || format == KILN_BLOCK_Q4_K ||
         format == KILN_BLOCK_Q5_K || format == KILN_BLOCK_Q6_K;
}

} // namespace kiln::rt::cpu
#endif // HWY_ONCE
