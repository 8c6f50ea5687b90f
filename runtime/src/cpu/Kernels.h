//===- Kernels.h - CPU kernels of the Kiln kernel ABI -------------*- C++
//-*-===//
//
// The kernel ABI itself is declared in kiln_rt/kernel_abi.h (exported C
// symbols); this header adds the internal helpers shared with the tests.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_RUNTIME_CPU_KERNELS_H
#define KILN_RUNTIME_CPU_KERNELS_H

#include "kiln_rt/kernel_abi.h"

#include <cstdint>
#include <cstring>

namespace kiln::rt::cpu {

/// y[r] = dot(w[r, :in], x[:in]) for rows [rowBegin, rowEnd); w row-major
/// [rows, in] float32. Single-threaded; SIMD-dispatched at load time.
void gemvRows(const float *x, const float *w, float *y, int64_t in,
              int64_t rowBegin, int64_t rowEnd);

/// The rotated key means m_t of the centered 8-bit KV caches (kernel_abi.h,
/// kiln_k_attention_kv8_centered) for t in [0, rows): out [rows, kvHeads *
/// headDim] from mu [kvHeads * headDim]. cos / sin exact at multiples of 64,
/// by complex multiplication in double in between: within 1e-12 of the direct
/// formula up to t = 20000 (4e-13 at 8192; beyond, the rounding of
/// double(t) * w_i in the direct formula dominates, ~t * 6e-17). -0 is
/// stored as +0. Rows spread over the thread pool.
void rotatedKeyMeans(const float *mu, int64_t rows, int64_t kvHeads,
                     int64_t headDim, int64_t rotDim, float theta, float *out);

//===----------------------------------------------------------------------===//
// 16-bit element types (f16, bf16)
//===----------------------------------------------------------------------===//

inline uint32_t floatBits(float f) { return kiln_float_bits(f); }
inline float bitsFloat(uint32_t u) { return kiln_bits_float(u); }

/// The scalar 16-bit conversions of kernel_abi.h (exact widening; round to
/// nearest even, overflow to inf, NaN kept quiet): the reference the SIMD
/// conversions match bit for bit, and what generated kernels use.
inline float f16ToFloat(uint16_t h) { return kiln_f16_to_float(h); }
inline uint16_t floatToF16(float f) { return kiln_float_to_f16(f); }
inline float bf16ToFloat(uint16_t h) { return kiln_bf16_to_float(h); }
inline uint16_t floatToBf16(float f) { return kiln_float_to_bf16(f); }

/// Instruction sets of the 16-bit paths, chosen once from CPUID.
enum class SimdLevel { Generic, Avx2, Avx512 };
/// The level in use (highest supported unless lowered for a test).
SimdLevel simdLevel();
/// Tests only: use `level` (must be supported) or lower; returns the previous.
SimdLevel setSimdLevelForTesting(SimdLevel level);
/// Highest level this CPU supports (Avx2 means AVX2 + FMA + F16C).
SimdLevel maxSimdLevel();

/// Row conversions, bit-identical to the scalar functions above at every
/// SIMD level.
void widenF16(const uint16_t *src, float *dst, int64_t count);
void widenBf16(const uint16_t *src, float *dst, int64_t count);
void narrowF16(const float *src, uint16_t *dst, int64_t count);
void narrowBf16(const float *src, uint16_t *dst, int64_t count);

/// y[r] = dot(w[r, :in], x[:in]) for r in [0, rows); w row-major f16 / bf16
/// read directly (converted in registers), x and y float32. Single-threaded.
void gemvRowsF16(const float *x, const uint16_t *w, float *y, int64_t in,
                 int64_t rows);
void gemvRowsBf16(const float *x, const uint16_t *w, float *y, int64_t in,
                  int64_t rows);

//===----------------------------------------------------------------------===//
// Quantized kernels on Google Highway (QuantKernelsHwy.cpp)
//===----------------------------------------------------------------------===//
//
// The functions below are compiled once per SIMD target Highway attains
// (AVX-512, AVX2, SSE4, scalar) and dispatched at run time to the best one
// this CPU supports.

/// Name of the Highway target the quantized kernels dispatch to now
/// ("AVX3", "AVX2", "SSE4", "SCALAR", ...).
const char *quantKernelTarget();
/// Tests only: restrict the quantized kernels to the Highway targets of
/// `level` (Generic: HWY_SCALAR; Avx2: AVX2 and below; Avx512: all).
/// setSimdLevelForTesting calls this, so one switch covers every kernel.
void setQuantKernelTargetsForTesting(SimdLevel level);

//===----------------------------------------------------------------------===//
// int8 weights (W8A16, W8A8)
//===----------------------------------------------------------------------===//

/// dst[i] = float(src[i]) (exact) for i < count. SIMD-dispatched.
void widenI8(const int8_t *src, float *dst, int64_t count);

/// dst[k] = scales[g] * float(q[begin + k]), g = (begin + k) / groupSize
/// (groupSize > 0), for k < count: elements [begin, begin + count) of one
/// group-wise int8 row dequantized (one rounding). SIMD-dispatched.
void dequantRowI8(const int8_t *q, const float *scales, float *dst,
                  int64_t begin, int64_t count, int64_t groupSize);

/// For r in [0, rows), q row-major int8 [rows, in] read directly (widened in
/// registers), x float32 [in]:
///   groupSize == 0: y[r] = scales[r] * dot(float(q[r, :]), x), scales [rows];
///   groupSize > 0:  y[r] = sum_g scales[r, g] * sum_{i in g} float(q[r, i])
///                   * x[i], scales [rows, ceil(in / groupSize)].
/// Single-threaded; SIMD-dispatched.
void gemvRowsI8(const float *x, const int8_t *q, const float *scales, float *y,
                int64_t in, int64_t rows, int64_t groupSize);

/// acc[t * rows + r] = sum_i int32(xq[t, i]) * int32(q[r, i]) for t < n,
/// r < rows: xq [n, in] and q [rows, in] row-major int8. Exact (int32) for
/// in < 133,000, hence bit-identical on every SIMD target. Single-threaded.
void gemmRowsI8I8(const int8_t *xq, int64_t n, const int8_t *q, int64_t in,
                  int64_t rows, int32_t *acc);

/// SmoothQuant-style activation quantization of one row (kernel_abi.h,
/// kiln_k_linear_w8a8): with actScale == 0 the scale is max_i |x[i]| / 127
/// (dynamic per token), else actScale (static per tensor);
/// xq[i] = clamp(roundf(x[i] / scale), -127, 127), round half away from zero;
/// a zero dynamic scale gives xq = 0. Returns the scale.
float quantizeActivationRow(const float *x, int8_t *xq, int64_t in,
                            float actScale);

//===----------------------------------------------------------------------===//
// FP8 E4M3FN (OCP 8-bit floating point, E4M3 "FN" variant)
//===----------------------------------------------------------------------===//
//
// OCP 8-bit Floating Point Specification (OFP8) rev. 1.0, 2023, E4M3: bit 7
// sign, bits 6..3 exponent (bias 7), bits 2..0 mantissa. Exponent 0 is
// subnormal, value (-1)^s * 2^-6 * m/8; exponents 1..15 are normal,
// (-1)^s * 2^(e-7) * (1 + m/8), except S.1111.111 which is NaN (the only NaN
// encodings, 0x7f and 0xff). There are no infinities: the largest finite
// magnitude is S.1111.110 = 448, the smallest subnormal 2^-9.

/// Exact E4M3FN -> float (every code is exactly representable).
inline float e4m3ToFloat(uint8_t code) {
  const uint32_t sign = uint32_t(code & 0x80u) << 24;
  const uint32_t exp = (code >> 3) & 0x0fu, mant = code & 0x07u;
  if (exp == 0x0f && mant == 0x07)
    return bitsFloat(sign | 0x7fc00000u); // NaN
  if (exp != 0) // normal: rebias 7 -> 127, mantissa to the top
    return bitsFloat(sign | ((exp + 120u) << 23) | (mant << 20));
  float mag = float(mant) * 0x1p-9f; // zero or subnormal, exact
  return sign ? -mag : mag;
}

/// float -> E4M3FN with round to nearest, ties to even, saturating (the OCP
/// spec's "saturation mode"): magnitudes >= 448 (and infinities) become
/// +-448 (0x7e / 0xfe); NaN becomes the NaN code of its sign (0x7f / 0xff);
/// magnitudes below 2^-6 round on the subnormal grid of 2^-9 (ties to even;
/// 2^-10 and below become +-0, with the sign kept).
inline uint8_t floatToE4M3(float f) {
  const uint32_t x = floatBits(f);
  const uint8_t sign = uint8_t((x >> 24) & 0x80u);
  const uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) // NaN
    return uint8_t(sign | 0x7f);
  if (ax >= 0x43e00000u) // >= 448 or inf: saturate
    return uint8_t(sign | 0x7e);
  if (ax >= 0x3c800000u) { // >= 2^-6: normal, drop 20 mantissa bits with RNE
    const uint32_t r = ax + 0x7ffffu + ((ax >> 20) & 1u);
    // Rebias 127 -> 7 (subtract 120 << 23); r < 448 * (1 + 2^-4) keeps the
    // result <= 0x7e (a tie at 464 cannot occur below the 448 cut).
    return uint8_t(sign | ((r - 0x3c000000u) >> 20));
  }
  // Subnormal range: |f| * 2^9 in [0, 8) rounded to an integer with the FPU's
  // round-to-nearest-even (adding 2^23 leaves no fraction bits); 8 is the
  // smallest normal, 0x08, so the code is that integer.
  const float scaled = bitsFloat(ax) * 512.0f;
  const float rounded = (scaled + 8388608.0f) - 8388608.0f;
  return uint8_t(sign | uint8_t(rounded));
}

//===----------------------------------------------------------------------===//
// packed 4-bit weights (W4A16)
//===----------------------------------------------------------------------===//
//
// One row of a W4A16 weight (kernel_abi.h): q packed two unsigned nibbles a
// byte (element 2j low, 2j + 1 high), ceil(in / 2) bytes; scales float and
// zeros bytes (0..15), one per group of groupSize (> 0, even) elements.

/// Bytes of one packed row of `in` 4-bit elements.
/// Asks for bytes [from, from + n) of the R rows Ahead row groups after the R
/// rows at w (Ahead = 1: what the next R-row step of a GEMV reads), one
/// request per 64-byte line. A
/// GEMV reads R rows side by side, R streams that the hardware prefetchers
/// follow too late to keep DRAM busy: on the Xeon of docs/benchmarks.md
/// this takes the Q4_0 GEMV from 4.7 to 7.7 GB/s on one core. Requests past
/// the end of the matrix are harmless (a prefetch never faults).
template <int R, int Ahead = 1>
__attribute__((always_inline)) inline void PrefetchNextRows(const uint8_t *w, int64_t rowBytes, int64_t from,
                             int64_t n) {
  for (int r = 0; r < R; ++r) {
    const uint8_t *p = w + (Ahead * R + r) * rowBytes + from;
    for (int64_t off = 0; off < n; off += 64)
      __builtin_prefetch(p + off);
    if (n > 1)
      __builtin_prefetch(p + n - 1);
  }
}

/// dot(a, b) over n floats with sixteen partial sums (a[j + l] * b[j + l]
/// into lane l for j in steps of 16), reduced pairwise (lane l += lane
/// l + 8, + 4, + 2, + 1), plus the tail summed in order: a fixed order that
/// the compiler vectorizes. Inlined into the target_clones kernels (the
/// f32 GEMV, the attention scores), so each clone has its own code.
__attribute__((always_inline)) inline float
dotPairwise16(const float *__restrict a, const float *__restrict b,
              int64_t n) {
  float acc[16] = {0};
  int64_t j = 0;
  for (; j + 16 <= n; j += 16)
    for (int l = 0; l < 16; ++l)
      acc[l] += a[j + l] * b[j + l];
  float tail = 0.0f;
  for (; j < n; ++j)
    tail += a[j] * b[j];
  for (int w = 8; w > 0; w >>= 1)
    for (int l = 0; l < w; ++l)
      acc[l] += acc[l + w];
  return acc[0] + tail;
}

inline int64_t q4RowBytes(int64_t in) { return (in + 1) / 2; }
/// Groups of one row: ceil(in / groupSize).
inline int64_t q4Groups(int64_t in, int64_t groupSize) {
  return (in + groupSize - 1) / groupSize;
}
/// Element i of a packed row, 0..15.
inline int q4At(const int8_t *row, int64_t i) {
  uint8_t b = uint8_t(row[i >> 1]);
  return (i & 1) ? b >> 4 : b & 0x0f;
}

/// dst[k] = scales[g] * float(q[begin + k] - zeros[g]), g = (begin + k) /
/// groupSize, for k < count: elements [begin, begin + count) of one row
/// dequantized (the product rounded once). SIMD-dispatched.
void dequantRowQ4(const int8_t *q, const float *scales, const int8_t *zeros,
                  float *dst, int64_t begin, int64_t count, int64_t groupSize);

/// y[r] = sum_g scales[r, g] * sum_{i in g} x[i] * float(q[r, i] -
/// zeros[r, g]) for r in [0, rows): q rows of q4RowBytes(in) bytes, scales and
/// zeros rows of q4Groups(in, groupSize) entries, read directly (nibbles
/// unpacked in registers). Single-threaded; SIMD-dispatched.
void gemvRowsQ4(const float *x, const int8_t *q, const float *scales,
                const int8_t *zeros, float *y, int64_t in, int64_t rows,
                int64_t groupSize);

// GGML block-format decode GEMV on Highway (BlockKernelsHwy.cpp).

/// Softmax of one attention row in place (SoftmaxHwy.cpp): s[t] for t in
/// [first, last] becomes exp(s[t] - max) / sum over that range (Highway's
/// Exp, at most 1 ulp; expf for a row with a NaN, which stays NaN), every
/// other s[t] of [0, n) becomes 0. maxOut / sumOut, when given, receive
/// the range's max score and the sum of exp(s - max) (before dividing).
void softmaxRow(float *s, int64_t first, int64_t last, int64_t n,
                float *maxOut = nullptr, float *sumOut = nullptr);

/// Whether amxGemmF32 may be called: x86-64 Linux with AMX-TILE, AMX-BF16
/// and AVX512-BF16, the tile state enabled by the OS and granted to this
/// process (arch_prctl ARCH_REQ_XCOMP_PERM), and KILN_AMX not "0", "off",
/// "no" or "false" (other values than those and 1/on/yes/true warn on
/// stderr). Probed once (AmxGemm.cpp).
bool amxAvailable();

/// Prefill tokens from which the linears' GEMMs run on AMX tiles: C tiles
/// hold 16 tokens, and fewer are padded.
constexpr int64_t kAmxMinTokens = 16;

/// c[t * ldc + r] = (accumulate ? c[t * ldc + r] : 0) + sum_k x[t * in +
/// k0 + k] * w[r * ldw + k] for t < n tokens, r < rows, k < depth (k0 a
/// multiple of 32, k0 + depth <= in): float32 in and out, computed on AMX
/// tiles with x and w split exactly into three bf16 pieces each
/// (AmxGemm.cpp: equal to a float32 GEMM up to rounding and summation
/// order). x is the whole input [n, in] of a linear, split once per thread
/// and parallel loop (ThreadPool.h currentLoopId: x must not change within
/// a loop); w is rows x depth with row stride ldw, e.g. a dequantized weight
/// tile. Per-thread scratch: 6 x (n + 15) x (in + 31) bytes for x, about
/// 12 x (rows + 15) x (depth + 31) for w. Only after amxAvailable()
/// returned true.
void amxGemmF32(const float *x, int64_t n, int64_t in, int64_t k0,
                const float *w, int64_t ldw, int64_t rows, int64_t depth,
                float *c, int64_t ldc, bool accumulate);

/// Reduction depth of one amxGemmF32 call over a float32 weight matrix
/// (gemmDenseF32): its packed tiles (6 bytes per weight) stay in L2.
constexpr int64_t kAmxDepth = 512;

/// c[t * ldc + r] = sum_k x[t * in + k] * w[r * in + k] for t < n, r < rows:
/// the prefill GEMM of float32 weight rows, on AMX tiles (kAmxDepth columns
/// per call) from kAmxMinTokens tokens where amxAvailable(), otherwise one
/// single-threaded OpenBLAS sgemm.
void gemmDenseF32(const float *x, int64_t n, int64_t in, const float *w,
                  int64_t rows, float *c, int64_t ldc);

/// The prefill GEMM of one float weight tile, as amxGemmF32: on AMX tiles
/// from kAmxMinTokens tokens where amxAvailable(), otherwise a
/// single-threaded OpenBLAS sgemm of x[:, k0 : k0 + depth].
void gemmWeightTile(const float *x, int64_t n, int64_t in, int64_t k0,
                    const float *w, int64_t rows, int64_t depth, float *c,
                    int64_t ldc, bool accumulate);

/// sums[g] = x[16g] + ... + x[16g + 15] for g < in / 16 (in a multiple of
/// 32): the input sums gemvRowsBlocksSimd shares between rows.
void blockXSums16(const float *x, int64_t in, float *sums);

/// y[r] = dot(decoded row r, x) for r < rows: rows of in / elems blocks of
/// `format` (any of kiln_rt/block_formats.h) read as stored, codes widened in registers,
/// each block's scale applied to its integer-times-x sum (the block formula
/// reassociated; equal to decode-then-dot up to float summation order).
/// xsum16 from blockXSums16(x). Single-threaded; SIMD-dispatched.
void gemvRowsBlocksSimd(int64_t format, const float *x, const float *xsum16,
                        const uint8_t *w, float *y, int64_t in, int64_t rows);

/// gemvRowsBlocksSimd for n tokens: x[t * in], xsum16[t * (in / 16)] (from
/// blockXSums16 of each token's row), y[t * ldy + r] for t < n, r < rows.
/// Where hasMultiTokenBlockGemv(format) (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K,
/// Q5_K, Q6_K) each
/// block's codes are widened and dequantized (block_formats.h's formula)
/// in registers once for up to 8 tokens (4 on AVX2) and dotted with each
/// token's x, so n tokens cost far less than n GEMVs (xsum16 is not read);
/// equal to gemvRowsBlocksSimd up to float summation order, and a token's
/// result does not depend on the others. Other formats: one
/// gemvRowsBlocksSimd per token. Single-threaded.
void gemvTokensBlocksSimd(int64_t format, const float *x, const float *xsum16,
                          const uint8_t *w, float *y, int64_t ldy, int64_t in,
                          int64_t rows, int64_t n);

/// Whether gemvTokensBlocksSimd shares the code widening between tokens
/// for `format`.
bool hasMultiTokenBlockGemv(int64_t format);

// GGML block formats with int8 activations (BlockA8Kernels.cpp).

/// One input row quantized per 32 elements (kiln_k_linear_blocks_a8): q[in]
/// int8 codes, d[in / 32] block scales, s4[in / 4] the sums of each 4
/// consecutive codes, s16[in / 16] = d[b] * (sum of 16 consecutive codes).
struct A8Row {
  const int8_t *q;
  const float *d;
  const int32_t *s4;
  const float *s16;
};

/// Quantizes x[in] (in a multiple of 32) into an A8Row's arrays:
/// d_b = max |x_i| / 127, q_i = clamp(round(x_i / d_b), -127, 127) (round
/// half away from zero; 0 where d_b = 0), for each block b of 32.
void quantizeA8Row(const float *x, int64_t in, int8_t *q, float *d,
                   int32_t *s4, float *s16);

/// xhat[t, i] = d_b(t) * q_i(t): x float32 [n, in] quantized with
/// quantizeA8Row and dequantized, float32 [n, in].
void dequantizedA8Input(const float *x, int64_t n, int64_t in, float *xhat);

/// dequantizedA8Input into the calling thread's buffer, computed once per
/// thread and parallel loop (ThreadPool.h currentLoopId) for the chunks of a
/// fused linear; valid until the thread's next call.
const float *loopDequantizedA8Input(const float *x, int64_t n, int64_t in);

/// From this many tokens on, the int8-activation linears multiply
/// dequantizedA8Input's xhat with decoded weight tiles in float32 (sgemm)
/// instead of integer dot products per token: the same formula, and on a
/// prefill far faster than one integer GEMV per token.
constexpr int64_t kA8FloatTokens = 4;

/// c[t * ldc + r] = sum_b d_b(t) * sum_{i in b} W[r, i] * q_i(t), t < n,
/// r < rows: rows of `format` blocks starting at w, x float32 [n, in]
/// quantized with quantizeA8Row (once per thread and parallel loop: the
/// chunks of one fused linear share it). Single-threaded; SIMD-dispatched
/// (AVX-512 VNNI, AVX2, portable).
void linearBlocksA8(int64_t format, const float *x, int64_t n, int64_t in,
                    const uint8_t *w, int64_t rows, float *c, int64_t ldc);

/// Batch-invariant kernels (FusedKernels.cpp), process-wide while at least
/// one holder remains (an engine created with
/// KILN_RT_ENGINE_BATCH_INVARIANT): every kiln_k_linear_tile call, whatever
/// its token count, sums each output as one FMA chain of the decoded weight
/// row against the token's row in column order, and attention takes its
/// per-row path (one query row at a time over the keys in order) for
/// prefill chunks too, so a sequence's logits are bit-identical alone and
/// in any batch, under any prefill chunking (He et al., "Defeating
/// Nondeterminism in LLM Inference", 2025; vLLM's VLLM_BATCH_INVARIANT).
/// Without a holder each kernel picks the fastest order for its shape
/// (GEMV, batched decode or GEMM; per-row or tiled attention), equal up to
/// float rounding.
void acquireBatchInvariantKernels();
void releaseBatchInvariantKernels();
bool batchInvariantKernels();

} // namespace kiln::rt::cpu

#endif // KILN_RUNTIME_CPU_KERNELS_H
