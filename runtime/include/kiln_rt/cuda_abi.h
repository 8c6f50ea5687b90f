/*===- cuda_abi.h - Contract between emitted CUDA code and the runtime -*- C -*-===*
 *
 * The CUDA counterpart of kernel_abi.h. For `--target=cuda`, codegen emits
 * model.cu: the plan's entry points as host functions that launch Kiln's CUDA
 * kernels (codegen/CUDA/KilnKernels.cuh, compiled into the same object) and
 * cuBLASLt GEMMs, all on `ctx->stream`:
 *
 *   extern "C" void kiln_prefill(kiln_cuda_ctx *ctx, int64_t n, int64_t pos);
 *   extern "C" void kiln_decode(kiln_cuda_ctx *ctx, int64_t n, int64_t pos);
 *   extern "C" void kiln_step(kiln_cuda_ctx *ctx, int64_t n, int64_t pos);
 *
 * kiln_step (when the plan has one: runtime.entry_points.step) is the
 * batched step of the serving engine (kernel_abi.h, "Batched steps"): n
 * token rows of ctx->batch->num_seqs sequences over the paged KV cache
 * ctx->kv_pages, one logits row per sequence. It is run eagerly (not
 * captured: its launches depend on the host batch description).
 *
 * nvcc compiles model.cu for sm_80 and sm_90a into model.so. The runtime's
 * CUDA executor owns every resource in the context: it copies weights.bin to
 * the device once, allocates the arena and KV cache, creates the stream and
 * the cuBLASLt handle, writes the step's token ids and position to device
 * memory, and captures `kiln_decode` once into a CUDA graph that it replays.
 *
 * Graph replay requires every kernel argument to stay fixed across steps, so
 * kernels read the start position from `*ctx->d_pos` (device memory), never
 * from the host `pos` argument (which emitted code passes along only for
 * host-side bookkeeping). The token count `n` is fixed per captured graph
 * (1 for decode) and is a host value.
 *
 * All pointers below are device pointers unless stated. Activations and
 * weights have the element type recorded in manifest.json recipe.dtype
 * (f32, f16 or bf16); logits are always float32; the KV cache has the
 * manifest's kv_cache.dtype.
 *===----------------------------------------------------------------------===*/
#ifndef KILN_RT_CUDA_ABI_H
#define KILN_RT_CUDA_ABI_H

#include <stdint.h>

#include "kiln_rt/plan_info.h"
#include "kiln_rt/sequence_shard.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_CUDA_ABI_VERSION 8

/// The sequences of one kiln_step call (kernel_abi.h kiln_batch, split into
/// the host copy the launches are planned from and the device copy the
/// kernels read). T = the step's token rows (its `n`), S = num_seqs.
typedef struct kiln_cuda_batch {
  int32_t num_seqs;           /* S */
  int32_t max_blocks;         /* entries per row of the block tables */
  const int32_t *row_start;   /* host [S]: first row of each sequence */
  const int32_t *row_count;   /* host [S]: its rows, each >= 1 */
  const int32_t *pos;         /* host [S]: position of its first row */
  const int32_t *d_positions; /* device [T]: each row's position */
  const int64_t *d_seq_pos;   /* device [S]: pos as int64 (the d_pos of the
                                 sequence's attention launches) */
  const int32_t *d_block_tables; /* device [S, max_blocks] */
  /* kernel_abi.h kiln_batch's logit rows: host [S] or NULL (one each),
   * and their sum. */
  const int32_t *logit_count;
  int32_t num_logit_rows;
} kiln_cuda_batch;

/// One layer's paged KV cache on the device (kernel_abi.h kiln_paged_kv):
/// pools of num_blocks * block_tokens rows of kv_heads * head_dim elements
/// (the activation type for KILN_KV_PLAIN, int8 / FP8 E4M3 codes for
/// KILN_KV_INT8 / KILN_KV_FP8 with float scales per (row, kv head)).
enum {
  KILN_CUDA_KV_PLAIN = 0, /* kernel_abi.h KILN_KV_PLAIN */
  KILN_CUDA_KV_INT8 = 1,  /* KILN_KV_INT8 */
  KILN_CUDA_KV_FP8 = 2,   /* KILN_KV_FP8 */
};
typedef struct kiln_cuda_paged_kv {
  int32_t format;       /* KILN_CUDA_KV_* */
  int32_t block_tokens; /* positions per block */
  int64_t rows;         /* num_blocks * block_tokens */
  void *k_pool, *v_pool;
  float *k_scales, *v_scales; /* 8-bit formats only, else NULL */
} kiln_cuda_paged_kv;

typedef struct kiln_cuda_ctx {
  uint8_t *arena;          /* activation arena, runtime.arena_bytes, 256-byte aligned */
  const uint8_t *weights;  /* weights.bin copied to the device, 256-byte aligned */
  uint8_t *kv;             /* KV cache, runtime.kv_cache.bytes, zeroed at start;
                              per layer K and V (elements of kv_cache.dtype, or
                              int8 / FP8 E4M3 codes followed by f32 scales per
                              (token, kv head)) at the plan's offsets */
  const int32_t *tokens;   /* input token ids [n] */
  float *logits;           /* output: logits of the last input token [vocab] */
  const int64_t *d_pos;    /* start position of this step (device scalar) */
  void *stream;            /* cudaStream_t all work is enqueued on (host handle) */
  void *cublaslt;          /* cublasLtHandle_t (host handle) */
  void *workspace;         /* cuBLASLt workspace and kernel scratch
                              (kiln_cuda_workspace_bytes) */
  uint64_t workspace_bytes;
  int32_t sm_count;        /* multiprocessors of the device, for split-K choices */
  int32_t status;          /* first CUDA/cuBLAS error seen by emitted code, 0 if none */
  char error[256];         /* its message: "<call> failed at <file>:<line>: <reason>" */
  /* kiln_step only (NULL otherwise): the step's sequences (host struct), and
   * one paged-cache descriptor per layer (host array of device pools).
   * kiln_step writes float32[num_seqs, vocab] to `logits`. */
  const kiln_cuda_batch *batch;
  const kiln_cuda_paged_kv *kv_pages;
  /* ncclComm_t of the rank's tensor-parallel group (kiln_cuda_all_reduce,
   * KilnCudaComm.cuh); NULL in a single-process run. */
  void *nccl;
  /* Pipeline stages (kiln_cuda_send / kiln_cuda_recv): ncclComm_t over every
   * rank of the job (pp * tp; rank = stage * tp + tp_rank), NULL unless the
   * artifact has pipeline stages; the rank's place in its TP group. */
  void *nccl_pipeline;
  int32_t tp_size, tp_rank;
} kiln_cuda_ctx;

/* Besides the entry points, emitted model.so exports (C linkage):
 *
 *   uint64_t kiln_cuda_workspace_bytes(void);
 *       bytes the executor must allocate for ctx->workspace (cuBLASLt
 *       workspace plus attention and sampling scratch), 256-byte aligned.
 *   void kiln_cuda_sample(kiln_cuda_ctx *ctx, float temperature, int32_t top_k,
 *                         float top_p, const float *d_coin, int32_t *d_token);
 *       samples the next token from ctx->logits on ctx->stream: greedy
 *       (argmax, first maximum) when temperature == 0, else softmax with
 *       temperature, top-k (0: off), top-p (1: off) and an inverse-CDF draw
 *       with the uniform [0, 1) value *d_coin. Writes the id to *d_token.
 *   int32_t kiln_cuda_abi_version(void);  returns KILN_CUDA_ABI_VERSION.
 */
typedef uint64_t (*kiln_cuda_workspace_bytes_fn)(void);
typedef void (*kiln_cuda_entry_fn)(kiln_cuda_ctx *, int64_t, int64_t);
typedef void (*kiln_cuda_sample_fn)(kiln_cuda_ctx *, float, int32_t, float,
                                    const float *, int32_t *);
typedef int32_t (*kiln_cuda_abi_version_fn)(void);

#ifdef __cplusplus
}
#endif

#endif /* KILN_RT_CUDA_ABI_H */
