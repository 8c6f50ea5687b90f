//===- Gemv.cpp - GEMV rows over float32 and 16-bit weights ---------------===//
//
// The decode GEMV rows of the float32 and f16 / bf16 linears (Kernels.h
// gemvRows, gemvRowsF16, gemvRowsBf16), the 16-bit conversions, and the
// instruction-set level they dispatch on (AVX-512, AVX2 + FMA + F16C,
// portable), which tests can lower (setSimdLevelForTesting).
//
//===----------------------------------------------------------------------===//
#include "cpu/Kernels.h"

// GCC 12's AVX-512 intrinsics trip -W(maybe-)uninitialized on their own
// `__Y = __Y` placeholders (GCC PR 105593); the warnings point into the header.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <algorithm>
#include <atomic>
#include <cstdint>

namespace kiln::rt::cpu {

/// y[r] = dot(w[r, 0:in], x[0:in]) for r in [rowBegin, rowEnd). Sixteen
/// partial sums (vectorized, FMA where available) reduced pairwise: more
/// accurate than run.c's sequential sum, same result up to rounding.
__attribute__((target_clones("avx512f", "avx2", "default"))) void
gemvRows(const float *__restrict x, const float *__restrict w,
         float *__restrict y, int64_t in, int64_t rowBegin, int64_t rowEnd) {
  for (int64_t r = rowBegin; r < rowEnd; ++r)
    y[r] = dotPairwise16(w + r * in, x, in);
}

//===----------------------------------------------------------------------===//
// 16-bit conversions and GEMV, one version per instruction set. Conversions
// are bit-identical to the scalar ones in Kernels.h at every level.
//===----------------------------------------------------------------------===//

namespace generic {
template <bool Bf16> static inline float widen1(uint16_t h) {
  return Bf16 ? bf16ToFloat(h) : f16ToFloat(h);
}
template <bool Bf16> static inline uint16_t narrow1(float f) {
  return Bf16 ? floatToBf16(f) : floatToF16(f);
}
template <bool Bf16>
static void widen(const uint16_t *src, float *dst, int64_t count) {
  for (int64_t i = 0; i < count; ++i)
    dst[i] = widen1<Bf16>(src[i]);
}
template <bool Bf16>
static void narrow(const float *src, uint16_t *dst, int64_t count) {
  for (int64_t i = 0; i < count; ++i)
    dst[i] = narrow1<Bf16>(src[i]);
}
template <bool Bf16>
static void gemv(const float *x, const uint16_t *w, float *y, int64_t in,
                 int64_t rows) {
  for (int64_t r = 0; r < rows; ++r) {
    const uint16_t *wr = w + r * in;
    float acc[16] = {0};
    int64_t j = 0;
    for (; j + 16 <= in; j += 16)
      for (int l = 0; l < 16; ++l)
        acc[l] += widen1<Bf16>(wr[j + l]) * x[j + l];
    float tail = 0.0f;
    for (; j < in; ++j)
      tail += widen1<Bf16>(wr[j]) * x[j];
    for (int s = 8; s > 0; s >>= 1)
      for (int l = 0; l < s; ++l)
        acc[l] += acc[l + s];
    y[r] = acc[0] + tail;
  }
}
} // namespace generic

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
namespace avx2 {
/// Eight 16-bit values widened to float in a register.
template <bool Bf16> static inline __m256 load8(const uint16_t *p) {
  __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i *>(p));
  if constexpr (Bf16)
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  else
    return _mm256_cvtph_ps(h);
}
/// Eight floats rounded to nearest even.
template <bool Bf16> static inline __m128i pack8(__m256 v) {
  if constexpr (Bf16) {
    __m256i b = _mm256_castps_si256(v);
    __m256i hi = _mm256_srli_epi32(b, 16);
    __m256i bias = _mm256_add_epi32(_mm256_and_si256(hi, _mm256_set1_epi32(1)),
                                    _mm256_set1_epi32(0x7fff));
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(b, bias), 16);
    __m256i quiet = _mm256_or_si256(hi, _mm256_set1_epi32(0x40));
    __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    r = _mm256_blendv_epi8(r, quiet, nan);
    return _mm_packus_epi32(_mm256_castsi256_si128(r),
                            _mm256_extracti128_si256(r, 1));
  } else {
    return _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
}
static inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
template <bool Bf16>
static void widen(const uint16_t *src, float *dst, int64_t count) {
  int64_t i = 0;
  for (; i + 8 <= count; i += 8)
    _mm256_storeu_ps(dst + i, load8<Bf16>(src + i));
  for (; i < count; ++i)
    dst[i] = generic::widen1<Bf16>(src[i]);
}
template <bool Bf16>
static void narrow(const float *src, uint16_t *dst, int64_t count) {
  int64_t i = 0;
  for (; i + 8 <= count; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i *>(dst + i),
                     pack8<Bf16>(_mm256_loadu_ps(src + i)));
  for (; i < count; ++i)
    dst[i] = generic::narrow1<Bf16>(src[i]);
}
/// y[0, R) = dot(w[r, :in], x) for R rows at once: x is loaded once per step
/// for all of them, two accumulators per row hide the FMA latency.
template <bool Bf16, int R>
static inline void dotRows(const float *x, const uint16_t *w, float *y,
                           int64_t in) {
  __m256 a[R], b[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
    a[r] = b[r] = _mm256_setzero_ps();
  int64_t j = 0;
  for (; j + 16 <= in; j += 16) {
    __m256 xa = _mm256_loadu_ps(x + j), xb = _mm256_loadu_ps(x + j + 8);
    if (j % 32 == 0) // the next R rows' line (avx512::dotRows)
      PrefetchNextRows<R>(reinterpret_cast<const uint8_t *>(w), 2 * in, 2 * j,
                          1);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      a[r] = _mm256_fmadd_ps(load8<Bf16>(w + r * in + j), xa, a[r]);
      b[r] = _mm256_fmadd_ps(load8<Bf16>(w + r * in + j + 8), xb, b[r]);
    }
  }
  if (j + 8 <= in) {
    __m256 xa = _mm256_loadu_ps(x + j);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
      a[r] = _mm256_fmadd_ps(load8<Bf16>(w + r * in + j), xa, a[r]);
    j += 8;
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    float s = hsum(_mm256_add_ps(a[r], b[r]));
    for (int64_t k = j; k < in; ++k)
      s += generic::widen1<Bf16>(w[r * in + k]) * x[k];
    y[r] = s;
  }
}
template <bool Bf16>
static void gemv(const float *x, const uint16_t *w, float *y, int64_t in,
                 int64_t rows) {
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4)
    dotRows<Bf16, 4>(x, w + r * in, y + r, in);
  for (; r < rows; ++r)
    dotRows<Bf16, 1>(x, w + r * in, y + r, in);
}
} // namespace avx2
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx2,fma,f16c")
namespace avx512 {
template <bool Bf16> static inline __m512 load16(const uint16_t *p) {
  __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(p));
  if constexpr (Bf16)
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  else
    return _mm512_cvtph_ps(h);
}
template <bool Bf16> static inline __m256i pack16(__m512 v) {
  if constexpr (Bf16) {
    __m512i b = _mm512_castps_si512(v);
    __m512i hi = _mm512_srli_epi32(b, 16);
    __m512i bias = _mm512_add_epi32(_mm512_and_si512(hi, _mm512_set1_epi32(1)),
                                    _mm512_set1_epi32(0x7fff));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(b, bias), 16);
    __m512i quiet = _mm512_or_si512(hi, _mm512_set1_epi32(0x40));
    __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    return _mm512_cvtepi32_epi16(_mm512_mask_mov_epi32(r, nan, quiet));
  } else {
    return _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
}
template <bool Bf16>
static void widen(const uint16_t *src, float *dst, int64_t count) {
  int64_t i = 0;
  for (; i + 16 <= count; i += 16)
    _mm512_storeu_ps(dst + i, load16<Bf16>(src + i));
  avx2::widen<Bf16>(src + i, dst + i, count - i);
}
template <bool Bf16>
static void narrow(const float *src, uint16_t *dst, int64_t count) {
  int64_t i = 0;
  for (; i + 16 <= count; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(dst + i),
                        pack16<Bf16>(_mm512_loadu_ps(src + i)));
  avx2::narrow<Bf16>(src + i, dst + i, count - i);
}
template <bool Bf16, int R>
static inline void dotRows(const float *x, const uint16_t *w, float *y,
                           int64_t in) {
  __m512 a[R], b[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
    a[r] = b[r] = _mm512_setzero_ps();
  int64_t j = 0;
  for (; j + 32 <= in; j += 32) {
    __m512 xa = _mm512_loadu_ps(x + j), xb = _mm512_loadu_ps(x + j + 16);
    // The next R rows' line: R streams side by side outrun the hardware
    // prefetchers (llama-110m F16 decode on one core: 50 -> 71 tokens/s).
    PrefetchNextRows<R>(reinterpret_cast<const uint8_t *>(w), 2 * in, 2 * j, 1);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      a[r] = _mm512_fmadd_ps(load16<Bf16>(w + r * in + j), xa, a[r]);
      b[r] = _mm512_fmadd_ps(load16<Bf16>(w + r * in + j + 16), xb, b[r]);
    }
  }
  if (j + 16 <= in) {
    __m512 xa = _mm512_loadu_ps(x + j);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
      a[r] = _mm512_fmadd_ps(load16<Bf16>(w + r * in + j), xa, a[r]);
    j += 16;
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    float s = _mm512_reduce_add_ps(_mm512_add_ps(a[r], b[r]));
    for (int64_t k = j; k < in; ++k)
      s += generic::widen1<Bf16>(w[r * in + k]) * x[k];
    y[r] = s;
  }
}
template <bool Bf16>
static void gemv(const float *x, const uint16_t *w, float *y, int64_t in,
                 int64_t rows) {
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4)
    dotRows<Bf16, 4>(x, w + r * in, y + r, in);
  for (; r < rows; ++r)
    dotRows<Bf16, 1>(x, w + r * in, y + r, in);
}
} // namespace avx512
#pragma GCC pop_options

SimdLevel maxSimdLevel() {
  static const SimdLevel level = [] {
    __builtin_cpu_init();
    bool avx2 = __builtin_cpu_supports("avx2") &&
                __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    if (avx2 && __builtin_cpu_supports("avx512f"))
      return SimdLevel::Avx512;
    return avx2 ? SimdLevel::Avx2 : SimdLevel::Generic;
  }();
  return level;
}

/// Lowered by tests only; -1 means "the highest supported".
static std::atomic<int> forcedSimdLevel{-1};

SimdLevel simdLevel() {
  int forced = forcedSimdLevel.load(std::memory_order_relaxed);
  return forced < 0 ? maxSimdLevel() : SimdLevel(forced);
}

SimdLevel setSimdLevelForTesting(SimdLevel level) {
  SimdLevel previous = simdLevel();
  level = std::min(level, maxSimdLevel());
  forcedSimdLevel.store(int(level), std::memory_order_relaxed);
  setQuantKernelTargetsForTesting(level == maxSimdLevel() ? SimdLevel::Avx512
                                                          : level);
  return previous;
}

#define KILN_DISPATCH(fn, ...)                                                 \
  switch (simdLevel()) {                                                       \
  case SimdLevel::Avx512:                                                      \
    return avx512::fn(__VA_ARGS__);                                            \
  case SimdLevel::Avx2:                                                        \
    return avx2::fn(__VA_ARGS__);                                              \
  case SimdLevel::Generic:                                                     \
    return generic::fn(__VA_ARGS__);                                           \
  }

void widenF16(const uint16_t *src, float *dst, int64_t count) {
  KILN_DISPATCH(widen<false>, src, dst, count);
}
void widenBf16(const uint16_t *src, float *dst, int64_t count) {
  KILN_DISPATCH(widen<true>, src, dst, count);
}
void narrowF16(const float *src, uint16_t *dst, int64_t count) {
  KILN_DISPATCH(narrow<false>, src, dst, count);
}
void narrowBf16(const float *src, uint16_t *dst, int64_t count) {
  KILN_DISPATCH(narrow<true>, src, dst, count);
}
void gemvRowsF16(const float *x, const uint16_t *w, float *y, int64_t in,
                 int64_t rows) {
  KILN_DISPATCH(gemv<false>, x, w, y, in, rows);
}
void gemvRowsBf16(const float *x, const uint16_t *w, float *y, int64_t in,
                  int64_t rows) {
  KILN_DISPATCH(gemv<true>, x, w, y, in, rows);
}
#undef KILN_DISPATCH

} // namespace kiln::rt::cpu
