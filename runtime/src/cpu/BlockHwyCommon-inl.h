//===- BlockHwyCommon-inl.h - GGML block helpers (Highway) -----*- C++ -*-===//
//
// The block-format helpers the decode GEMV (BlockKernelsHwy.cpp) and the
// multi-token GEMV (BlockTokensHwy.cpp) share, compiled once per target:
// include it after cpu/HwyCommon-inl.h inside a file that foreach_target.h
// re-includes (Highway's per-target include guard below).
//
//===----------------------------------------------------------------------===//

#if defined(KILN_CPU_BLOCK_HWY_COMMON_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef KILN_CPU_BLOCK_HWY_COMMON_INL_H_
#undef KILN_CPU_BLOCK_HWY_COMMON_INL_H_
#else
#define KILN_CPU_BLOCK_HWY_COMMON_INL_H_
#endif

#include "hwy/highway.h"

#include "kiln_rt/block_formats.h"

#include <cstdint>
#include <cstring>

HWY_BEFORE_NAMESPACE();
namespace kiln::rt::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

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

/// Blocks whose f16 scales StageScales converts at a time.
constexpr int64_t kScaleStage = 16;

/// The f16 fields at byte `field` of blocks 0..n-1 (n <= kScaleStage) of R
/// rows (rows rowBytes apart, blocks kBytes apart) as floats out[r][j], 0
/// for j >= n. The halves are gathered with scalar 16-bit moves and widened
/// by one vector conversion per row, so that the GEMV's inner loop takes
/// each scale as a broadcast memory operand: converting and broadcasting it
/// there cost two shuffle-port instructions per block and row, as many as
/// the codes' own unpacking.
template <int R, int64_t kBytes>
HWY_INLINE void StageScales(const uint8_t *HWY_RESTRICT w, int64_t rowBytes,
                            int64_t field, int64_t n,
                            float (*HWY_RESTRICT out)[kScaleStage]) {
  const DF df;
  const hn::Rebind<hwy::float16_t, DF> df16;
  HWY_ALIGN uint16_t half[kScaleStage];
  HWY_UNROLL(4)
  for (int r = 0; r < R; ++r) {
    const uint8_t *p = w + r * rowBytes + field;
    if (n == kScaleStage) {
      for (int64_t j = 0; j < kScaleStage; ++j)
        std::memcpy(&half[j], p + j * kBytes, 2);
    } else {
      for (int64_t j = 0; j < kScaleStage; ++j) {
        uint16_t h = 0;
        if (j < n)
          std::memcpy(&h, p + j * kBytes, 2);
        half[j] = h;
      }
    }
    for (int64_t j = 0; j < kScaleStage; j += int64_t(hn::Lanes(df)))
      hn::Store(hn::PromoteTo(df, hn::Load(df16, reinterpret_cast<const hwy::float16_t *>(half + j))),
                df, out[r] + j);
  }
}

/// The eight 6-bit scales and mins of a Q4_K / Q5_K super-block from its 12
/// scale bytes q (GGUF K-quant layout, kiln_block_k4_scale_min) as out[0..7]
/// = scales, out[8..15] = mins: for j < 4 scale j and min j are the low six
/// bits of q[j] and q[j + 4]; for j >= 4 they are the low and high nibble of
/// q[j + 4] with bits 4..5 taken from the top two bits of q[j - 4] and q[j].
/// Done four at a time in 32-bit words a = q[0..3], b = q[4..7], c =
/// q[8..11].
HWY_INLINE void K4ScalesMins(const uint8_t *HWY_RESTRICT q,
                             uint8_t *HWY_RESTRICT out) {
  uint32_t a, b, c;
  std::memcpy(&a, q, 4);
  std::memcpy(&b, q + 4, 4);
  std::memcpy(&c, q + 8, 4);
#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
  a = __builtin_bswap32(a);
  b = __builtin_bswap32(b);
  c = __builtin_bswap32(c);
#endif
  constexpr uint32_t k6 = 0x3f3f3f3f, k4 = 0x0f0f0f0f, k2 = 0x03030303;
  const uint32_t words[4] = {a & k6, (c & k4) | ((a >> 6) & k2) << 4, b & k6,
                             ((c >> 4) & k4) | ((b >> 6) & k2) << 4};
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  std::memcpy(out, words, 16);
#else
  for (int k = 0; k < 4; ++k)
    for (int i = 0; i < 4; ++i)
      out[4 * k + i] = uint8_t(words[k] >> (8 * i));
#endif
}

} // namespace HWY_NAMESPACE
} // namespace kiln::rt::cpu
HWY_AFTER_NAMESPACE();

#endif // per-target include guard
