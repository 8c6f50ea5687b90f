//===- StepKernels.cpp - Kernels of the batched step entry point ----------===//
//
// kiln_step (kernel_abi.h, "Batched steps") calls these with its context:
// they take the step's kiln_batch and the layer's paged pool from it and
// run the per-row / per-sequence kernels, which are bit-identical to
// running each sequence alone (PagedAttentionTest).
//
//===----------------------------------------------------------------------===//

#include "kiln_rt/kernel_abi.h"

#include <cstring>

extern "C" {

void kiln_k_step_rope(kiln_exec_ctx *ctx, const void *x, void *y,
                      int64_t rows, int64_t heads, int64_t head_dim,
                      int64_t rot_dim, float theta, int64_t elem) {
  kiln_k_rope_rows(int32_t(elem), x, y, rows, heads, head_dim, rot_dim,
                   ctx->batch->positions, theta);
}

static void stepAttention(kiln_exec_ctx *ctx, const void *q, const void *k,
                          const void *v, void *out, int64_t layer,
                          int64_t elem, int64_t heads, int64_t kvHeads,
                          int64_t headDim, float scale, int64_t window,
                          const float *kMean, int64_t rotDim, float theta) {
  kiln_paged_kv kv = ctx->kv_pages[layer];
  kv.k_mean = kMean;
  kv.rot_dim = rotDim;
  kv.theta = theta;
  kiln_k_paged_attention_batch(&kv, ctx->batch, int32_t(elem), q, k, v, out,
                               heads, kvHeads, headDim, scale, window);
}

void kiln_k_step_attention(kiln_exec_ctx *ctx, const void *q, const void *k,
                           const void *v, void *out, int64_t layer,
                           int64_t elem, int64_t format, int64_t heads,
                           int64_t kv_heads, int64_t head_dim, float scale,
                           int64_t window) {
  (void)format; // the runtime allocated the pools in this format
  stepAttention(ctx, q, k, v, out, layer, elem, heads, kv_heads, head_dim,
                scale, window, nullptr, 0, 0.0f);
}

void kiln_k_step_attention_sparse(
    kiln_exec_ctx *ctx, const void *q, const void *k, const void *v,
    void *out, int64_t layer, int64_t elem, int64_t format, int64_t heads,
    int64_t kv_heads, int64_t head_dim, float scale, int64_t window,
    float gamma, int64_t block, int64_t sink, int64_t local,
    int64_t min_budget, int64_t max_budget, int64_t min_tokens,
    int64_t streaming, int64_t stride) {
  (void)format;
  const kiln_batch *batch = ctx->batch;
  const size_t actBytes = elem == KILN_ELEM_F32 ? 4 : 2;
  const int64_t qDim = heads * head_dim, kvDim = kv_heads * head_dim;
  for (int32_t s = 0; s < batch->num_seqs; ++s) {
    kiln_paged_kv one = ctx->kv_pages[layer];
    one.block_table = batch->block_tables + int64_t(s) * batch->max_blocks;
    const int64_t r0 = batch->row_start[s], n = batch->row_count[s];
    if (n <= 0)
      continue;
    auto at = [&](const void *p, int64_t dim) {
      return static_cast<const uint8_t *>(p) + size_t(r0 * dim) * actBytes;
    };
    void *o = static_cast<uint8_t *>(out) + size_t(r0 * qDim) * actBytes;
    if (n == 1 || window > 0)
      kiln_k_paged_attention(&one, int32_t(elem), at(q, qDim), at(k, kvDim),
                             at(v, kvDim), o, n, batch->pos[s], heads,
                             kv_heads, head_dim, scale, window);
    else
      kiln_k_paged_attention_sparse(
          &one, int32_t(elem), at(q, qDim), at(k, kvDim), at(v, kvDim), o, n,
          batch->pos[s], heads, kv_heads, head_dim, scale, gamma, block, sink,
          local, min_budget, max_budget, min_tokens, layer, streaming, stride);
  }
}

void kiln_k_step_attention_centered(kiln_exec_ctx *ctx, const void *q,
                                    const void *k, const void *v, void *out,
                                    int64_t layer, int64_t elem,
                                    int64_t format, int64_t heads,
                                    int64_t kv_heads, int64_t head_dim,
                                    float scale, int64_t window,
                                    const float *k_mean, int64_t rot_dim,
                                    float theta) {
  (void)format;
  stepAttention(ctx, q, k, v, out, layer, elem, heads, kv_heads, head_dim,
                scale, window, k_mean, rot_dim, theta);
}

void kiln_k_step_last_rows(kiln_exec_ctx *ctx, const void *x, void *y,
                           int64_t width, int64_t elem) {
  const size_t row = size_t(width) * (elem == KILN_ELEM_F32 ? 4 : 2);
  const kiln_batch *b = ctx->batch;
  // The last logit_count[s] rows of each sequence (1 without counts), in
  // order.
  size_t out = 0;
  for (int32_t s = 0; s < b->num_seqs; ++s) {
    const int32_t count = b->logit_count ? b->logit_count[s] : 1;
    const int32_t first = b->row_start[s] + b->row_count[s] - count;
    std::memcpy(static_cast<uint8_t *>(y) + out * row,
                static_cast<const uint8_t *>(x) + size_t(first) * row,
                size_t(count) * row);
    out += size_t(count);
  }
}

} // extern "C"
