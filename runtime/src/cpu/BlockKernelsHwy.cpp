//===- BlockKernelsHwy.cpp - GGML block-format GEMV on Highway -*- C++ -*-===//
//
// The decode GEMV of weights kept in GGML block formats (kernel_abi.h
// kiln_k_linear_blocks, kiln_rt/block_formats.h): the blocks are read as
// stored and their integers widened in registers, never written out as
// floats. Per block (or K-quant sub-block) the integer codes are dotted with
// x in float lanes, and the block's scale is applied once to that sum:
//   Q8_0:  d * sum(q * x)
//   Q4_0:  d * sum(q * x) - 8 d * sum(x)   (AVX-512: d * sum((q - 8) * x),
//          q - 8 read from a 16-entry float table)
//   Q4_1:  d * sum(q * x) + m * sum(x)
//   Q5_0:  d * sum(q * x) - 16 d * sum(x)    (q with its fifth bit from qh)
//   Q5_1:  d * sum(q * x) + m * sum(x)
//   Q2_K / Q4_K / Q5_K:
//          sum_g (d * sc_g) * sum_g(q * x) - (dmin * min_g) * sum_g(x)
//   Q3_K:  sum_g (d * (sc_g - 32)) * sum_g(q * x), q = low - (high ? 0 : 4)
//   Q6_K:  sum_g (d * sc_g) * sum_g(q * x) - 32 sum_g (d * sc_g) * sum_g(x)
// where sum(x) over each 16 inputs is computed once per call (blockXSums16)
// and shared by every row. This is the formula of block_formats.h
// reassociated, so results equal decoding to float and then dotting up to float
// summation order. Rows are read several at a time (x loaded once for them)
// while the next rows are prefetched (PrefetchNextRows): one core reads
// 5-11 GB/s of blocks from DRAM this way, against 2.4-7.9 GB/s one row at a
// time without prefetching (Q4_K, Q8_0; docs/benchmarks.md).
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

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>


#include "cpu/HwyCommon-inl.h" // DF, DI, DI8, DU8, LoadI8AsF32, SumLanes
#include "cpu/BlockHwyCommon-inl.h" // kLanes, F16, StageScales, K4ScalesMins

HWY_BEFORE_NAMESPACE();
namespace kiln::rt::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

/// R rows of Q8_0 / Q4_0 / Q4_1 / Q5_0 / Q5_1 (32-element blocks); the
/// blocks' scales (and mins) converted kScaleStage blocks at a time.
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
  // One prefetch per 64-byte line: every block of Q8_0, every second of
  // Q5_0 / Q5_1, every third of Q4_0 / Q4_1.
  constexpr int64_t kPrefetchEvery = 64 / kBytes;
  // Row groups ahead to prefetch: for the 4- and 5-bit formats, whose
  // blocks take longer to compute than Q8_0's, three (one core, 2048 x 8192
  // Q4_0 from DRAM, two threads: 14.0 -> 15.2-16.0 GB/s; Q8_0 1-3% slower
  // that way, so one).
  constexpr int kPrefetchAhead = F == KILN_BLOCK_Q8_0 ? 1 : 3;
  hn::Vec<DF> acc[R];
  float offset[R];
  HWY_UNROLL(4)
  for (int r = 0; r < R; ++r) {
    acc[r] = hn::Zero(df);
    offset[r] = 0.0f;
  }
  const auto low = hn::Set(di, 0x0f);
  constexpr bool kNibbleTable =
      kHasNibbleTable && (F == KILN_BLOCK_Q4_0 || F == KILN_BLOCK_Q4_1);
  const auto table = hn::Add(hn::Iota(df, 0.0f),
                             hn::Set(df, F == KILN_BLOCK_Q4_0 ? -8.0f : 0.0f));
  constexpr bool kHasMin = F == KILN_BLOCK_Q4_1 || F == KILN_BLOCK_Q5_1;
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
    const float *xb = x + 32 * b;
    if (b % kPrefetchEvery == 0)
      PrefetchNextRows<R, kPrefetchAhead>(w, rowBytes, b * kBytes, 1);
    hn::Vec<DF> s[R];
    HWY_UNROLL(4)
    for (int r = 0; r < R; ++r)
      s[r] = hn::Zero(df);
    if constexpr (F == KILN_BLOCK_Q8_0) {
      for (int64_t k = 0; k < 32; k += N) {
        const auto xv = hn::LoadU(df, xb + k);
        HWY_UNROLL(4)
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
        HWY_UNROLL(4)
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
    } else if constexpr (kNibbleTable) {
      // The codes index a 16-entry float table (vpermps reads the low four
      // bits of each lane): Q4_0's table holds q - 8, so that no offset
      // term is left for it; Q4_1's holds q.
      constexpr int64_t kQs = F == KILN_BLOCK_Q4_1 ? 4 : 2;
      for (int64_t k = 0; k < 16; k += N) {
        const auto xl = hn::LoadU(df, xb + k);
        const auto xh = hn::LoadU(df, xb + 16 + k);
        HWY_UNROLL(4)
        for (int r = 0; r < R; ++r) {
          const auto bytes = LoadU8AsI32(w + r * rowBytes + b * kBytes + kQs + k);
          s[r] = hn::MulAdd(NibbleTable(table, bytes), xl, s[r]);
          s[r] = hn::MulAdd(NibbleTable(table, hn::ShiftRight<4>(bytes)), xh,
                            s[r]);
        }
      }
    } else {
      constexpr int64_t kQs = F == KILN_BLOCK_Q4_1 ? 4 : 2;
      for (int64_t k = 0; k < 16; k += N) {
        const auto xl = hn::LoadU(df, xb + k);
        const auto xh = hn::LoadU(df, xb + 16 + k);
        HWY_UNROLL(4)
        for (int r = 0; r < R; ++r) {
          const auto bytes = LoadU8AsI32(w + r * rowBytes + b * kBytes + kQs + k);
          s[r] = hn::MulAdd(hn::ConvertTo(df, hn::And(bytes, low)), xl, s[r]);
          s[r] = hn::MulAdd(hn::ConvertTo(df, hn::ShiftRight<4>(bytes)), xh,
                            s[r]);
        }
      }
    }
    const float xsum = xs16[2 * b] + xs16[2 * b + 1];
    HWY_UNROLL(4)
    for (int r = 0; r < R; ++r) {
      const float d = scale[r][j];
      acc[r] = hn::MulAdd(s[r], hn::Set(df, d), acc[r]);
      if constexpr (F == KILN_BLOCK_Q4_0 && !kNibbleTable)
        offset[r] -= 8.0f * d * xsum;
      else if constexpr (F == KILN_BLOCK_Q5_0)
        offset[r] -= 16.0f * d * xsum;
      else if constexpr (kHasMin)
        offset[r] += minimum[r][j] * xsum;
    }
  }
  HWY_UNROLL(4)
  for (int r = 0; r < R; ++r)
    y[r] = SumLanes(acc[r]) + offset[r];
}

/// R rows of Q4_K or Q5_K (256-element super-blocks of 8 sub-blocks of 32;
/// Q5_K adds the fifth bits in qh[32]). Per super-block and row the eight
/// scales and mins are unpacked once (d * sc_j, dmin * m_j as floats); the
/// 32 code bytes of each 64-element chunk are loaded once for both of their
/// sub-blocks (low nibbles: sub-block 2c, high nibbles: 2c + 1), and x is
/// loaded once for the R rows. xsPad[16 b + 8 + j] is the sum of x over
/// sub-block j of super-block b, xsPad[16 b + j] zero (j < 8).
template <int64_t F, int R>
HWY_INLINE void GemvQ45K(const float *HWY_RESTRICT x,
                         const float *HWY_RESTRICT xsPad,
                         const uint8_t *HWY_RESTRICT w, float *HWY_RESTRICT y,
                         int64_t in) {
  constexpr bool kQ5 = F == KILN_BLOCK_Q5_K;
  constexpr int64_t kBytes = kiln_block_bytes(F), kQs = kQ5 ? 48 : 16;
  const DF df;
  const DI di;
  constexpr int64_t N = kLanes;
  const int64_t rowBytes = in / 256 * kBytes;
  const auto low = hn::Set(di, 0x0f), bit4 = hn::Set(di, 0x10);
  const auto iota = hn::Iota(df, 0.0f);
  hn::Vec<DF> acc[R], acc2[R], off[R];
  HWY_UNROLL(4)
  for (int r = 0; r < R; ++r)
    acc[r] = acc2[r] = off[r] = hn::Zero(df);
  const DU8 du8;
  for (int64_t b = 0; b < in / 256; ++b) {
    PrefetchNextRows<R>(w, rowBytes, b * kBytes, kBytes);
    // scale[r][j] = d * sc_j, scale[r][8 + j] = dmin * m_j; the mins are
    // dotted with the sub-blocks' sums of x in vector lanes (xsPad holds 8
    // zeros, then xs32, per super-block).
    HWY_ALIGN float scale[R][16];
    HWY_UNROLL(4)
    for (int r = 0; r < R; ++r) {
      const uint8_t *blk = w + r * rowBytes + b * kBytes;
      HWY_ALIGN uint8_t sm[16];
      K4ScalesMins(blk + 4, sm);
      const float d = F16(blk), dmin = F16(blk + 2);
      for (int64_t j = 0; j < 16; j += N) {
        const auto m = hn::IfThenElse(hn::FirstN(df, size_t(j < 8 ? 8 - j : 0)),
                                      hn::Set(df, d), hn::Set(df, dmin));
        const auto v = hn::Mul(
            hn::ConvertTo(df, hn::PromoteTo(di, hn::LoadU(du8, sm + j))), m);
        hn::Store(v, df, scale[r] + j);
        off[r] = hn::MulAdd(v, hn::LoadU(df, xsPad + 16 * b + j), off[r]);
      }
    }
    const float *xb = x + 256 * b;
    for (int c = 0; c < 4; ++c) {
      hn::Vec<DF> slo[R], shi[R];
      HWY_UNROLL(4)
      for (int r = 0; r < R; ++r)
        slo[r] = shi[r] = hn::Zero(df);
      for (int64_t l = 0; l < 32; l += N) {
        const auto xl = hn::LoadU(df, xb + 64 * c + l);
        const auto xh = hn::LoadU(df, xb + 64 * c + 32 + l);
        HWY_UNROLL(4)
        for (int r = 0; r < R; ++r) {
          const uint8_t *blk = w + r * rowBytes + b * kBytes;
          const auto bytes = LoadU8AsI32(blk + kQs + 32 * c + l);
          auto lo = hn::And(bytes, low);
          auto hi = hn::ShiftRight<4>(bytes);
          if constexpr (kQ5) { // bits 2c and 2c + 1 of qh[l]
            const auto t = hn::ShiftRightSame(LoadU8AsI32(blk + 16 + l), 2 * c);
            lo = hn::OrAnd(lo, hn::ShiftLeft<4>(t), bit4);
            hi = hn::OrAnd(hi, hn::ShiftLeft<3>(t), bit4);
          }
          if constexpr (kHasNibbleTable && !kQ5) { // codes 0..15
            slo[r] = hn::MulAdd(NibbleTable(iota, bytes), xl, slo[r]);
            shi[r] = hn::MulAdd(NibbleTable(iota, hi), xh, shi[r]);
          } else {
            slo[r] = hn::MulAdd(hn::ConvertTo(df, lo), xl, slo[r]);
            shi[r] = hn::MulAdd(hn::ConvertTo(df, hi), xh, shi[r]);
          }
        }
      }
      HWY_UNROLL(4)
      for (int r = 0; r < R; ++r) {
        acc[r] = hn::MulAdd(slo[r], hn::Set(df, scale[r][2 * c]), acc[r]);
        acc2[r] = hn::MulAdd(shi[r], hn::Set(df, scale[r][2 * c + 1]), acc2[r]);
      }
    }
  }
  HWY_UNROLL(4)
  for (int r = 0; r < R; ++r)
    y[r] = SumLanes(hn::Add(acc[r], acc2[r])) - SumLanes(off[r]);
}

/// R rows of Q6_K (256-element super-blocks of 16 groups of 16). Element
/// e = 128h + 32s + l has its low nibble in ql[64h + 32(s % 2) + l] (low
/// nibble for s < 2, high for s >= 2) and its top two bits as bits 2s..2s+1
/// of qh[32h + l]; its value is d * sc[e / 16] * (q - 32). Each 16 bytes of
/// ql and qh are loaded once for the four groups they serve, and the -32 is
/// applied once per row from the 16-element sums of x:
///   y = sum_g d sc_g sum_g(q x) - 32 sum_g d sc_g sum_g(x).
template <int R>
HWY_INLINE void GemvQ6K(const float *HWY_RESTRICT x,
                        const float *HWY_RESTRICT xs16,
                        const uint8_t *HWY_RESTRICT w, float *HWY_RESTRICT y,
                        int64_t in) {
  const DF df;
  const DI di;
  constexpr int64_t N = kLanes;
  const int64_t rowBytes = in / 256 * 210;
  const auto low = hn::Set(di, 0x0f), top = hn::Set(di, 0x30);
  hn::Vec<DF> acc[R], acc2[R];
  float offset[R];
  HWY_UNROLL(4)
  for (int r = 0; r < R; ++r) {
    acc[r] = acc2[r] = hn::Zero(df);
    offset[r] = 0.0f;
  }
  const hn::CappedTag<float, 16> d16;
  const hn::Rebind<int32_t, decltype(d16)> di16;
  const hn::Rebind<int8_t, decltype(d16)> ds16;
  for (int64_t b = 0; b < in / 256; ++b) {
    PrefetchNextRows<R>(w, rowBytes, b * 210, 210);
    HWY_ALIGN float scale[R][16];
    HWY_UNROLL(4)
    for (int r = 0; r < R; ++r) {
      const uint8_t *blk = w + r * rowBytes + b * 210;
      const auto d = hn::Set(d16, F16(blk + 208));
      auto o = hn::Zero(d16);
      for (size_t j = 0; j < 16; j += hn::Lanes(d16)) {
        const auto s = hn::Mul(
            hn::ConvertTo(d16, hn::PromoteTo(
                                   di16, hn::LoadU(ds16, reinterpret_cast<const int8_t *>(
                                                             blk + 192 + j)))),
            d);
        hn::StoreU(s, d16, scale[r] + j);
        o = hn::MulAdd(s, hn::LoadU(d16, xs16 + 16 * b + j), o);
      }
      offset[r] -= 32.0f * hn::GetLane(hn::SumOfLanes(d16, o));
    }
    const float *xb = x + 256 * b;
    for (int h = 0; h < 2; ++h)
      for (int64_t l0 = 0; l0 < 32; l0 += 16) {
        // Groups g = 8h + 2s + l0 / 16 for s = 0..3 (elements 128h + 32s + l0).
        hn::Vec<DF> s4[R][4];
        HWY_UNROLL(4)
        for (int r = 0; r < R; ++r)
          for (int s = 0; s < 4; ++s)
            s4[r][s] = hn::Zero(df);
        for (int64_t k = 0; k < 16; k += N) {
          const int64_t l = l0 + k;
          hn::Vec<DF> xv[4];
          for (int s = 0; s < 4; ++s)
            xv[s] = hn::LoadU(df, xb + 128 * h + 32 * s + l);
          HWY_UNROLL(4)
          for (int r = 0; r < R; ++r) {
            const uint8_t *blk = w + r * rowBytes + b * 210;
            const auto ql0 = LoadU8AsI32(blk + 64 * h + l);
            const auto ql1 = LoadU8AsI32(blk + 64 * h + 32 + l);
            const auto qh = LoadU8AsI32(blk + 128 + 32 * h + l);
            const hn::Vec<DI> q[4] = {
                hn::OrAnd(hn::And(ql0, low), hn::ShiftLeft<4>(qh), top),
                hn::OrAnd(hn::And(ql1, low), hn::ShiftLeft<2>(qh), top),
                hn::OrAnd(hn::ShiftRight<4>(ql0), qh, top),
                hn::OrAnd(hn::ShiftRight<4>(ql1), hn::ShiftRight<2>(qh), top)};
            for (int s = 0; s < 4; ++s)
              s4[r][s] = hn::MulAdd(hn::ConvertTo(df, q[s]), xv[s], s4[r][s]);
          }
        }
        HWY_UNROLL(4)
        for (int r = 0; r < R; ++r) {
          const int g = 8 * h + int(l0 / 16);
          acc[r] = hn::MulAdd(s4[r][0], hn::Set(df, scale[r][g]), acc[r]);
          acc2[r] = hn::MulAdd(s4[r][1], hn::Set(df, scale[r][g + 2]), acc2[r]);
          acc[r] = hn::MulAdd(s4[r][2], hn::Set(df, scale[r][g + 4]), acc[r]);
          acc2[r] = hn::MulAdd(s4[r][3], hn::Set(df, scale[r][g + 6]), acc2[r]);
        }
      }
  }
  HWY_UNROLL(4)
  for (int r = 0; r < R; ++r)
    y[r] = SumLanes(hn::Add(acc[r], acc2[r])) + offset[r];
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
    PrefetchNextRows<1>(row, in / 256 * kBytes, b * kBytes, kBytes);
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

/// Rows of a K-quant matrix R at a time, then one at a time:
/// kernel(std::integral_constant<int, R>(), w, y) computes R rows from w
/// into y.
template <int64_t F, int R, class Kernel>
HWY_INLINE void KRowsBy(const uint8_t *HWY_RESTRICT w, float *HWY_RESTRICT y,
                        int64_t in, int64_t rows, Kernel kernel) {
  const int64_t rowBytes = in / 256 * kiln_block_bytes(F);
  int64_t r = 0;
  for (; r + R <= rows; r += R)
    kernel(std::integral_constant<int, R>(), w + r * rowBytes, y + r);
  for (; r < rows; ++r)
    kernel(std::integral_constant<int, 1>(), w + r * rowBytes, y + r);
}

/// Rows of Q4_K / Q5_K with the per-32 sums of x derived from xs16 (laid
/// out as GemvQ45K's xsPad).
template <int64_t F>
HWY_INLINE void GemvQ45KRows(const float *HWY_RESTRICT x,
                             const float *HWY_RESTRICT xs16,
                             const uint8_t *HWY_RESTRICT w,
                             float *HWY_RESTRICT y, int64_t in, int64_t rows) {
  constexpr int64_t kMaxStack = 8192; // 16 per super-block: in <= 131072
  HWY_ALIGN float stackSums[kMaxStack];
  std::vector<float> heapSums;
  float *xsPad = stackSums;
  if (in / 16 > kMaxStack) {
    heapSums.resize(size_t(in / 16));
    xsPad = heapSums.data();
  }
  for (int64_t b = 0; b < in / 256; ++b)
    for (int64_t j = 0; j < 8; ++j) {
      xsPad[16 * b + j] = 0.0f;
      xsPad[16 * b + 8 + j] = xs16[16 * b + 2 * j] + xs16[16 * b + 2 * j + 1];
    }
  KRowsBy<F, 4>(w, y, in, rows, [&](auto rows, const uint8_t *rw, float *ry) {
    GemvQ45K<F, decltype(rows)::value>(x, xsPad, rw, ry, in);
  });
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
    return GemvQ45KRows<KILN_BLOCK_Q4_K>(x, xs16, w, y, in, rows);
  case KILN_BLOCK_Q5_K:
    return GemvQ45KRows<KILN_BLOCK_Q5_K>(x, xs16, w, y, in, rows);
  case KILN_BLOCK_Q6_K: // two rows: four ran out of AVX-512 registers
    return KRowsBy<KILN_BLOCK_Q6_K, 2>(
        w, y, in, rows, [&](auto rows, const uint8_t *rw, float *ry) {
          GemvQ6K<decltype(rows)::value>(x, xs16, rw, ry, in);
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
