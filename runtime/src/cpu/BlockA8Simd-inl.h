//===- BlockA8Simd-inl.h - int8-activation block dots (one ISA) -*- C++ -*-===//
//
// Included by BlockA8Kernels.cpp once per instruction set, inside a
// namespace and a `#pragma GCC target` region, after it defines
//
//   __m256i A8Dot(__m256i u, __m256i s)
//
// whose int32 lane j is sum_{k < 4} u[4j + k] * s[4j + k] for unsigned bytes
// u and signed bytes s (AVX-512 VNNI / AVX-VNNI vpdpbusd, or AVX2
// vpmaddubsw + vpmaddwd; every u here is below 64 or, for Q8_0, |w| <= 128,
// so vpmaddubsw's int16 pair sums cannot saturate).
//
// One 32-element chunk of a weight row at a time: its codes as unsigned bytes
// u (value = a * (u - z) + b per 16- or 32-element group, block_formats.h),
// dotted with the chunk's int8 activations, the zero point z (a power of
// two) subtracted in integers with the activations' 4-element sums, the
// group multipliers a * d_x applied in float. Offsets b (mins) are added as
// b * d_x * sum(q_x) from the 16-element sums (A8Row::s16).
//
// The scalar min terms use std::fma explicitly, so that a row's result does
// not depend on how many rows are computed together (floating-point
// contraction would otherwise differ between the unrolled variants).
//
// No include guard: included more than once on purpose.
//
//===----------------------------------------------------------------------===//

/// The f16 field at p (F16C; exact).
static inline float A8F16(const uint8_t *p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

static inline float A8Hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

/// 16 bytes of nibbles as 32 bytes: low nibbles (elements 0..15), then high
/// nibbles (16..31): the Q4_0 / Q4_1 / Q5_x element order.
static inline __m256i A8NibblesLoHi(const uint8_t *p) {
  __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i *>(p));
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q),
                          _mm256_set1_epi8(0x0f));
}

/// Byte j = 0x10 if bit j of the little-endian 32-bit word at p is set, else
/// 0 (the fifth bits of Q5_0 / Q5_1).
static inline __m256i A8FifthBits(const uint8_t *p) {
  uint32_t bits;
  std::memcpy(&bits, p, 4);
  const __m256i spread = _mm256_setr_epi8(
      0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, //
      2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
  __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32(int32_t(bits)), spread);
  // Byte j holds bit (j % 8) of its source byte: all other bits set, so the
  // byte is 0xff exactly when that bit is.
  v = _mm256_or_si256(v, _mm256_set1_epi64x(int64_t(0x7fbfdfeff7fbfdfeULL)));
  v = _mm256_cmpeq_epi8(v, _mm256_set1_epi64x(-1));
  return _mm256_and_si256(v, _mm256_set1_epi8(0x10));
}

/// acc += float(dot(u, s) - (sum of 4 s) << Z) * mult, lane by lane (Z < 0:
/// no zero point).
template <int Z>
static inline __m256 A8Chunk(__m256 acc, __m256i u, __m256i s,
                             const int32_t *s4, __m256 mult) {
  __m256i lanes = A8Dot(u, s);
  if constexpr (Z >= 0)
    lanes = _mm256_sub_epi32(
        lanes, _mm256_slli_epi32(
                   _mm256_loadu_si256(reinterpret_cast<const __m256i *>(s4)), Z));
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(lanes), mult, acc);
}

static inline __m256i A8Load(const void *p) {
  return _mm256_loadu_si256(static_cast<const __m256i *>(p));
}

/// Multipliers a_lo for lanes 0..3 (elements 0..15), a_hi for 4..7.
static inline __m256 A8Halves(float lo, float hi) {
  return _mm256_set_m128(_mm_set1_ps(hi), _mm_set1_ps(lo));
}

/// Block b of one row in format F (at w) dotted with the activations: into
/// acc (lanes) and off (the mins: sum of b * d_x * sum(q_x)).
template <int64_t F>
static inline void A8Block(const A8Row &a, int64_t b, const uint8_t *w,
                           __m256 &acc, float &off) {
  const __m256i low4 = _mm256_set1_epi8(0x0f), low2 = _mm256_set1_epi8(0x03),
                one = _mm256_set1_epi8(0x01);
  if constexpr (kiln_block_elems(F) == 32) {
    {
      const __m256i xq = A8Load(a.q + 32 * b);
      const int32_t *s4 = a.s4 + 8 * b;
      const float dx = a.d[b], d = A8F16(w);
      const __m256 mult = _mm256_set1_ps(d * dx);
      if constexpr (F == KILN_BLOCK_Q8_0) {
        const __m256i q = A8Load(w + 2);
        acc = A8Chunk<-1>(acc, _mm256_sign_epi8(q, q), _mm256_sign_epi8(xq, q),
                          s4, mult);
      } else if constexpr (F == KILN_BLOCK_Q4_0) {
        acc = A8Chunk<3>(acc, A8NibblesLoHi(w + 2), xq, s4, mult);
      } else if constexpr (F == KILN_BLOCK_Q4_1) {
        acc = A8Chunk<-1>(acc, A8NibblesLoHi(w + 4), xq, s4, mult);
        off = std::fma(A8F16(w + 2), a.s16[2 * b] + a.s16[2 * b + 1], off);
      } else if constexpr (F == KILN_BLOCK_Q5_0) {
        const __m256i u = _mm256_or_si256(A8NibblesLoHi(w + 6), A8FifthBits(w + 2));
        acc = A8Chunk<4>(acc, u, xq, s4, mult);
      } else { // Q5_1
        const __m256i u = _mm256_or_si256(A8NibblesLoHi(w + 8), A8FifthBits(w + 4));
        acc = A8Chunk<-1>(acc, u, xq, s4, mult);
        off = std::fma(A8F16(w + 2), a.s16[2 * b] + a.s16[2 * b + 1], off);
      }
    }
    return;
  }
  {
    const int8_t *xq = a.q + 256 * b;
    const int32_t *s4 = a.s4 + 64 * b;
    const float *dx = a.d + 8 * b, *s16 = a.s16 + 16 * b;
    if constexpr (F == KILN_BLOCK_Q4_K || F == KILN_BLOCK_Q5_K) {
      constexpr bool kFive = F == KILN_BLOCK_Q5_K;
      const float d = A8F16(w), dmin = A8F16(w + 2);
      const uint8_t *sc = w + 4, *qs = w + (kFive ? 48 : 16);
      const __m256i qh = kFive ? A8Load(w + 16) : _mm256_setzero_si256();
      for (int c = 0; c < 4; ++c) {
        const __m256i q = A8Load(qs + 32 * c);
        __m256i lo = _mm256_and_si256(q, low4);
        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
        if constexpr (kFive) {
          // Bit j of qh[l] is the fifth bit of element l of sub-block j.
          const __m128i sl = _mm_cvtsi32_si128(2 * c), sh = _mm_cvtsi32_si128(2 * c + 1);
          lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srl_epi16(qh, sl), one), 4));
          hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srl_epi16(qh, sh), one), 4));
        }
        for (int n = 0; n < 2; ++n) {
          const int j = 2 * c + n;
          uint8_t scale, min;
          kiln_block_k4_scale_min(sc, j, &scale, &min);
          acc = A8Chunk<-1>(acc, n ? hi : lo, A8Load(xq + 32 * j), s4 + 8 * j,
                            _mm256_set1_ps(d * float(scale) * dx[j]));
          off = std::fma(-dmin * float(min), s16[2 * j] + s16[2 * j + 1], off);
        }
      }
    } else if constexpr (F == KILN_BLOCK_Q6_K) {
      const int8_t *sc = reinterpret_cast<const int8_t *>(w + 192);
      const float d = A8F16(w + 208);
      for (int h = 0; h < 2; ++h) {
        const __m256i qh = A8Load(w + 128 + 32 * h);
        const __m256i qa = A8Load(w + 64 * h), qb = A8Load(w + 64 * h + 32);
        const __m256i u[4] = {
            _mm256_or_si256(_mm256_and_si256(qa, low4),
                            _mm256_slli_epi16(_mm256_and_si256(qh, low2), 4)),
            _mm256_or_si256(_mm256_and_si256(qb, low4),
                            _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), low2), 4)),
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(qa, 4), low4),
                            _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), low2), 4)),
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(qb, 4), low4),
                            _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), low2), 4))};
        for (int k = 0; k < 4; ++k) {
          const int j = 4 * h + k; // 32-element chunk: sub-blocks 2j, 2j + 1
          acc = A8Chunk<5>(acc, u[k], A8Load(xq + 32 * j), s4 + 8 * j,
                           A8Halves(d * float(sc[2 * j]) * dx[j],
                                    d * float(sc[2 * j + 1]) * dx[j]));
        }
      }
    } else if constexpr (F == KILN_BLOCK_Q2_K) {
      const uint8_t *sc = w;
      const float d = A8F16(w + 80), dmin = A8F16(w + 82);
      for (int j = 0; j < 8; ++j) {
        const __m128i shift = _mm_cvtsi32_si128(2 * (j % 4));
        const __m256i u = _mm256_and_si256(
            _mm256_srl_epi16(A8Load(w + 16 + 32 * (j / 4)), shift), low2);
        acc = A8Chunk<-1>(acc, u, A8Load(xq + 32 * j), s4 + 8 * j,
                          A8Halves(d * float(sc[2 * j] & 0x0f) * dx[j],
                                   d * float(sc[2 * j + 1] & 0x0f) * dx[j]));
        off = std::fma(-dmin * float(sc[2 * j] >> 4), s16[2 * j], off);
        off = std::fma(-dmin * float(sc[2 * j + 1] >> 4), s16[2 * j + 1], off);
      }
    } else { // Q3_K
      const uint8_t *sc = w + 96;
      const float d = A8F16(w + 108);
      const __m256i hmask = A8Load(w);
      auto scale = [&](int g) {
        int low = (g < 8 ? sc[g] : sc[g - 8] >> 4) & 0x0f;
        int high = (sc[8 + g % 4] >> (2 * (g / 4))) & 3;
        return float(int8_t(uint8_t(low | (high << 4))) - 32);
      };
      for (int j = 0; j < 8; ++j) {
        const __m128i shift = _mm_cvtsi32_si128(2 * (j % 4));
        const __m256i low = _mm256_and_si256(
            _mm256_srl_epi16(A8Load(w + 32 + 32 * (j / 4)), shift), low2);
        const __m256i high = _mm256_and_si256(
            _mm256_srl_epi16(hmask, _mm_cvtsi32_si128(j)), one);
        // q = low - (high ? 0 : 4) = u - 4 with u = low + 4 * high.
        const __m256i u = _mm256_or_si256(low, _mm256_slli_epi16(high, 2));
        acc = A8Chunk<2>(acc, u, A8Load(xq + 32 * j), s4 + 8 * j,
                         A8Halves(d * scale(2 * j) * dx[j],
                                  d * scale(2 * j + 1) * dx[j]));
      }
    }
  }
}

/// y[r * ldy] = dot(decoded row r, dequantized activations) for r < R: R
/// rows of format F, rowBytes apart, sharing each activation load.
template <int64_t F, int R>
static inline void A8RowsDot(const A8Row &a, const uint8_t *w,
                             int64_t rowBytes, float *y, int64_t ldy,
                             int64_t in) {
  constexpr int64_t kBytes = kiln_block_bytes(F);
  __m256 acc[R];
  float off[R];
  for (int r = 0; r < R; ++r) {
    acc[r] = _mm256_setzero_ps();
    off[r] = 0.0f;
  }
  // One prefetch per 64-byte line of the next R rows (PrefetchNextRows).
  constexpr int64_t kEvery = kBytes >= 64 ? 1 : 64 / kBytes;
  for (int64_t b = 0; b < in / kiln_block_elems(F); ++b) {
    if (b % kEvery == 0)
      PrefetchNextRows<R>(w, rowBytes, b * kBytes, kBytes >= 64 ? kBytes : 1);
    for (int r = 0; r < R; ++r)
      A8Block<F>(a, b, w + r * rowBytes + b * kBytes, acc[r], off[r]);
  }
  for (int r = 0; r < R; ++r)
    y[r * ldy] = A8Hsum(acc[r]) + off[r];
}

/// y[r * ldy] = dot(decoded row r, dequantized activations) for r < rows
/// (rows of in / elems blocks), four rows at a time.
static void A8Rows(int64_t format, const A8Row &a, const uint8_t *w, float *y,
                   int64_t ldy, int64_t in, int64_t rows) {
  switch (format) {
#define KILN_A8_CASE(f)                                                        \
  case f: {                                                                    \
    const int64_t rowBytes = in / kiln_block_elems(f) * kiln_block_bytes(f);   \
    int64_t r = 0;                                                             \
    for (; r + 4 <= rows; r += 4)                                              \
      A8RowsDot<f, 4>(a, w + r * rowBytes, rowBytes, y + r * ldy, ldy, in);    \
    for (; r < rows; ++r)                                                      \
      A8RowsDot<f, 1>(a, w + r * rowBytes, rowBytes, y + r * ldy, ldy, in);    \
    return;                                                                    \
  }
    KILN_BLOCK_FORMATS(KILN_A8_CASE)
#undef KILN_A8_CASE
  default:
    return;
  }
}
