//===- KilnCudaHost.cuh - Host wrappers of the CUDA kernels ----*- CUDA -*-===//
//
// The kiln_cuda_* entry points emitted model.cu calls (KilnKernels.cuh
// lists them): argument checks, launch configuration, error recording.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_CODEGEN_CUDA_KILNCUDAHOST_CUH
#define KILN_CODEGEN_CUDA_KILNCUDAHOST_CUH

#include "KilnCudaAttention.cuh"
#include "KilnCudaBlocks.cuh"
#include "KilnCudaCommon.cuh"
#include "KilnCudaLinear.cuh"
#include "KilnCudaPointwise.cuh"
#include "KilnCudaQuantLinear.cuh"
#include "KilnCudaSampling.cuh"

//===----------------------------------------------------------------------===//
// Host wrappers
//===----------------------------------------------------------------------===//

/// out[i, :] = table[tokens[i], :]. tokens int32 [n] (device), table T
/// [vocab, dim], out T [n, dim].
template <typename T>
inline void kiln_cuda_embedding(kiln_cuda_ctx *ctx, const int32_t *tokens,
                                int64_t n, const T *table, int64_t vocab,
                                int64_t dim, T *out) {
  using namespace kiln_cuda_detail;
  static_assert(IsElem<T>::value, "T must be float, __half or __nv_bfloat16");
  if (skip(ctx) || n <= 0 || dim <= 0)
    return;
  const bool vec = aligned16(table) && aligned16(out) &&
                   (dim * int64_t(sizeof(T))) % 16 == 0;
  const unsigned grid = unsigned(n < 65535 ? n : 65535);
  embeddingKernel<T>
      <<<grid, 256, 0, streamOf(ctx)>>>(tokens, n, table, vocab, dim, out, vec);
  KILN_CUDA_LAUNCHED(ctx, "kiln_cuda_embedding<<<>>>");
}

/// The GGML block formats (bit f = kiln_block_format id f) whose kernels
/// kiln_cuda_embedding_blocks / kiln_cuda_linear_blocks instantiate: an
/// emitted model.cu defines it from its plan's constant format operands
/// (the fused kernels' readers name their format in the type and need
/// none). Default: every format.
#ifndef KILN_CUDA_BLOCK_FORMAT_MASK
#define KILN_CUDA_BLOCK_FORMAT_MASK 0x7ffc
#endif

namespace kiln_cuda_detail {
/// True when block format `format` is known and compiled in.
inline bool blockFormatCompiled(int64_t format) {
  return kiln_block_elems(format) > 0 && format < 63 &&
         ((uint64_t(KILN_CUDA_BLOCK_FORMAT_MASK) >> format) & 1);
}

/// kiln_cuda_linear_blocks for format F (arguments checked, n, out > 0,
/// `in` whole blocks): n == 1 a warp-per-row GEMV decoding in registers,
/// n > 1 the 16 x 16 tiled SIMT GEMM.
template <int64_t F>
inline void linearBlocksOf(kiln_cuda_ctx *ctx, const float *x,
                           const uint8_t *wb, float *y, int64_t n, int64_t in,
                           int64_t out) {
  if (in <= 0) {
    KILN_CUDA_CHECK(ctx, cudaMemsetAsync(y, 0, size_t(n * out) * sizeof(float),
                                         streamOf(ctx)));
    return;
  }
  if (n == 1) {
    launchGemv(ctx, BlockRows<F>{wb, in}, x, y, out,
               "kiln_cuda_linear_blocks(gemv)<<<>>>");
    return;
  }
  const int64_t gx = (out + kBlockTileRows - 1) / kBlockTileRows;
  const int64_t gy = (n + kBlockTileTokens - 1) / kBlockTileTokens;
  if (!KILN_CUDA_ARG(ctx, gx <= INT32_MAX && gy <= 65535,
                     "kiln_cuda_linear_blocks", "n or out too large"))
    return;
  const dim3 grid{unsigned(gx), unsigned(gy), 1u};
  blockGemmKernel<F><<<grid, 256, 0, streamOf(ctx)>>>(x, wb, y, n, in, out);
  KILN_CUDA_LAUNCHED(ctx, "kiln_cuda_linear_blocks(gemm)<<<>>>");
}
} // namespace kiln_cuda_detail

/// GGML block formats (kernel_abi.h kiln_k_embedding_blocks): out float
/// [n, dim] = decoded rows of table ([vocab, dim] in block format `format`,
/// a kiln_block_format id). An unknown format, or one not compiled in
/// (KILN_CUDA_BLOCK_FORMAT_MASK), is refused (cudaErrorInvalidValue).
template <int kUnused = 0>
inline void kiln_cuda_embedding_blocks(kiln_cuda_ctx *ctx,
                                       const int32_t *tokens, int64_t n,
                                       const int8_t *table, int64_t vocab,
                                       int64_t dim, float *out,
                                       int64_t format) {
  using namespace kiln_cuda_detail;
  if (skip(ctx) || n <= 0 || dim <= 0)
    return;
  if (!KILN_CUDA_ARG(ctx, blockFormatCompiled(format) &&
                              dim % kiln_block_elems(format) == 0,
                     "kiln_cuda_embedding_blocks",
                     "unknown or not compiled block format, or dim not "
                     "whole blocks"))
    return;
  const unsigned grid = unsigned(n < 65535 ? n : 65535);
  const auto *t = reinterpret_cast<const uint8_t *>(table);
  switch (format) {
#define KILN_BLOCK_CASE(f)                                                    \
  case f:                                                                     \
    if constexpr ((uint64_t(KILN_CUDA_BLOCK_FORMAT_MASK) >> f) & 1)           \
      blockEmbeddingKernel<f>                                                 \
          <<<grid, 256, 0, streamOf(ctx)>>>(tokens, n, t, vocab, dim, out);   \
    break;
    KILN_BLOCK_FORMATS(KILN_BLOCK_CASE)
#undef KILN_BLOCK_CASE
  default:
    break;
  }
  KILN_CUDA_LAUNCHED(ctx, "kiln_cuda_embedding_blocks<<<>>>");
}

/// GGML block formats (kernel_abi.h kiln_k_linear_blocks): y float [n, out]
/// = x float [n, in] * W^T, W [out, in] in block format `format`. n == 1: a
/// warp-per-row GEMV decoding in registers; n > 1: a 16 x 16 tiled SIMT GEMM
/// decoding weight tiles into shared memory (float accumulation, no
/// workspace). An unknown format, one not compiled in
/// (KILN_CUDA_BLOCK_FORMAT_MASK) or an `in` that is not whole blocks is
/// refused (cudaErrorInvalidValue).
template <int kUnused = 0>
inline void kiln_cuda_linear_blocks(kiln_cuda_ctx *ctx, const float *x,
                                    const int8_t *w, float *y, int64_t n,
                                    int64_t in, int64_t out, int64_t format) {
  using namespace kiln_cuda_detail;
  if (skip(ctx) || n <= 0 || out <= 0)
    return;
  if (!KILN_CUDA_ARG(ctx, blockFormatCompiled(format) &&
                              in % kiln_block_elems(format) == 0,
                     "kiln_cuda_linear_blocks",
                     "unknown or not compiled block format, or in not whole "
                     "blocks"))
    return;
  const auto *wb = reinterpret_cast<const uint8_t *>(w);
  switch (format) {
#define KILN_BLOCK_CASE(f)                                                    \
  case f:                                                                     \
    if constexpr ((uint64_t(KILN_CUDA_BLOCK_FORMAT_MASK) >> f) & 1)           \
      linearBlocksOf<f>(ctx, x, wb, y, n, in, out);                           \
    break;
    KILN_BLOCK_FORMATS(KILN_BLOCK_CASE)
#undef KILN_BLOCK_CASE
  default:
    break;
  }
}

/// RMSNorm: y[i, :] = w * x[i, :] / sqrt(mean(x[i, :]^2) + eps). x, y T
/// [n, dim] (may alias), w T [dim].
template <typename T>
inline void kiln_cuda_rms_norm(kiln_cuda_ctx *ctx, const T *x, const T *w, T *y,
                               int64_t n, int64_t dim, float eps) {
  using namespace kiln_cuda_detail;
  static_assert(IsElem<T>::value, "T must be float, __half or __nv_bfloat16");
  if (skip(ctx) || n <= 0 || dim <= 0)
    return;
  const unsigned grid = unsigned(n < 65535 ? n : 65535);
  rmsNormKernel<T><<<grid, 256, 0, streamOf(ctx)>>>(x, w, y, n, dim, eps);
  KILN_CUDA_LAUNCHED(ctx, "kiln_cuda_rms_norm<<<>>>");
}

/// y[n, out] = x[n, in] * w[out, in]^T, row-major, float accumulation. x, w
/// of type T; y of type T or float (logits). n == 1: Kiln's GEMV; n > 1:
/// cuBLASLt (plans cached per shape; workspace = ctx->workspace up to
/// KILN_CUDA_GEMM_WORKSPACE_BYTES).
template <typename T, typename Y>
inline void kiln_cuda_linear(kiln_cuda_ctx *ctx, const T *x, const T *w, Y *y,
                             int64_t n, int64_t in, int64_t out) {
  using namespace kiln_cuda_detail;
  static_assert(IsElem<T>::value, "T must be float, __half or __nv_bfloat16");
  static_assert(std::is_same<Y, T>::value || std::is_same<Y, float>::value,
                "y must have the element type of x or be float");
  if (skip(ctx) || n <= 0 || out <= 0)
    return;
  if (in <= 0) { // empty sum: y = 0 (all-zero bits are 0.0 in every type)
    KILN_CUDA_CHECK(
        ctx, cudaMemsetAsync(y, 0, size_t(n * out) * sizeof(Y), streamOf(ctx)));
    return;
  }
  if (n == 1) {
    launchGemv(ctx, DenseRows<T>{w, in}, x, y, out,
               "kiln_cuda_linear(gemv)<<<>>>");
    return;
  }
  ltLinear(ctx, x, w, y, n, in, out);
}

/// W8A16 linear layer (kernel_abi.h kiln_k_linear_w8a16): y[n, out] =
/// x[n, in] * W[out, in]^T; x of type T, qweight int8 [out, in] row-major,
/// y of type T or float (logits), float accumulation, rounded once to Y.
///   group_size == 0: per-output-channel scales float [out],
///     W[o, i] = scales[o] * qweight[o, i]; each output is
///     scales[o] * (float sum of x * q);
///   group_size > 0: group-wise scales float [out, ceil(in / group_size)]
///     (GGUF Q8_0 kept quantized: group_size 32),
///     W[o, i] = scales[o, i / group_size] * qweight[o, i].
/// n == 1: GEMV dequantizing in registers (16-byte loads, a warp per row;
/// grouped: when in and group_size are multiples of 16 and qweight is
/// 16-aligned, else element loads); n > 1: a tiled SIMT kernel with float
/// accumulation (grouped: dequantized while staging; every shape, no
/// cuBLASLt, no workspace). Any alignment. group_size < 0 is refused
/// (cudaErrorInvalidValue). group_size defaults to 0 so plans emitted before
/// the argument existed keep their per-channel meaning.
template <typename T, typename Y>
inline void kiln_cuda_linear_w8a16(kiln_cuda_ctx *ctx, const T *x,
                                   const int8_t *qweight, const float *scales,
                                   Y *y, int64_t n, int64_t in, int64_t out,
                                   int64_t group_size = 0) {
  using namespace kiln_cuda_detail;
  static_assert(IsElem<T>::value, "T must be float, __half or __nv_bfloat16");
  static_assert(std::is_same<Y, T>::value || std::is_same<Y, float>::value,
                "y must have the element type of x or be float");
  if (skip(ctx) || n <= 0 || out <= 0)
    return;
  if (!KILN_CUDA_ARG(ctx, group_size >= 0, "kiln_cuda_linear_w8a16",
                     "group_size must be 0 (per-channel) or positive"))
    return;
  if (in <= 0) { // empty sum: y = 0
    KILN_CUDA_CHECK(
        ctx, cudaMemsetAsync(y, 0, size_t(n * out) * sizeof(Y), streamOf(ctx)));
    return;
  }
  if (n == 1) {
    if (group_size > 0)
      launchGemv(ctx, W8GroupRows<T>::make(qweight, scales, in, group_size), x,
                 y, out, "kiln_cuda_linear_w8a16(gemv, grouped)<<<>>>");
    else
      launchGemv(ctx, W8Rows<T>{qweight, scales, in}, x, y, out,
                 "kiln_cuda_linear_w8a16(gemv)<<<>>>");
    return;
  }
  const int64_t gx = (out + kW8TileN - 1) / kW8TileN;
  const int64_t gy = (n + kW8TileM - 1) / kW8TileM;
  if (!KILN_CUDA_ARG(ctx, gx <= INT32_MAX && gy <= 65535,
                     "kiln_cuda_linear_w8a16", "n or out too large"))
    return;
  linearW8TiledKernel<T, Y>
      <<<dim3(unsigned(gx), unsigned(gy)), kW8Threads, 0, streamOf(ctx)>>>(
          x, qweight, scales, y, n, in, out, group_size);
  KILN_CUDA_LAUNCHED(ctx, "kiln_cuda_linear_w8a16(tiled)<<<>>>");
}

/// Bytes of ctx->workspace kiln_cuda_linear_w8a8 uses for `rows` quantized
/// activation rows of `in` features: the row scales (float [rows], rounded
/// up to 256) then the int8 rows (stride ceil(in / 16) * 16).
constexpr uint64_t kiln_cuda_w8a8_scratch_bytes(int64_t rows, int64_t in) {
  return kiln_cuda_align256(uint64_t(rows) * sizeof(float)) +
         uint64_t(rows) * uint64_t((in + 15) / 16 * 16);
}

/// SmoothQuant W8A8 linear layer (kernel_abi.h kiln_k_linear_w8a8; Xiao et
/// al. 2023, "SmoothQuant", eq. 1 with per-token / per-tensor activation
/// and per-channel weight scales): x T [n, in] (T float, __half or
/// __nv_bfloat16), qweight int8 [out, in] row-major, scales float [out]
/// (per output channel), y T or float [n, out]:
///   sx[r] = act_scale > 0 ? act_scale                 (static per-tensor)
///                         : max_i |x[r, i]| / 127     (dynamic per-token)
///   xq[r, i] = clamp(roundf(x[r, i] / sx[r]), -127, 127)  (0 if sx[r] == 0)
///   y[r, o] = sx[r] * scales[o] * (float) sum_i (int32) xq[r, i] * q[o, i]
/// (products evaluated left to right, each rounded once; a zero row gives
/// y = 0). Two steps per chunk of rows: actQuantKernel writes xq and sx to
/// ctx->workspace (the cuBLASLt region [0, KILN_CUDA_GEMM_WORKSPACE_BYTES),
/// unused by this wrapper and free in stream order; rows are processed in
/// chunks that fit), then n == 1: a __dp4a GEMV (a warp per output row),
/// n > 1: a tiled __dp4a GEMM. The int32 sums are exact, so the result
/// matches the CPU kernel up to the final float rounding. act_scale must be
/// >= 0 and finite, in < 133143 (int32 range of the sums); any alignment.
template <typename T, typename Y>
inline void kiln_cuda_linear_w8a8(kiln_cuda_ctx *ctx, const T *x,
                                  const int8_t *qweight, const float *scales,
                                  Y *y, int64_t n, int64_t in, int64_t out,
                                  float act_scale) {
  using namespace kiln_cuda_detail;
  static_assert(IsElem<T>::value, "T must be float, __half or __nv_bfloat16");
  static_assert(std::is_same<Y, T>::value || std::is_same<Y, float>::value,
                "y must have the element type of x or be float");
  if (skip(ctx) || n <= 0 || out <= 0)
    return;
  if (!KILN_CUDA_ARG(ctx, act_scale >= 0.0f && act_scale <= 3.4e38f,
                     "kiln_cuda_linear_w8a8",
                     "act_scale must be 0 (per-token) or a finite positive "
                     "per-tensor scale") ||
      !KILN_CUDA_ARG(ctx, in < 133143, "kiln_cuda_linear_w8a8",
                     "in >= 133143 would overflow the int32 sums"))
    return;
  if (in <= 0) { // empty sum: y = 0
    KILN_CUDA_CHECK(
        ctx, cudaMemsetAsync(y, 0, size_t(n * out) * sizeof(Y), streamOf(ctx)));
    return;
  }
  const int64_t ld = (in + 15) / 16 * 16;
  uint64_t avail = ctx->workspace_bytes < KILN_CUDA_GEMM_WORKSPACE_BYTES
                       ? ctx->workspace_bytes
                       : KILN_CUDA_GEMM_WORKSPACE_BYTES;
  if (ctx->workspace == nullptr)
    avail = 0;
  // Largest chunk of rows whose scratch fits (at most 65535 tiles of 64).
  int64_t chunk = avail > 256 ? int64_t((avail - 256) / uint64_t(ld + 4)) : 0;
  if (chunk > n)
    chunk = n;
  if (chunk > int64_t(65535) * kW8A8TileM)
    chunk = int64_t(65535) * kW8A8TileM;
  if (!KILN_CUDA_ARG(ctx, chunk >= 1 && kiln_cuda_w8a8_scratch_bytes(chunk, in) <= avail,
                     "kiln_cuda_linear_w8a8",
                     "workspace too small for one quantized activation row"))
    return;
  const int64_t gx = (out + kW8A8TileN - 1) / kW8A8TileN;
  if (!KILN_CUDA_ARG(ctx, gx <= INT32_MAX, "kiln_cuda_linear_w8a8",
                     "out too large"))
    return;
  float *sx = static_cast<float *>(ctx->workspace);
  int8_t *xq = static_cast<int8_t *>(ctx->workspace) +
               kiln_cuda_align256(uint64_t(chunk) * sizeof(float));
  cudaStream_t stream = streamOf(ctx);
  for (int64_t r0 = 0; r0 < n; r0 += chunk) {
    const int64_t m = n - r0 < chunk ? n - r0 : chunk;
    const unsigned qGrid = unsigned(m < 65535 ? m : 65535);
    actQuantKernel<T><<<qGrid, 256, 0, stream>>>(x + r0 * in, xq, sx, m, in,
                                                 ld, act_scale);
    if (!KILN_CUDA_LAUNCHED(ctx, "kiln_cuda_linear_w8a8(quantize)<<<>>>"))
      return;
    if (n == 1) {
      const int warps = kGemvThreads / 32;
      int64_t blocks = (out + warps - 1) / warps;
      if (blocks > (int64_t(1) << 20))
        blocks = int64_t(1) << 20;
      const bool fast = in % 16 == 0 && aligned16(qweight);
      gemvW8A8Kernel<Y><<<unsigned(blocks), kGemvThreads, 0, stream>>>(
          xq, sx, qweight, scales, y, in, out, fast);
      KILN_CUDA_LAUNCHED(ctx, "kiln_cuda_linear_w8a8(gemv)<<<>>>");
      return;
    }
    const bool wordLoads =
        in % 4 == 0 && (reinterpret_cast<uintptr_t>(qweight) & 3) == 0;
    const int64_t gy = (m + kW8A8TileM - 1) / kW8A8TileM;
    linearW8A8TiledKernel<Y>
        <<<dim3(unsigned(gx), unsigned(gy)), kW8Threads, 0, stream>>>(
            xq, sx, qweight, scales, y + r0 * out, m, in, ld, out, wordLoads);
    if (!KILN_CUDA_LAUNCHED(ctx, "kiln_cuda_linear_w8a8(tiled)<<<>>>"))
      return;
  }
}

/// W4A16 linear layer (kernel_abi.h kiln_k_linear_w4a16): y[n, out] =
/// x[n, in] * W[out, in]^T with W[o, i] = scales[o, g] * (q[o, i] -
/// zeros[o, g]), g = i / group_size; qweight int8 bytes [out, ceil(in / 2)]
/// (element 2j in byte j's low nibble, 2j + 1 in its high nibble), scales
/// float [out, G], zeros int8 [out, G] (0..15), G = ceil(in / group_size);
/// x of type T, y of type T or float (logits), float accumulation, rounded
/// once to Y. n == 1: GEMV dequantizing in registers (a warp per row; 16-byte
/// loads of 32 nibbles when in and group_size are multiples of 32 and qweight
/// is 16-aligned, else byte loads); n > 1: a tiled SIMT kernel dequantizing
/// while staging (every shape; no cuBLASLt, no workspace). Any alignment.
/// group_size must be > 0 and even (cudaErrorInvalidValue otherwise).
template <typename T, typename Y>
inline void kiln_cuda_linear_w4a16(kiln_cuda_ctx *ctx, const T *x,
                                   const int8_t *qweight, const float *scales,
                                   const int8_t *zeros, Y *y, int64_t n,
                                   int64_t in, int64_t out,
                                   int64_t group_size) {
  using namespace kiln_cuda_detail;
  static_assert(IsElem<T>::value, "T must be float, __half or __nv_bfloat16");
  static_assert(std::is_same<Y, T>::value || std::is_same<Y, float>::value,
                "y must have the element type of x or be float");
  if (skip(ctx) || n <= 0 || out <= 0)
    return;
  if (!KILN_CUDA_ARG(ctx, group_size > 0 && group_size % 2 == 0,
                     "kiln_cuda_linear_w4a16",
                     "group_size must be positive and even"))
    return;
  if (in <= 0) { // empty sum: y = 0
    KILN_CUDA_CHECK(
        ctx, cudaMemsetAsync(y, 0, size_t(n * out) * sizeof(Y), streamOf(ctx)));
    return;
  }
  if (n == 1) {
    launchGemv(ctx,
               W4Rows<T>::make(qweight, scales, zeros, in, group_size), x, y,
               out, "kiln_cuda_linear_w4a16(gemv)<<<>>>");
    return;
  }
  const int64_t gx = (out + kW8TileN - 1) / kW8TileN;
  const int64_t gy = (n + kW8TileM - 1) / kW8TileM;
  if (!KILN_CUDA_ARG(ctx, gx <= INT32_MAX && gy <= 65535,
                     "kiln_cuda_linear_w4a16", "n or out too large"))
    return;
  linearW4TiledKernel<T, Y>
      <<<dim3(unsigned(gx), unsigned(gy)), kW8Threads, 0, streamOf(ctx)>>>(
          x, qweight, scales, zeros, y, n, in, out, group_size);
  KILN_CUDA_LAUNCHED(ctx, "kiln_cuda_linear_w4a16(tiled)<<<>>>");
}

/// Rotary embedding, adjacent pairs, positions *ctx->d_pos + row (the `pos`
/// argument is ignored). x, y T [n, heads * head_dim] (may alias).
template <typename T>
inline void kiln_cuda_rope(kiln_cuda_ctx *ctx, const T *x, T *y, int64_t n,
                           int64_t heads, int64_t head_dim, int64_t rot_dim,
                           int64_t pos, float theta) {
  using namespace kiln_cuda_detail;
  static_assert(IsElem<T>::value, "T must be float, __half or __nv_bfloat16");
  (void)pos; // graph replays read the position from ctx->d_pos
  if (skip(ctx) || n <= 0 || heads <= 0 || head_dim <= 0)
    return;
  if (!KILN_CUDA_ARG(ctx, rot_dim >= 0 && rot_dim <= head_dim, "kiln_cuda_rope",
                     "rot_dim outside [0, head_dim]"))
    return;
  const int64_t work = n * heads * ((head_dim + 1) / 2);
  ropeKernel<T><<<gridFor(ctx, work, 256), 256, 0, streamOf(ctx)>>>(
      x, y, n, heads, head_dim, rot_dim, theta, ctx->d_pos, nullptr);
  KILN_CUDA_LAUNCHED(ctx, "kiln_cuda_rope<<<>>>");
}

/// kiln_cuda_rope with scaled frequencies (kernel_abi.h kiln_k_rope_scaled).
template <typename T>
inline void kiln_cuda_rope_scaled(kiln_cuda_ctx *ctx, const T *x, T *y,
                                  int64_t n, int64_t heads, int64_t head_dim,
                                  int64_t rot_dim, int64_t pos, float theta,
                                  int64_t scaling, float factor,
                                  float low_freq_factor,
                                  float high_freq_factor,
                                  int64_t original_max) {
  using namespace kiln_cuda_detail;
  static_assert(IsElem<T>::value, "T must be float, __half or __nv_bfloat16");
  (void)pos; // graph replays read the position from ctx->d_pos
  if (skip(ctx) || n <= 0 || heads <= 0 || head_dim <= 0)
    return;
  if (!KILN_CUDA_ARG(ctx, rot_dim >= 0 && rot_dim <= head_dim,
                     "kiln_cuda_rope_scaled", "rot_dim outside [0, head_dim]"))
    return;
  const int64_t work = n * heads * ((head_dim + 1) / 2);
  ropeScaledKernel<T><<<gridFor(ctx, work, 256), 256, 0, streamOf(ctx)>>>(
      x, y, n, heads, head_dim, rot_dim, theta, scaling, factor,
      low_freq_factor, high_freq_factor, original_max, nullptr, ctx->d_pos);
  KILN_CUDA_LAUNCHED(ctx, "kiln_cuda_rope_scaled<<<>>>");
}

/// kiln_cuda_rope with per-pair frequency divisors (kernel_abi.h
/// kiln_k_rope_factors; freq_factors float [rot_dim / 2] on the device).
template <typename T>
inline void kiln_cuda_rope_factors(kiln_cuda_ctx *ctx, const T *x, T *y,
                                   int64_t n, int64_t heads, int64_t head_dim,
                                   int64_t rot_dim, int64_t pos, float theta,
                                   const float *freq_factors) {
  using namespace kiln_cuda_detail;
  static_assert(IsElem<T>::value, "T must be float, __half or __nv_bfloat16");
  (void)pos;
  if (skip(ctx) || n <= 0 || heads <= 0 || head_dim <= 0)
    return;
  if (!KILN_CUDA_ARG(ctx, rot_dim >= 0 && rot_dim <= head_dim && freq_factors,
                     "kiln_cuda_rope_factors",
                     "rot_dim outside [0, head_dim] or no freq_factors"))
    return;
  const int64_t work = n * heads * ((head_dim + 1) / 2);
  ropeScaledKernel<T><<<gridFor(ctx, work, 256), 256, 0, streamOf(ctx)>>>(
      x, y, n, heads, head_dim, rot_dim, theta, KILN_ROPE_LINEAR, 1.0f, 0.0f,
      0.0f, 0, freq_factors, ctx->d_pos);
  KILN_CUDA_LAUNCHED(ctx, "kiln_cuda_rope_factors<<<>>>");
}

/// Bias of a linear layer (kernel_abi.h kiln_k_add_bias).
template <typename T>
inline void kiln_cuda_add_bias(kiln_cuda_ctx *ctx, const T *x, const T *b,
                               T *y, int64_t n, int64_t width) {
  using namespace kiln_cuda_detail;
  static_assert(IsElem<T>::value, "T must be float, __half or __nv_bfloat16");
  if (skip(ctx) || n <= 0 || width <= 0)
    return;
  addBiasKernel<T><<<gridFor(ctx, n * width, 256), 256, 0, streamOf(ctx)>>>(
      x, b, y, n, width);
  KILN_CUDA_LAUNCHED(ctx, "kiln_cuda_add_bias<<<>>>");
}

/// Causal GQA attention with a KV cache (kernel_abi.h kiln_k_attention), with
/// p = *ctx->d_pos (the `pos` argument is ignored): stores k, v (T
/// [n, kv_heads * head_dim]) at rows [p, p + n) of k_cache, v_cache (T
/// [max_seq, kv_heads * head_dim]), then out[i, h] (T [n, heads * head_dim])
/// = softmax_j(q[i, h] . k_cache[j, h / (heads / kv_heads)] * scale) v_cache[j]
/// over j in [0, p + i]. n > 1: FlashAttention-2 tiling; n == 1:
/// flash-decoding with kiln_cuda_attention_scratch_bytes(heads, head_dim,
/// KILN_CUDA_ATTN_MAX_SPLITS) bytes at KILN_CUDA_ATTN_SCRATCH_OFFSET of
/// ctx->workspace. 1 <= head_dim <= 256, heads a multiple of kv_heads.
template <typename T>
inline void kiln_cuda_attention(kiln_cuda_ctx *ctx, const T *q, const T *k,
                                const T *v, T *k_cache, T *v_cache, T *out,
                                int64_t n, int64_t pos, int64_t heads,
                                int64_t kv_heads, int64_t head_dim,
                                int64_t max_seq, float scale) {
  using namespace kiln_cuda_detail;
  static_assert(IsElem<T>::value, "T must be float, __half or __nv_bfloat16");
  (void)pos; // graph replays read the position from ctx->d_pos
  if (skip(ctx) || n <= 0)
    return;
  if (!attentionArgsOk(ctx, "kiln_cuda_attention", heads, kv_heads, head_dim,
                       max_seq))
    return;
  const int64_t kvDim = kv_heads * head_dim;
  if (!appendContiguous(ctx, k, v, k_cache, v_cache, n, kvDim, max_seq))
    return;
  attentionDispatch(ctx, q, KvPlain<T>{k_cache, v_cache}, out, n, heads,
                    kv_heads, head_dim, max_seq, scale);
}

/// kiln_cuda_attention with a sliding window (kernel_abi.h
/// kiln_k_attention_window): row i sees keys [max(0, p + i - window + 1),
/// p + i].
template <typename T>
inline void kiln_cuda_attention_window(kiln_cuda_ctx *ctx, const T *q,
                                       const T *k, const T *v, T *k_cache,
                                       T *v_cache, T *out, int64_t n,
                                       int64_t pos, int64_t heads,
                                       int64_t kv_heads, int64_t head_dim,
                                       int64_t max_seq, float scale,
                                       int64_t window) {
  using namespace kiln_cuda_detail;
  static_assert(IsElem<T>::value, "T must be float, __half or __nv_bfloat16");
  (void)pos; // graph replays read the position from ctx->d_pos
  if (skip(ctx) || n <= 0)
    return;
  if (!attentionArgsOk(ctx, "kiln_cuda_attention_window", heads, kv_heads,
                       head_dim, max_seq) ||
      !KILN_CUDA_ARG(ctx, window >= 1, "kiln_cuda_attention_window",
                     "window must be positive"))
    return;
  const int64_t kvDim = kv_heads * head_dim;
  if (!appendContiguous(ctx, k, v, k_cache, v_cache, n, kvDim, max_seq))
    return;
  attentionDispatch(ctx, q, KvPlain<T>{k_cache, v_cache}, out, n, heads,
                    kv_heads, head_dim, max_seq, scale, window);
}

/// kiln_cuda_attention over an INT8 KV cache (kernel_abi.h
/// kiln_k_attention_kv8; p = *ctx->d_pos, `pos` ignored): k_cache, v_cache
/// int8 [max_seq, kv_heads * head_dim], k_scales, v_scales float
/// [max_seq, kv_heads]. The new rows are quantized per (token, kv head) by
/// kvAppendInt8Kernel, then the same prefill / flash-decoding kernels read
/// K/V as scale * q (KvInt8). Same workspace and limits as kiln_cuda_attention.
template <typename T>
inline void kiln_cuda_attention_kv8(kiln_cuda_ctx *ctx, const T *q, const T *k,
                                    const T *v, int8_t *k_cache,
                                    int8_t *v_cache, float *k_scales,
                                    float *v_scales, T *out, int64_t n,
                                    int64_t pos, int64_t heads,
                                    int64_t kv_heads, int64_t head_dim,
                                    int64_t max_seq, float scale) {
  using namespace kiln_cuda_detail;
  static_assert(IsElem<T>::value, "T must be float, __half or __nv_bfloat16");
  (void)pos; // graph replays read the position from ctx->d_pos
  attentionQuantKv<false>(
      ctx, "kiln_cuda_attention_kv8", "kvAppendInt8Kernel<<<>>>",
      kvAppendInt8Kernel<T, RowsContiguous>,
      KvInt8{k_cache, v_cache, k_scales, v_scales, int(kv_heads)}, q, k, v,
      k_cache, v_cache, k_scales, v_scales, nullptr, out, n, heads, kv_heads,
      head_dim, 0, max_seq, scale, 0.0f);
}

/// kiln_cuda_attention_kv8 with centered keys (kernel_abi.h
/// kiln_k_attention_kv8_centered; p = *ctx->d_pos, `pos` ignored): keys are
/// quantized as k - m_t and read as scale * q + m_t (KvCentered<KvInt8>), m_t
/// the calibrated pre-RoPE key mean k_mean (device float [kv_heads *
/// head_dim], in the weights) rotated to position t as kiln_cuda_rope with
/// rot_dim and theta would, in double. Same workspace and limits.
template <typename T>
inline void kiln_cuda_attention_kv8_centered(
    kiln_cuda_ctx *ctx, const T *q, const T *k, const T *v, int8_t *k_cache,
    int8_t *v_cache, float *k_scales, float *v_scales, const float *k_mean,
    T *out, int64_t n, int64_t pos, int64_t heads, int64_t kv_heads,
    int64_t head_dim, int64_t rot_dim, int64_t max_seq, float scale,
    float theta) {
  using namespace kiln_cuda_detail;
  static_assert(IsElem<T>::value, "T must be float, __half or __nv_bfloat16");
  (void)pos; // graph replays read the position from ctx->d_pos
  attentionQuantKv<true>(
      ctx, "kiln_cuda_attention_kv8_centered", "kvAppendInt8Kernel<<<>>>",
      kvAppendInt8Kernel<T, RowsContiguous>,
      KvInt8{k_cache, v_cache, k_scales, v_scales, int(kv_heads)}, q, k, v,
      k_cache, v_cache, k_scales, v_scales, k_mean, out, n, heads, kv_heads,
      head_dim, rot_dim, max_seq, scale, theta);
}

/// kiln_cuda_attention over an FP8 E4M3 KV cache (kernel_abi.h
/// kiln_k_attention_kvf8; p = *ctx->d_pos, `pos` ignored): k_cache, v_cache
/// uint8 E4M3 codes [max_seq, kv_heads * head_dim] (OCP OFP8 E4M3FN), k_scales,
/// v_scales float [max_seq, kv_heads]. kvAppendFp8Kernel quantizes the new
/// rows per (token, kv head): scale = amax / 448, code = e4m3(x / scale)
/// (round to nearest even, saturating); the prefill / flash-decoding kernels
/// read K/V as scale * float(code) (KvFp8). Same workspace and limits as
/// kiln_cuda_attention.
template <typename T>
inline void kiln_cuda_attention_kvf8(kiln_cuda_ctx *ctx, const T *q, const T *k,
                                     const T *v, uint8_t *k_cache,
                                     uint8_t *v_cache, float *k_scales,
                                     float *v_scales, T *out, int64_t n,
                                     int64_t pos, int64_t heads,
                                     int64_t kv_heads, int64_t head_dim,
                                     int64_t max_seq, float scale) {
  using namespace kiln_cuda_detail;
  static_assert(IsElem<T>::value, "T must be float, __half or __nv_bfloat16");
  (void)pos; // graph replays read the position from ctx->d_pos
  attentionQuantKv<false>(
      ctx, "kiln_cuda_attention_kvf8", "kvAppendFp8Kernel<<<>>>",
      kvAppendFp8Kernel<T, RowsContiguous>,
      KvFp8{k_cache, v_cache, k_scales, v_scales, int(kv_heads)}, q, k, v,
      k_cache, v_cache, k_scales, v_scales, nullptr, out, n, heads, kv_heads,
      head_dim, 0, max_seq, scale, 0.0f);
}

/// kiln_cuda_attention_kvf8 with centered keys (kernel_abi.h
/// kiln_k_attention_kvf8_centered), as kiln_cuda_attention_kv8_centered
/// (KvCentered<KvFp8>).
template <typename T>
inline void kiln_cuda_attention_kvf8_centered(
    kiln_cuda_ctx *ctx, const T *q, const T *k, const T *v, uint8_t *k_cache,
    uint8_t *v_cache, float *k_scales, float *v_scales, const float *k_mean,
    T *out, int64_t n, int64_t pos, int64_t heads, int64_t kv_heads,
    int64_t head_dim, int64_t rot_dim, int64_t max_seq, float scale,
    float theta) {
  using namespace kiln_cuda_detail;
  static_assert(IsElem<T>::value, "T must be float, __half or __nv_bfloat16");
  (void)pos; // graph replays read the position from ctx->d_pos
  attentionQuantKv<true>(
      ctx, "kiln_cuda_attention_kvf8_centered", "kvAppendFp8Kernel<<<>>>",
      kvAppendFp8Kernel<T, RowsContiguous>,
      KvFp8{k_cache, v_cache, k_scales, v_scales, int(kv_heads)}, q, k, v,
      k_cache, v_cache, k_scales, v_scales, k_mean, out, n, heads, kv_heads,
      head_dim, rot_dim, max_seq, scale, theta);
}

/// kiln_cuda_attention_kvf8 with the FP8 codes held as int8_t (a plan that
/// views the byte cache as i8): the same bytes, reinterpreted.
template <typename T>
inline void kiln_cuda_attention_kvf8(kiln_cuda_ctx *ctx, const T *q, const T *k,
                                     const T *v, int8_t *k_cache,
                                     int8_t *v_cache, float *k_scales,
                                     float *v_scales, T *out, int64_t n,
                                     int64_t pos, int64_t heads,
                                     int64_t kv_heads, int64_t head_dim,
                                     int64_t max_seq, float scale) {
  kiln_cuda_attention_kvf8(ctx, q, k, v, reinterpret_cast<uint8_t *>(k_cache),
                           reinterpret_cast<uint8_t *>(v_cache), k_scales,
                           v_scales, out, n, pos, heads, kv_heads, head_dim,
                           max_seq, scale);
}

/// kiln_cuda_attention_kvf8_centered with the FP8 codes held as int8_t.
template <typename T>
inline void kiln_cuda_attention_kvf8_centered(
    kiln_cuda_ctx *ctx, const T *q, const T *k, const T *v, int8_t *k_cache,
    int8_t *v_cache, float *k_scales, float *v_scales, const float *k_mean,
    T *out, int64_t n, int64_t pos, int64_t heads, int64_t kv_heads,
    int64_t head_dim, int64_t rot_dim, int64_t max_seq, float scale,
    float theta) {
  kiln_cuda_attention_kvf8_centered(
      ctx, q, k, v, reinterpret_cast<uint8_t *>(k_cache),
      reinterpret_cast<uint8_t *>(v_cache), k_scales, v_scales, k_mean, out, n,
      pos, heads, kv_heads, head_dim, rot_dim, max_seq, scale, theta);
}

/// y = silu(gate) * up, count elements of T (any alignment; in-place ok).
template <typename T>
inline void kiln_cuda_swiglu(kiln_cuda_ctx *ctx, const T *gate, const T *up,
                             T *y, int64_t count) {
  kiln_cuda_detail::elementwise<T, kiln_cuda_detail::SwigluOp, false>(
      ctx, "kiln_cuda_swiglu<<<>>>", gate, up, y, count);
}

/// y = x * sigmoid(x), count elements of T.
template <typename T>
inline void kiln_cuda_silu(kiln_cuda_ctx *ctx, const T *x, T *y,
                           int64_t count) {
  kiln_cuda_detail::elementwise<T, kiln_cuda_detail::SiluOp, true>(
      ctx, "kiln_cuda_silu<<<>>>", x, nullptr, y, count);
}

/// y[t, j] = x[t, offset + j] for t < n, j < width (x [n, in]): a column
/// range of T (kiln.slice_columns), one strided device-to-device copy.
template <typename T>
inline void kiln_cuda_slice_columns(kiln_cuda_ctx *ctx, const T *x, T *y,
                                    int64_t n, int64_t in, int64_t offset,
                                    int64_t width) {
  if (kiln_cuda_detail::skip(ctx) || n <= 0 || width <= 0)
    return;
  KILN_CUDA_CHECK(ctx, cudaMemcpy2DAsync(
                           y, size_t(width) * sizeof(T), x + offset,
                           size_t(in) * sizeof(T), size_t(width) * sizeof(T),
                           size_t(n), cudaMemcpyDeviceToDevice,
                           (cudaStream_t)ctx->stream));
}

/// y = a + b, count elements of T.
template <typename T>
inline void kiln_cuda_add(kiln_cuda_ctx *ctx, const T *a, const T *b, T *y,
                          int64_t count) {
  kiln_cuda_detail::elementwise<T, kiln_cuda_detail::AddOp, false>(
      ctx, "kiln_cuda_add<<<>>>", a, b, y, count);
}

/// y = a * b, count elements of T.
template <typename T>
inline void kiln_cuda_mul(kiln_cuda_ctx *ctx, const T *a, const T *b, T *y,
                          int64_t count) {
  kiln_cuda_detail::elementwise<T, kiln_cuda_detail::MulOp, false>(
      ctx, "kiln_cuda_mul<<<>>>", a, b, y, count);
}

/// *out_token = first index of the maximum of logits (float [vocab]).
inline void kiln_cuda_argmax(kiln_cuda_ctx *ctx, const float *logits,
                             int64_t vocab, int32_t *out_token) {
  using namespace kiln_cuda_detail;
  if (skip(ctx))
    return;
  if (!KILN_CUDA_ARG(ctx, vocab > 0 && vocab <= INT32_MAX, "kiln_cuda_argmax",
                     "vocab outside [1, 2^31)"))
    return;
  argmaxKernel<>
      <<<1, kSampleThreads, 0, streamOf(ctx)>>>(logits, int(vocab), out_token);
  KILN_CUDA_LAUNCHED(ctx, "kiln_cuda_argmax<<<>>>");
}

/// Samples *out_token from logits (float [vocab]): greedy when temperature
/// == 0, else softmax(logits / temperature), top-k (top_k <= 0 or >= vocab:
/// off; clamped to KILN_CUDA_SAMPLE_MAX_TOP_K), top-p over the kept set
/// (top_p <= 0 or >= 1: off), inverse-CDF draw with *d_coin (device float in
/// [0, 1)). scratch: device float [vocab] (kiln_cuda_sample_scratch_bytes).
inline void kiln_cuda_sample_topk_topp(kiln_cuda_ctx *ctx, const float *logits,
                                       int64_t vocab, float temperature,
                                       int32_t top_k, float top_p,
                                       const float *d_coin, float *scratch,
                                       int32_t *out_token) {
  using namespace kiln_cuda_detail;
  if (skip(ctx))
    return;
  if (!KILN_CUDA_ARG(ctx, vocab > 0 && vocab <= INT32_MAX,
                     "kiln_cuda_sample_topk_topp", "vocab outside [1, 2^31)") ||
      !KILN_CUDA_ARG(ctx, temperature >= 0.0f, "kiln_cuda_sample_topk_topp",
                     "negative temperature"))
    return;
  sampleKernel<><<<1, kSampleThreads, 0, streamOf(ctx)>>>(
      logits, int(vocab), temperature, top_k, top_p, d_coin, scratch,
      out_token);
  KILN_CUDA_LAUNCHED(ctx, "kiln_cuda_sample_topk_topp<<<>>>");
}

#endif // KILN_CODEGEN_CUDA_KILNCUDAHOST_CUH
