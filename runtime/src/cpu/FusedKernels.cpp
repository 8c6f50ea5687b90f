//===- FusedKernels.cpp - primitives of generated fused kernels -----------===//
//
// kernel_abi.h, "Fused kernels": what the C++ that codegen emits for a
// kiln.fused region calls. The generated function owns the loop structure
// (tiles of output rows, the epilogue applied while a tile is in cache);
// the runtime owns the threads and the inner products of every weight
// format, the same row kernels the unfused linears use.
//
//===----------------------------------------------------------------------===//
#include "cpu/Kernels.h"
#include "cpu/ThreadPool.h"
#include "kiln_rt/block_formats.h"
#include "kiln_rt/kernel_abi.h"

#include "cpu/Blas.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <vector>

namespace kiln::rt::cpu {
namespace {

/// Work (multiply-adds) below which kiln_k_parallel_for stays on the calling
/// thread; the unfused kernels' grain.
constexpr int64_t kParallelGrain = 1 << 17;

/// Reduction depth of one dequantized weight tile of a prefill tile (a
/// multiple of 256, so every block format's tile starts on a block).
constexpr int64_t kTileDepth = 512;
/// Most tokens kiln_k_linear_tile runs through batchedGemvTile (decode once,
/// dot per token); more go through the GEMM, and so do 16 or more where
/// AMX runs the GEMM. Measured on a Q4_1 576x1536 linear, one thread of a
/// 2-core AMD EPYC, OpenBLAS sgemm path / batched path in ms: 2 tokens
/// 0.71 / 0.25, 4: 0.65 / 0.24, 8: 0.74 / 0.31, 16: 0.75 / 0.51, 24: 0.92 /
/// 0.73, 32: 1.08 / 0.93.
constexpr int64_t kBatchedGemvTokens = 32;

/// Per-thread scratch: slots 0-3 for generated code (kiln_k_scratch), 4-5
/// for kiln_k_linear_tile.
float *threadScratch(int slot, int64_t count) {
  thread_local std::vector<float> buffers[6];
  std::vector<float> &b = buffers[slot];
  if (b.size() < size_t(count))
    b.resize(size_t(count));
  return b.data();
}

/// Bytes of one weight row of `w` for `in` inputs (W8 and F32 count
/// elements, which the callers scale).
int64_t rowBytes(const kiln_linear_weight &w, int64_t in) {
  switch (w.kind) {
  case KILN_WEIGHT_BLOCKS:
    return in / kiln_block_elems(w.format) * kiln_block_bytes(w.format);
  case KILN_WEIGHT_W4:
    return q4RowBytes(in);
  case KILN_WEIGHT_W8:
    return in;
  case KILN_WEIGHT_F16:
  case KILN_WEIGHT_BF16:
    return in * 2;
  default:
    return in * int64_t(sizeof(float));
  }
}

/// Group size of a W4 weight (a non-positive one, never emitted, is one
/// group per row, as kiln_k_linear_w4a16 treats it).
int64_t q4GroupSize(const kiln_linear_weight &w, int64_t in) {
  return w.group_size > 0 ? w.group_size : in + (in & 1);
}

/// Scale groups per row of a W8/W4 weight (1 for W8 per channel).
int64_t groupsOf(const kiln_linear_weight &w, int64_t in) {
  if (w.kind == KILN_WEIGHT_W4)
    return q4Groups(in, q4GroupSize(w, in));
  return w.group_size > 0 ? (in + w.group_size - 1) / w.group_size : 1;
}

/// Decode: one token, rows [o0, o1) into c[0, o1 - o0).
void gemvTile(const kiln_linear_weight &w, const float *x, int64_t in,
              int64_t o0, int64_t o1, float *c) {
  const int64_t rows = o1 - o0;
  const auto *base = static_cast<const uint8_t *>(w.data);
  switch (w.kind) {
  case KILN_WEIGHT_F32:
    gemvRows(x, static_cast<const float *>(w.data) + o0 * in, c, in, 0, rows);
    return;
  case KILN_WEIGHT_F16:
    gemvRowsF16(x, static_cast<const uint16_t *>(w.data) + o0 * in, c, in,
                rows);
    return;
  case KILN_WEIGHT_BF16:
    gemvRowsBf16(x, static_cast<const uint16_t *>(w.data) + o0 * in, c, in,
                 rows);
    return;
  case KILN_WEIGHT_BLOCKS: {
    if (w.act_quant == KILN_ACT_INT8_PER_BLOCK) {
      linearBlocksA8(w.format, x, 1, in, base + o0 * rowBytes(w, in), rows, c,
                     rows);
      return;
    }
    float *xsum16 = threadScratch(4, in / 16);
    blockXSums16(x, in, xsum16);
    gemvRowsBlocksSimd(w.format, x, xsum16, base + o0 * rowBytes(w, in), c,
                       in, rows);
    return;
  }
  case KILN_WEIGHT_W8:
    gemvRowsI8(x, reinterpret_cast<const int8_t *>(base) + o0 * in,
               w.scales + o0 * groupsOf(w, in), c, in, rows, w.group_size);
    return;
  case KILN_WEIGHT_W4: {
    int64_t g = groupsOf(w, in);
    gemvRowsQ4(x, reinterpret_cast<const int8_t *>(base) + o0 * rowBytes(w, in),
               w.scales + o0 * g, w.zeros + o0 * g, c, in, rows,
               q4GroupSize(w, in));
    return;
  }
  default:
    return; // never emitted: codegen writes one of the kinds above
  }
}

/// Row o, columns [k0, k0 + depth), of `w` as float into dst.
void dequantRow(const kiln_linear_weight &w, int64_t in, int64_t o, int64_t k0,
                int64_t depth, float *dst) {
  const auto *base = static_cast<const uint8_t *>(w.data);
  switch (w.kind) {
  case KILN_WEIGHT_BLOCKS: {
    int64_t elems = kiln_block_elems(w.format), bytes = kiln_block_bytes(w.format);
    kiln_block_decode_row(w.format, base + o * rowBytes(w, in) + k0 / elems * bytes,
                          depth, dst);
    return;
  }
  case KILN_WEIGHT_W8: {
    const int8_t *q = reinterpret_cast<const int8_t *>(base) + o * in;
    if (w.group_size > 0)
      dequantRowI8(q, w.scales + o * groupsOf(w, in), dst, k0, depth,
                   w.group_size);
    else // per channel: the row scale is applied to the finished sums
      widenI8(q + k0, dst, depth);
    return;
  }
  case KILN_WEIGHT_F16:
    widenF16(static_cast<const uint16_t *>(w.data) + o * in + k0, dst, depth);
    return;
  case KILN_WEIGHT_BF16:
    widenBf16(static_cast<const uint16_t *>(w.data) + o * in + k0, dst, depth);
    return;
  case KILN_WEIGHT_W4: {
    int64_t g = groupsOf(w, in);
    dequantRowQ4(reinterpret_cast<const int8_t *>(base) + o * rowBytes(w, in),
                 w.scales + o * g, w.zeros + o * g, dst, k0, depth,
                 q4GroupSize(w, in));
    return;
  }
  default:
    return;
  }
}

/// Prefill: rows [o0, o1) for n tokens, c[t * ldc + r]. Float weights go
/// straight to gemmDenseF32; the others are dequantized kTileDepth columns at a
/// time into a float tile and accumulated.
void gemmTile(const kiln_linear_weight &w, const float *x, int64_t n,
              int64_t in, int64_t o0, int64_t o1, float *c, int64_t ldc) {
  const int64_t rows = o1 - o0;
  if (w.kind == KILN_WEIGHT_BLOCKS && w.act_quant == KILN_ACT_INT8_PER_BLOCK) {
    if (n < kA8FloatTokens) {
      linearBlocksA8(w.format, x, n, in,
                     static_cast<const uint8_t *>(w.data) + o0 * rowBytes(w, in),
                     rows, c, ldc);
      return;
    }
    // kiln_k_linear_blocks_a8's prefill: dequantized activations, then the
    // float path below.
    x = loopDequantizedA8Input(x, n, in);
  }
  if (w.kind == KILN_WEIGHT_F32) {
    gemmDenseF32(x, n, in, static_cast<const float *>(w.data) + o0 * in, rows,
                 c, ldc);
    return;
  }
  float *tile = threadScratch(5, rows * std::min(kTileDepth, in));
  for (int64_t k0 = 0; k0 < in; k0 += kTileDepth) {
    int64_t depth = std::min(kTileDepth, in - k0);
    for (int64_t r = 0; r < rows; ++r)
      dequantRow(w, in, o0 + r, k0, depth, tile + r * depth);
    gemmWeightTile(x, n, in, k0, tile, rows, depth, c, ldc, k0 != 0);
  }
  if (w.kind == KILN_WEIGHT_W8 && w.group_size <= 0)
    for (int64_t t = 0; t < n; ++t)
      for (int64_t r = 0; r < rows; ++r)
        c[t * ldc + r] *= w.scales[o0 + r];
}

/// dots[t] = sum_k d[k] * x[t * in + k] for t < n (n <= kBatchedGemvTokens,
/// in a multiple of 8), in 8 lanes (k mod 8) reduced in a fixed tree at the
/// end: the same order for every token and every n, with or without AVX2
/// (the AVX2 + FMA version fuses each multiply-add; the portable one rounds
/// twice, as the machines without FMA must).
__attribute__((target("avx2,fma"))) inline float reduceLanes(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  __m128 s = _mm_add_ps(lo, hi);                 // lanes j + (j+4)
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));        // + (j+2)
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 0x55)); // + (j+1)
  return _mm_cvtss_f32(s);
}

/// dots[r * n + t] = dot(d[r], x[t]) for r < 2 and t < n: two decoded
/// weight rows against four tokens at a time (eight independent FMA chains,
/// each weight and token vector loaded once per 8 columns); a last group of
/// fewer tokens reads a zero row in the missing slots, so every (row,
/// token) is one chain over the columns in order, whatever n. Columns past
/// the last multiple of 8 (in % 8 of them) are summed in order in one
/// scalar FMA chain added to the reduced lanes.
__attribute__((target("avx2,fma"))) void
dotRowsWithTokensAvx2(const float *__restrict d0, const float *__restrict d1,
                      const float *__restrict x, int64_t n, int64_t in,
                      float *__restrict dots) {
  alignas(32) static const float zeros[8] = {};
  const int64_t in8 = in & ~int64_t(7);
  for (int64_t t = 0; t < n; t += 4) {
    // Missing tokens read the zero row at a fixed address (stride 0).
    const float *p0 = x + t * in;
    const float *p1 = t + 1 < n ? x + (t + 1) * in : zeros;
    const float *p2 = t + 2 < n ? x + (t + 2) * in : zeros;
    const float *p3 = t + 3 < n ? x + (t + 3) * in : zeros;
    const int64_t s1 = t + 1 < n ? 1 : 0, s2 = t + 2 < n ? 1 : 0,
                  s3 = t + 3 < n ? 1 : 0;
    __m256 a00 = _mm256_setzero_ps(), a01 = a00, a02 = a00, a03 = a00;
    __m256 a10 = a00, a11 = a00, a12 = a00, a13 = a00;
    for (int64_t k = 0; k < in8; k += 8) {
      const __m256 w0 = _mm256_loadu_ps(d0 + k), w1 = _mm256_loadu_ps(d1 + k);
      __m256 v = _mm256_loadu_ps(p0 + k);
      a00 = _mm256_fmadd_ps(w0, v, a00);
      a10 = _mm256_fmadd_ps(w1, v, a10);
      v = _mm256_loadu_ps(p1 + s1 * k);
      a01 = _mm256_fmadd_ps(w0, v, a01);
      a11 = _mm256_fmadd_ps(w1, v, a11);
      v = _mm256_loadu_ps(p2 + s2 * k);
      a02 = _mm256_fmadd_ps(w0, v, a02);
      a12 = _mm256_fmadd_ps(w1, v, a12);
      v = _mm256_loadu_ps(p3 + s3 * k);
      a03 = _mm256_fmadd_ps(w0, v, a03);
      a13 = _mm256_fmadd_ps(w1, v, a13);
    }
    const float r[2][4] = {{reduceLanes(a00), reduceLanes(a01),
                            reduceLanes(a02), reduceLanes(a03)},
                           {reduceLanes(a10), reduceLanes(a11),
                            reduceLanes(a12), reduceLanes(a13)}};
    for (int64_t u = 0; u < 4 && t + u < n; ++u) {
      float out[2] = {r[0][u], r[1][u]};
      if (in8 != in) {
        const float *xr = x + (t + u) * in;
        for (int64_t j = 0; j < 2; ++j) {
          const float *d = j ? d1 : d0;
          float tail = 0.0f;
          for (int64_t k = in8; k < in; ++k)
            tail = std::fma(d[k], xr[k], tail);
          out[j] += tail;
        }
      }
      dots[t + u] = out[0];
      dots[n + t + u] = out[1];
    }
  }
}

/// dots[r] = dot(d + r * in, x) for r < rows: dotRowsWithTokensAvx2's
/// (row, token) chain for a single token, four rows at a time (four
/// independent FMA chains, no zero padding): the same floats as the
/// batched kernel gives that token among any others.
__attribute__((target("avx2,fma"))) void
dotRowsOneTokenAvx2(const float *__restrict d, int64_t rows,
                    const float *__restrict x, int64_t in,
                    float *__restrict dots) {
  const int64_t in8 = in & ~int64_t(7);
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) {
    const float *e0 = d + r * in, *e1 = e0 + in, *e2 = e1 + in, *e3 = e2 + in;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t k = 0; k < in8; k += 8) {
      const __m256 v = _mm256_loadu_ps(x + k);
      a0 = _mm256_fmadd_ps(_mm256_loadu_ps(e0 + k), v, a0);
      a1 = _mm256_fmadd_ps(_mm256_loadu_ps(e1 + k), v, a1);
      a2 = _mm256_fmadd_ps(_mm256_loadu_ps(e2 + k), v, a2);
      a3 = _mm256_fmadd_ps(_mm256_loadu_ps(e3 + k), v, a3);
    }
    dots[r] = reduceLanes(a0);
    dots[r + 1] = reduceLanes(a1);
    dots[r + 2] = reduceLanes(a2);
    dots[r + 3] = reduceLanes(a3);
  }
  for (; r < rows; ++r) {
    const float *e = d + r * in;
    __m256 a = _mm256_setzero_ps();
    for (int64_t k = 0; k < in8; k += 8)
      a = _mm256_fmadd_ps(_mm256_loadu_ps(e + k), _mm256_loadu_ps(x + k), a);
    dots[r] = reduceLanes(a);
  }
  if (in8 != in)
    for (int64_t q = 0; q < rows; ++q) {
      float tail = 0.0f;
      for (int64_t k = in8; k < in; ++k)
        tail = std::fma(d[q * in + k], x[k], tail);
      dots[q] += tail;
    }
}

/// The portable order of dotRowsWithTokensAvx2: 8 lanes (k mod 8) summed in
/// column order, reduced in the same tree, then the scalar tail (not fused:
/// machines without FMA round twice).
float dotPortable(const float *d, const float *x, int64_t in) {
  const int64_t in8 = in & ~int64_t(7);
  float acc[8] = {};
  for (int64_t k = 0; k < in8; k += 8)
    for (int64_t j = 0; j < 8; ++j)
      acc[j] += d[k + j] * x[k + j];
  float s = ((acc[0] + acc[4]) + (acc[2] + acc[6])) +
            ((acc[1] + acc[5]) + (acc[3] + acc[7]));
  if (in8 != in) {
    float tail = 0.0f;
    for (int64_t k = in8; k < in; ++k)
      tail += d[k] * x[k];
    s += tail;
  }
  return s;
}

void dotRowsWithTokensPortable(const float *d0, const float *d1,
                               const float *x, int64_t n, int64_t in,
                               float *dots) {
  for (int64_t r = 0; r < 2; ++r)
    for (int64_t t = 0; t < n; ++t)
      dots[r * n + t] = dotPortable(r ? d1 : d0, x + t * in, in);
}

/// kiln_block_decode_row for Q4_0, Q4_1 and Q8_0 in AVX2: the same
/// products and sums (d * (q - 8), d * q + m, d * q; multiply then add,
/// not fused), so the same floats as the reference decode.
__attribute__((target("avx2"))) inline __m256 widenBytes(__m128i bytes8,
                                                        bool isSigned) {
  return _mm256_cvtepi32_ps(isSigned ? _mm256_cvtepi8_epi32(bytes8)
                                     : _mm256_cvtepu8_epi32(bytes8));
}

/// One 32-element block of Q4_0, Q4_1 or Q8_0 as four vectors of eight
/// floats (elements 8j .. 8j + 7 in v[j]).
__attribute__((target("avx2"))) inline void
decodeLegacyBlockAvx2(int64_t format, const uint8_t *blk, __m256 v[4]) {
  const __m256 d = _mm256_set1_ps(kiln_block_f16(blk));
  if (format == KILN_BLOCK_Q8_0) {
    for (int j = 0; j < 4; ++j) {
      __m128i q =
          _mm_loadl_epi64(reinterpret_cast<const __m128i *>(blk + 2 + 8 * j));
      v[j] = _mm256_mul_ps(d, widenBytes(q, true));
    }
    return;
  }
  const __m128i low4 = _mm_set1_epi8(0x0f);
  const bool q41 = format == KILN_BLOCK_Q4_1;
  const __m128i qs =
      _mm_loadu_si128(reinterpret_cast<const __m128i *>(blk + (q41 ? 4 : 2)));
  const __m128i halves[2] = {_mm_and_si128(qs, low4),
                             _mm_and_si128(_mm_srli_epi16(qs, 4), low4)};
  const __m256 m = q41 ? _mm256_set1_ps(kiln_block_f16(blk + 2))
                       : _mm256_set1_ps(8.0f);
  for (int h = 0; h < 2; ++h)
    for (int j = 0; j < 2; ++j) {
      __m256 q = widenBytes(j ? _mm_srli_si128(halves[h], 8) : halves[h], false);
      v[2 * h + j] = q41 ? _mm256_add_ps(_mm256_mul_ps(d, q), m)
                         : _mm256_mul_ps(d, _mm256_sub_ps(q, m));
    }
}

__attribute__((target("avx2"))) void
decodeLegacyRowAvx2(int64_t format, const uint8_t *row, int64_t in,
                    float *out) {
  const int64_t bytes = kiln_block_bytes(format);
  for (int64_t b = 0; b < in / 32; ++b, row += bytes, out += 32) {
    __m256 v[4];
    decodeLegacyBlockAvx2(format, row, v);
    for (int j = 0; j < 4; ++j)
      _mm256_storeu_ps(out + 8 * j, v[j]);
  }
}

/// out[r] = dot(decoded row r, x) for r < rows of Q4_0 / Q4_1 / Q8_0
/// blocks (rows `rowBytes` apart from w): the blocks decoded in registers
/// (decodeLegacyBlockAvx2, the floats decodeLegacyRowAvx2 stores) and
/// dotted in column order in one FMA chain per row, four rows at a time:
/// the bits dotRowsOneTokenAvx2 gives on the decoded rows, without
/// writing them out.
__attribute__((target("avx2,fma"))) void
legacyRowsOneTokenAvx2(int64_t format, const uint8_t *w, int64_t rowBytes,
                       int64_t rows, const float *x, int64_t in, float *out) {
  const int64_t bytes = kiln_block_bytes(format), blocks = in / 32;
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) {
    __m256 a[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(),
                   _mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int64_t b = 0; b < blocks; ++b) {
      const float *xb = x + 32 * b;
      const __m256 x0 = _mm256_loadu_ps(xb), x1 = _mm256_loadu_ps(xb + 8),
                   x2 = _mm256_loadu_ps(xb + 16), x3 = _mm256_loadu_ps(xb + 24);
      for (int q = 0; q < 4; ++q) {
        __m256 v[4];
        decodeLegacyBlockAvx2(format, w + (r + q) * rowBytes + b * bytes, v);
        a[q] = _mm256_fmadd_ps(v[0], x0, a[q]);
        a[q] = _mm256_fmadd_ps(v[1], x1, a[q]);
        a[q] = _mm256_fmadd_ps(v[2], x2, a[q]);
        a[q] = _mm256_fmadd_ps(v[3], x3, a[q]);
      }
    }
    for (int q = 0; q < 4; ++q)
      out[r + q] = reduceLanes(a[q]);
  }
  for (; r < rows; ++r) {
    __m256 a = _mm256_setzero_ps();
    for (int64_t b = 0; b < blocks; ++b) {
      __m256 v[4];
      decodeLegacyBlockAvx2(format, w + r * rowBytes + b * bytes, v);
      for (int j = 0; j < 4; ++j)
        a = _mm256_fmadd_ps(v[j], _mm256_loadu_ps(x + 32 * b + 8 * j), a);
    }
    out[r] = reduceLanes(a);
  }
}

/// Row `o` of `w` as float into dst[in]: the AVX2 decode for the legacy
/// 32-element formats, dequantRow otherwise.
void decodeWholeRow(const kiln_linear_weight &w, int64_t in, int64_t o,
                    float *dst, bool avx2);

void dotRowsWithTokens(const float *d0, const float *d1, const float *x,
                       int64_t n, int64_t in, float *dots) {
  static const bool avx2 =
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (avx2)
    dotRowsWithTokensAvx2(d0, d1, x, n, in, dots);
  else
    dotRowsWithTokensPortable(d0, d1, x, n, in, dots);
}

void decodeWholeRow(const kiln_linear_weight &w, int64_t in, int64_t o,
                    float *dst, bool avx2) {
  if (avx2 && w.kind == KILN_WEIGHT_BLOCKS &&
      (w.format == KILN_BLOCK_Q4_0 || w.format == KILN_BLOCK_Q4_1 ||
       w.format == KILN_BLOCK_Q8_0)) {
    decodeLegacyRowAvx2(w.format,
                        static_cast<const uint8_t *>(w.data) + o * rowBytes(w, in),
                        in, dst);
    return;
  }
  dequantRow(w, in, o, 0, in, dst);
}

/// Batched decode (the serving engine's steps of a few rows): rows
/// [o0, o1) for 2 <= n <= kBatchedGemvTokens tokens. Each weight row is
/// decoded to float once and dotted with every token's row, so the weights
/// are read and decoded once per step, not once per token, and no GEMM
/// packing is paid. A token's result depends on its own row only, in the
/// same summation order for any n in this range.
void batchedGemvTile(const kiln_linear_weight &w, const float *x, int64_t n,
                     int64_t in, int64_t o0, int64_t o1, float *c,
                     int64_t ldc) {
  if (w.kind == KILN_WEIGHT_BLOCKS && w.act_quant == KILN_ACT_INT8_PER_BLOCK)
    x = loopDequantizedA8Input(x, n, in); // the A8 formula's d_b * q_i
  float *rows = threadScratch(5, 2 * in);
  float dots[2 * kBatchedGemvTokens];
  static const bool avx2 = __builtin_cpu_supports("avx2");
  for (int64_t o = o0; o < o1; o += 2) {
    // Two weight rows at a time (the last one alone: its pair repeats it).
    const bool pair = o + 1 < o1;
    decodeWholeRow(w, in, o, rows, avx2);
    if (pair)
      decodeWholeRow(w, in, o + 1, rows + in, avx2);
    dotRowsWithTokens(rows, pair ? rows + in : rows, x, n, in, dots);
    for (int64_t r = 0; r < (pair ? 2 : 1); ++r) {
      const float scale = w.kind == KILN_WEIGHT_W8 && w.group_size <= 0
                              ? w.scales[o + r]
                              : 1.0f;
      for (int64_t t = 0; t < n; ++t)
        c[t * ldc + (o + r - o0)] = dots[r * n + t] * scale;
    }
  }
}

/// Most tokens multiTokenGemvTile runs (instead of the GEMM). Measured on a
/// Q4_1 576x1536 linear, one thread of a 2-core AMD EPYC (AVX-512), in ms,
/// multiTokenGemvTile / batchedGemvTile: 1 token (the GEMV) 0.080, 2: 0.115
/// / 0.214, 4: 0.152 / 0.232, 8: 0.236 / 0.372, 16: 0.460 / 0.619, 32:
/// 0.927 / 1.149 (the sgemm path: 1.08 at 32, above); Q4_K 1536x576: 1
/// token 0.049, 2: 0.093 / 0.302, 4: 0.136 / 0.341, 8: 0.287 / 0.475, 32:
/// 1.159 / 1.284.
constexpr int64_t kMultiTokenGemvTokens = 32;

/// Few-row steps of the GGML block formats without activation quantization
/// (hasMultiTokenBlockGemv: the legacy formats, Q4_K, Q5_K, Q6_K): rows
/// [o0, o1) for 2 <= n <=
/// kMultiTokenGemvTokens tokens by gemvTokensBlocksSimd, the decode GEMV
/// with each block's codes widened and dequantized in registers once for up
/// to 8 tokens (speculative verification, the engine's batched decode). A
/// token's result depends on its own row only (the same operations for any
/// n), and equals gemvTile's up to float summation order.
void multiTokenGemvTile(const kiln_linear_weight &w, const float *x, int64_t n,
                        int64_t in, int64_t o0, int64_t o1, float *c,
                        int64_t ldc) {
  float *xsum16 = threadScratch(4, n * (in / 16));
  for (int64_t t = 0; t < n; ++t)
    blockXSums16(x + t * in, in, xsum16 + t * (in / 16));
  gemvTokensBlocksSimd(w.format, x, xsum16,
                       static_cast<const uint8_t *>(w.data) +
                           o0 * rowBytes(w, in),
                       c, ldc, in, o1 - o0, n);
}

/// Engines and sessions that asked for batch-invariant linears (see
/// acquireBatchInvariantKernels).
std::atomic<int> batchInvariantUsers{0};

/// Weight rows decoded at once by invariantTile, and tokens dotted with
/// them per pass: 64 decoded rows and 32 token rows of a 576-wide linear
/// are 221 KiB, within L2.
constexpr int64_t kInvariantRows = 64;
constexpr int64_t kInvariantTokens = 32;

/// Batch-invariant linear: rows [o0, o1) for any n >= 1 tokens, every
/// output c[t, r] one FMA chain of decoded row r against token row t in
/// column order (8 lanes, a fixed reduction tree, the in % 8 tail last),
/// so a token's outputs depend on its own row only and are bit-identical
/// whatever n, o0, o1 and the thread count (dotRowsWithTokensAvx2). The
/// price against kiln_k_linear_tile's default paths: every weight format is
/// decoded to float before the dot (no integer-times-x GEMVs, no GEMM
/// packing), measured in docs/serving.md.
void invariantTile(const kiln_linear_weight &w, const float *x, int64_t n,
                   int64_t in, int64_t o0, int64_t o1, float *c,
                   int64_t ldc) {
  if (w.kind == KILN_WEIGHT_BLOCKS && w.act_quant == KILN_ACT_INT8_PER_BLOCK)
    x = loopDequantizedA8Input(x, n, in); // the A8 formula's d_b * q_i
  static const bool avx2 =
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (n == 1 && avx2 && w.kind == KILN_WEIGHT_BLOCKS &&
      (w.format == KILN_BLOCK_Q4_0 || w.format == KILN_BLOCK_Q4_1 ||
       w.format == KILN_BLOCK_Q8_0)) {
    // Decode: the blocks decoded in registers, the same bits.
    const int64_t rb = rowBytes(w, in);
    legacyRowsOneTokenAvx2(w.format,
                           static_cast<const uint8_t *>(w.data) + o0 * rb, rb,
                           o1 - o0, x, in, c);
    return;
  }
  const bool dense = w.kind == KILN_WEIGHT_F32;
  float *decoded = dense ? nullptr : threadScratch(5, kInvariantRows * in);
  float dots[2 * kInvariantTokens];
  for (int64_t r0 = o0; r0 < o1; r0 += kInvariantRows) {
    const int64_t r1 = std::min(r0 + kInvariantRows, o1), rows = r1 - r0;
    const float *d = decoded;
    if (dense)
      d = static_cast<const float *>(w.data) + r0 * in;
    else
      for (int64_t r = 0; r < rows; ++r)
        decodeWholeRow(w, in, r0 + r, decoded + r * in, avx2);
    auto scaleOf = [&](int64_t o) {
      return w.kind == KILN_WEIGHT_W8 && w.group_size <= 0 ? w.scales[o]
                                                           : 1.0f;
    };
    if (n == 1) {
      float *out = c + (r0 - o0);
      if (avx2)
        dotRowsOneTokenAvx2(d, rows, x, in, out);
      else
        for (int64_t r = 0; r < rows; ++r)
          out[r] = dotPortable(d + r * in, x, in);
      for (int64_t r = 0; r < rows; ++r)
        out[r] *= scaleOf(r0 + r);
      continue;
    }
    for (int64_t t0 = 0; t0 < n; t0 += kInvariantTokens) {
      const int64_t nt = std::min(kInvariantTokens, n - t0);
      for (int64_t o = r0; o < r1; o += 2) {
        const bool pair = o + 1 < r1;
        const float *e = d + (o - r0) * in;
        dotRowsWithTokens(e, pair ? e + in : e, x + t0 * in, nt, in, dots);
        for (int64_t r = 0; r < (pair ? 2 : 1); ++r) {
          const float scale = scaleOf(o + r);
          for (int64_t t = 0; t < nt; ++t)
            c[(t0 + t) * ldc + (o + r - o0)] = dots[r * nt + t] * scale;
        }
      }
    }
  }
}

} // namespace
} // namespace kiln::rt::cpu

namespace kiln::rt::cpu {
void acquireBatchInvariantKernels() { batchInvariantUsers.fetch_add(1); }
void releaseBatchInvariantKernels() { batchInvariantUsers.fetch_sub(1); }
bool batchInvariantKernels() { return batchInvariantUsers.load() > 0; }
} // namespace kiln::rt::cpu

using namespace kiln::rt::cpu;

extern "C" {

void kiln_k_linear_tile(const kiln_linear_weight *w, const float *x, int64_t n,
                        int64_t in, int64_t o0, int64_t o1, float *c,
                        int64_t ldc) {
  if (n <= 0 || o1 <= o0)
    return;
  if (in <= 0) {
    for (int64_t t = 0; t < n; ++t)
      std::memset(c + t * ldc, 0, sizeof(float) * size_t(o1 - o0));
    return;
  }
  if (batchInvariantUsers.load(std::memory_order_relaxed) > 0) {
    invariantTile(*w, x, n, in, o0, o1, c, ldc);
    return;
  }
  const bool a8Integer = w->kind == KILN_WEIGHT_BLOCKS &&
                        w->act_quant == KILN_ACT_INT8_PER_BLOCK &&
                        n < kA8FloatTokens;
  if (n == 1)
    gemvTile(*w, x, in, o0, o1, c);
  else if (n <= kMultiTokenGemvTokens && w->kind == KILN_WEIGHT_BLOCKS &&
           w->act_quant != KILN_ACT_INT8_PER_BLOCK &&
           hasMultiTokenBlockGemv(w->format) &&
           !(n >= kAmxMinTokens && amxAvailable()))
    multiTokenGemvTile(*w, x, n, in, o0, o1, c, ldc);
  else if (n <= kBatchedGemvTokens && in % 8 == 0 &&
           w->kind != KILN_WEIGHT_F32 && !a8Integer &&
           !(n >= kAmxMinTokens && amxAvailable()))
    batchedGemvTile(*w, x, n, in, o0, o1, c, ldc);
  else
    gemmTile(*w, x, n, in, o0, o1, c, ldc);
}

void kiln_k_parallel_for(int64_t count, int64_t align, int64_t work,
                         void (*fn)(void *env, int64_t begin, int64_t end),
                         void *env) {
  if (count <= 0)
    return;
  // Too little work for threads: one chunk on the calling thread (its
  // boundaries never depend on the thread count either way).
  const bool parallel = work > kParallelGrain;
  parallelChunks(count, parallel ? chunkGrain(count, align) : count, parallel,
                 fn, env);
}

void kiln_k_rope_table(float *cs, int64_t n, int64_t pos, int64_t head_dim,
                       int64_t rot_dim, float theta) {
  const int64_t pairs = rot_dim / 2;
  for (int64_t i = 0; i < pairs; ++i) { // kiln_k_rope's inverse frequencies
    const float freq = 1.0f / powf(theta, float(2 * i) / float(head_dim));
    for (int64_t r = 0; r < n; ++r) {
      const float val = float(pos + r) * freq;
      cs[(r * pairs + i) * 2] = cosf(val);
      cs[(r * pairs + i) * 2 + 1] = sinf(val);
    }
  }
}

void kiln_k_widen(int32_t elem, const uint16_t *x, float *y, int64_t count) {
  if (count <= 0)
    return;
  if (elem == KILN_ELEM_BF16)
    widenBf16(x, y, count);
  else
    widenF16(x, y, count);
}

void kiln_k_narrow(int32_t elem, const float *x, uint16_t *y, int64_t count) {
  if (count <= 0)
    return;
  if (elem == KILN_ELEM_BF16)
    narrowBf16(x, y, count);
  else
    narrowF16(x, y, count);
}

float *kiln_k_scratch(int64_t slot, int64_t count) {
  return threadScratch(int(std::clamp<int64_t>(slot, 0, 3)), count);
}

} // extern "C"

/// Column range copy for any element size (kiln.slice_columns).
template <class T>
static void sliceColumns(const T *x, T *y, int64_t n, int64_t in,
                         int64_t offset, int64_t width) {
  for (int64_t t = 0; t < n; ++t)
    std::memcpy(y + t * width, x + t * in + offset, sizeof(T) * size_t(width));
}

extern "C" {
void kiln_k_slice_columns(const float *x, float *y, int64_t n, int64_t in,
                          int64_t offset, int64_t width) {
  sliceColumns(x, y, n, in, offset, width);
}
void kiln_k_slice_columns_f16(const kiln_f16_t *x, kiln_f16_t *y, int64_t n,
                              int64_t in, int64_t offset, int64_t width) {
  sliceColumns(x, y, n, in, offset, width);
}
void kiln_k_slice_columns_bf16(const kiln_bf16_t *x, kiln_bf16_t *y, int64_t n,
                               int64_t in, int64_t offset, int64_t width) {
  sliceColumns(x, y, n, in, offset, width);
}
} // extern "C"
