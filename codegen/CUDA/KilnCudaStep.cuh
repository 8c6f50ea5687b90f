//===- KilnCudaStep.cuh - Kernels of the batched step entry point -*- CUDA -*-===//
//
// The CUDA twins of kernel_abi.h "Batched steps" (runtime/src/cpu/
// StepKernels.cpp): what kiln_step calls besides the row-wise kernels it
// shares with prefill. They read the step's sequences from ctx->batch
// (host row ranges, device positions and block tables; cuda_abi.h
// kiln_cuda_batch) and the layer's paged pool from ctx->kv_pages. Part of
// KilnKernels.cuh.
//
// Attention runs per sequence: each sequence's rows append their keys and
// values at their positions' pool rows (RowsPaged) and attend through its
// block table (KvPaged) with the very prefill / flash-decoding kernels of
// the contiguous caches, so a sequence's outputs are those of running it
// alone on a session (PagedAttention, Kwon et al. 2023; the flattened
// "varlen" batch of vLLM). One launch pair per sequence and layer: a
// varlen kernel over all sequences at once is the next step for speed.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_CODEGEN_CUDA_KILNCUDASTEP_CUH
#define KILN_CODEGEN_CUDA_KILNCUDASTEP_CUH

#include "KilnCudaFused.cuh"

namespace kiln_cuda_detail {

/// The batch and layer `layer`'s pool of a step call, checked.
inline bool stepArgsOk(kiln_cuda_ctx *ctx, const char *call, int64_t layer) {
  return KILN_CUDA_ARG(ctx, ctx->batch != nullptr && ctx->kv_pages != nullptr,
                       call, "no batch (kiln_step only)") &&
         KILN_CUDA_ARG(ctx, layer >= 0, call, "negative layer");
}

/// Attention of sequence s of the step over layer `layer`'s paged pool
/// (kiln_cuda_step_attention and its centered variant; the caller checked
/// the batch, the layer and the shapes).
template <bool kCentered, typename T>
inline void stepAttentionSeq(kiln_cuda_ctx *ctx, const char *call, int32_t s,
                             const T *q, const T *k, const T *v, T *out,
                             int64_t layer, int64_t format, int64_t heads,
                             int64_t kvHeads, int64_t headDim, float scale,
                             int64_t window, const float *kMean,
                             int64_t rotDim, float theta) {
  const kiln_cuda_batch &b = *ctx->batch;
  const kiln_cuda_paged_kv &c = ctx->kv_pages[layer];
  if (!KILN_CUDA_ARG(ctx, c.format == format && c.block_tokens >= 1, call,
                     "the pool's KV format differs from the plan's") ||
      !KILN_CUDA_ARG(ctx,
                     format >= 0 && format <= 2 &&
                         ((KILN_CUDA_STEP_KV_FORMAT_MASK >> format) & 1),
                     call,
                     "KV format not compiled into this model "
                     "(KILN_CUDA_STEP_KV_FORMAT_MASK)") ||
      !KILN_CUDA_ARG(ctx, !kCentered || c.format != KILN_CUDA_KV_PLAIN, call,
                     "centered keys need an 8-bit cache"))
    return;
  const int64_t qDim = heads * headDim, kvDim = kvHeads * headDim;
  // Positions a block table can address: the bound of the kernels' rows.
  const int64_t maxSeq = int64_t(b.max_blocks) * c.block_tokens;
  const int64_t r0 = b.row_start[s], n = b.row_count[s];
  const int64_t *dPos = b.d_seq_pos + s;
  const RowsPaged slot{b.d_block_tables + int64_t(s) * b.max_blocks,
                       int(c.block_tokens)};
  const T *qs = q + r0 * qDim, *ks = k + r0 * kvDim, *vs = v + r0 * kvDim;
  T *os = out + r0 * qDim;
  // The 8-bit pools: int8 or FP8 codes with per-(row, kv head) scales.
  auto quantized = [&](auto trait, auto *kp, auto *vp, auto append,
                       const char *appendName) {
    using Kv = decltype(trait);
    attentionQuantKv<kCentered>(
        ctx, call, appendName, append,
        KvPaged<Kv>{{kp, vp, c.k_scales, c.v_scales, int(kvHeads)}, slot,
                    kvDim},
        qs, ks, vs, kp, vp, c.k_scales, c.v_scales, kMean, os, n, heads,
        kvHeads, headDim, rotDim, maxSeq, scale, theta, dPos, slot, window);
  };
  // Only the formats of KILN_CUDA_STEP_KV_FORMAT_MASK are instantiated
  // (KilnCudaAttention.cuh); the plain pool never holds centered keys.
  constexpr int kFormats = KILN_CUDA_STEP_KV_FORMAT_MASK;
  switch (c.format) {
  case KILN_CUDA_KV_INT8:
    if constexpr ((kFormats >> KILN_CUDA_KV_INT8) & 1)
      quantized(KvInt8{}, static_cast<int8_t *>(c.k_pool),
                static_cast<int8_t *>(c.v_pool),
                kvAppendInt8Kernel<T, RowsPaged>, "kvAppendInt8Kernel<<<>>>");
    break;
  case KILN_CUDA_KV_FP8:
    if constexpr ((kFormats >> KILN_CUDA_KV_FP8) & 1)
      quantized(KvFp8{}, static_cast<uint8_t *>(c.k_pool),
                static_cast<uint8_t *>(c.v_pool),
                kvAppendFp8Kernel<T, RowsPaged>, "kvAppendFp8Kernel<<<>>>");
    break;
  default:
    if constexpr (!kCentered && ((kFormats >> KILN_CUDA_KV_PLAIN) & 1)) {
      auto *kp = static_cast<T *>(c.k_pool);
      auto *vp = static_cast<T *>(c.v_pool);
      kvAppendKernel<T, RowsPaged>
          <<<gridFor(ctx, n * kvDim, 256), 256, 0, streamOf(ctx)>>>(
              ks, vs, kp, vp, n, kvDim, maxSeq, dPos, slot);
      if (!KILN_CUDA_LAUNCHED(ctx, "kvAppendKernel<<<>>>"))
        return;
      attentionDispatch(ctx, qs, KvPaged<KvPlain<T>>{{kp, vp}, slot, kvDim},
                        os, n, heads, kvHeads, headDim, maxSeq, scale, window,
                        dPos);
    }
  }
}

/// Attention of every sequence of the step over layer `layer`'s paged pool
/// (kiln_cuda_step_attention and its centered variant).
template <bool kCentered, typename T>
inline void stepAttention(kiln_cuda_ctx *ctx, const char *call, const T *q,
                          const T *k, const T *v, T *out, int64_t layer,
                          int64_t format, int64_t heads, int64_t kvHeads,
                          int64_t headDim, float scale, int64_t window,
                          const float *kMean, int64_t rotDim, float theta) {
  if (skip(ctx) || !stepArgsOk(ctx, call, layer) ||
      !attentionArgsOk(ctx, call, heads, kvHeads, headDim, 1))
    return;
  for (int32_t s = 0; s < ctx->batch->num_seqs; ++s) {
    stepAttentionSeq<kCentered>(ctx, call, s, q, k, v, out, layer, format,
                                heads, kvHeads, headDim, scale, window, kMean,
                                rotDim, theta);
    if (skip(ctx))
      return;
  }
}

} // namespace kiln_cuda_detail

/// kernel_abi.h kiln_k_step_rope: RoPE (kiln_cuda_rope's rotation) of x
/// [rows, heads * head_dim] with row r at position
/// ctx->batch->d_positions[r]. In place (x == y) is safe.
template <typename T>
inline void kiln_cuda_step_rope(kiln_cuda_ctx *ctx, const T *x, T *y,
                                int64_t rows, int64_t heads, int64_t head_dim,
                                int64_t rot_dim, float theta, int64_t elem) {
  using namespace kiln_cuda_detail;
  static_assert(IsElem<T>::value, "T must be float, __half or __nv_bfloat16");
  (void)elem; // T says it
  if (skip(ctx) || rows <= 0)
    return;
  if (!KILN_CUDA_ARG(ctx, ctx->batch != nullptr, "kiln_cuda_step_rope",
                     "no batch (kiln_step only)") ||
      !KILN_CUDA_ARG(ctx, rot_dim >= 0 && rot_dim <= head_dim,
                     "kiln_cuda_step_rope", "rot_dim outside [0, head_dim]"))
    return;
  const int64_t work = rows * heads * ((head_dim + 1) / 2);
  ropeKernel<T><<<gridFor(ctx, work, 256), 256, 0, streamOf(ctx)>>>(
      x, y, rows, heads, head_dim, rot_dim, theta, nullptr,
      ctx->batch->d_positions);
  KILN_CUDA_LAUNCHED(ctx, "kiln_cuda_step_rope<<<>>>");
}

/// kernel_abi.h kiln_k_step_attention: for each sequence s of ctx->batch,
/// its rows of k, v (T [rows, kv_heads * head_dim]) are stored at their
/// positions' rows of layer `layer`'s paged pool (ctx->kv_pages[layer],
/// whose format must be `format`, KILN_KV_*), then its rows of q (T
/// [rows, heads * head_dim]) attend causally over positions [0, p] (the last
/// `window` when window >= 1) through its block table, into out. Workspace
/// as kiln_cuda_attention (flash-decoding scratch, reused per sequence in
/// stream order).
template <typename T>
inline void kiln_cuda_step_attention(kiln_cuda_ctx *ctx, const T *q,
                                     const T *k, const T *v, T *out,
                                     int64_t layer, int64_t elem,
                                     int64_t format, int64_t heads,
                                     int64_t kv_heads, int64_t head_dim,
                                     float scale, int64_t window) {
  static_assert(kiln_cuda_detail::IsElem<T>::value,
                "T must be float, __half or __nv_bfloat16");
  (void)elem;
  kiln_cuda_detail::stepAttention<false>(
      ctx, "kiln_cuda_step_attention", q, k, v, out, layer, format, heads,
      kv_heads, head_dim, scale, window, nullptr, 0, 0.0f);
}

/// kiln_cuda_step_attention over a centered 8-bit pool (kernel_abi.h
/// kiln_k_step_attention_centered): keys stored minus k_mean (device float
/// [kv_heads * head_dim]) rotated to their position (rot_dim, theta).
template <typename T>
inline void kiln_cuda_step_attention_centered(
    kiln_cuda_ctx *ctx, const T *q, const T *k, const T *v, T *out,
    int64_t layer, int64_t elem, int64_t format, int64_t heads,
    int64_t kv_heads, int64_t head_dim, float scale, int64_t window,
    const float *k_mean, int64_t rot_dim, float theta) {
  static_assert(kiln_cuda_detail::IsElem<T>::value,
                "T must be float, __half or __nv_bfloat16");
  (void)elem;
  if (!KILN_CUDA_ARG(ctx, k_mean != nullptr && rot_dim >= 0 &&
                              rot_dim <= head_dim,
                     "kiln_cuda_step_attention_centered",
                     "needs k_mean and rot_dim in [0, head_dim]"))
    return;
  kiln_cuda_detail::stepAttention<true>(
      ctx, "kiln_cuda_step_attention_centered", q, k, v, out, layer, format,
      heads, kv_heads, head_dim, scale, window, k_mean, rot_dim, theta);
}

/// kernel_abi.h kiln_k_step_last_rows: y[s, :] = x[row_start[s] +
/// row_count[s] - 1, :] for every sequence s (rows of `width` T), one
/// device-to-device copy per sequence in stream order.
template <typename T>
inline void kiln_cuda_step_last_rows(kiln_cuda_ctx *ctx, const T *x, T *y,
                                     int64_t width, int64_t elem) {
  using namespace kiln_cuda_detail;
  (void)elem;
  if (skip(ctx) || !KILN_CUDA_ARG(ctx, ctx->batch != nullptr,
                                  "kiln_cuda_step_last_rows",
                                  "no batch (kiln_step only)"))
    return;
  const kiln_cuda_batch &b = *ctx->batch;
  // The last logit_count[s] rows of each sequence (1 without counts).
  int64_t out = 0;
  for (int32_t s = 0; s < b.num_seqs; ++s) {
    const int64_t count = b.logit_count ? b.logit_count[s] : 1;
    const int64_t first = int64_t(b.row_start[s]) + b.row_count[s] - count;
    if (!KILN_CUDA_CHECK(ctx, cudaMemcpyAsync(y + out * width,
                                              x + first * width,
                                              sizeof(T) * size_t(width * count),
                                              cudaMemcpyDeviceToDevice,
                                              streamOf(ctx))))
      return;
    out += count;
  }
}

#endif // KILN_CODEGEN_CUDA_KILNCUDASTEP_CUH
