/*===- CudaExecutor.h - C interface of libkiln_runtime_cuda.so ----*- C -*-===*
 *
 * libkiln_runtime.so never links CUDA (STYLE.md section 6: "No CUDA driver is
 * a status, not a crash"). For an artifact whose manifest says
 * "target": "cuda" it dlopen()s libkiln_runtime_cuda.so from its own
 * directory and drives it through the table returned by
 * kiln_cudaexec_get_api(), the only symbol that library exports.
 *
 * The CUDA side owns every device resource of kiln_cuda_ctx (cuda_abi.h):
 *   model   (one per artifact): device 0, weights.bin copied to the device,
 *           the cuBLASLt handle (libcublasLt is dlopen()ed, never linked);
 *   session (one per sequence): a non-blocking stream, arena, zeroed KV
 *           cache, token/position buffers, logits, workspace, and the CUDA
 *           graph of `kiln_decode(ctx, 1, pos)` captured at the first decode;
 *   stepper (one per serving engine): the batched step `kiln_step` over a
 *           paged KV pool in device memory (cuda_abi.h kiln_cuda_batch /
 *           kiln_cuda_paged_kv): a stream, arena, workspace, the pool
 *           (zeroed), device copies of each step's tokens, positions and
 *           block tables, and the logits of one row per sequence.
 *
 * Conventions: plain C, no exception crosses it. Fallible calls return a
 * kiln_rt_status_code_t value (0 = OK) and, on failure, fill `*err` with the
 * same code and a NUL-terminated message; CUDA failures read
 * "<call> failed at <file>:<line>: <cudaGetErrorString>". `err` may be NULL.
 * Nothing here is thread-safe per object.
 *===----------------------------------------------------------------------===*/
#ifndef KILN_RUNTIME_CUDA_CUDAEXECUTOR_H
#define KILN_RUNTIME_CUDA_CUDAEXECUTOR_H

#include "kiln_rt/cuda_abi.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bump when the table or a descriptor changes layout or meaning. */
#define KILN_CUDAEXEC_INTERFACE_VERSION 4

typedef struct kiln_cudaexec_error_t {
  int32_t code;       /* kiln_rt_status_code_t */
  char message[1024]; /* NUL-terminated */
} kiln_cudaexec_error_t;

typedef struct kiln_cudaexec_model_s kiln_cudaexec_model_t;
typedef struct kiln_cudaexec_session_s kiln_cudaexec_session_t;
typedef struct kiln_cudaexec_stepper_s kiln_cudaexec_stepper_t;

/* What model_create needs; the runtime fills it from the validated manifest
 * and the dlopen()ed model.so. Pointers need only live during the call. */
typedef struct kiln_cudaexec_model_desc_t {
  const uint8_t *weights;      /* host copy of weights.bin (the mmap) */
  uint64_t weights_bytes;
  uint64_t arena_bytes;        /* runtime.arena_bytes */
  uint64_t kv_bytes;           /* runtime.kv_cache.bytes */
  int64_t max_prefill_tokens;  /* runtime.max_prefill_tokens */
  int64_t vocab_size;          /* model.vocab_size (logits row) */
  kiln_cuda_entry_fn prefill;  /* runtime.entry_points.prefill */
  kiln_cuda_entry_fn decode;   /* runtime.entry_points.decode */
  kiln_cuda_entry_fn step;     /* runtime.entry_points.step, or NULL */
  kiln_cuda_sample_fn sample;  /* kiln_cuda_sample */
  kiln_cuda_workspace_bytes_fn workspace_bytes; /* kiln_cuda_workspace_bytes */
  kiln_cuda_abi_version_fn abi_version;         /* kiln_cuda_abi_version */
  /* Tensor parallelism (manifest parallel.tp; docs/parallelism.md): with
   * tp_size > 1 the model runs on device local_rank % device count and
   * joins an NCCL communicator of tp_size ranks as tp_rank
   * (ncclCommInitRank over nccl_id, the ncclUniqueId rank 0 made with
   * nccl_unique_id and broadcast); every step then waits at most
   * timeout_ms for the device (a peer that never joins an all-reduce),
   * after which the communicator is aborted and the step fails with
   * KILN_RT_DEADLINE_EXCEEDED. tp_size 0 or 1: device 0, no NCCL.
   * Pipeline stages (manifest parallel.pp): with pp_size > 1 the job has
   * pp_size * tp_size ranks (rank = stage * tp_size + tp_rank), nccl_id
   * makes one communicator over all of them (kiln_cuda_send / recv) and
   * each stage's TP group is split from it (ncclCommSplit, color = stage).
   * pp_size 0 or 1: no pipeline. */
  int32_t tp_rank, tp_size, local_rank;
  int32_t pp_size, stage;
  uint8_t nccl_id[128];
  int64_t timeout_ms;
  kiln_cuda_entry_fn verify;   /* runtime.entry_points.verify, or NULL */
} kiln_cudaexec_model_desc_t;

/* Where layer l's K and V pools (and the 8-bit formats' scales) lie in the
 * stepper's pool allocation, in bytes from its start (64-byte aligned). */
typedef struct kiln_cudaexec_layer_pool_t {
  uint64_t k_offset, v_offset;
  uint64_t k_scales_offset, v_scales_offset; /* 8-bit formats only */
} kiln_cudaexec_layer_pool_t;

/* The serving engine's paged KV pool and step limits (stepper_create). */
typedef struct kiln_cudaexec_step_desc_t {
  int32_t layers;
  int32_t format;          /* KILN_CUDA_KV_* */
  int32_t block_tokens;    /* positions per block */
  int64_t num_blocks;      /* blocks of the pool */
  uint64_t pool_bytes;     /* the whole pool, every layer */
  uint64_t kv_row_bytes;   /* one position of one layer's K (or V) pool */
  uint64_t scale_row_bytes; /* its scales (8-bit formats), else 0 */
  const kiln_cudaexec_layer_pool_t *layer_pools; /* [layers] */
  int32_t max_seqs;        /* sequences per step */
  int32_t max_tokens;      /* token rows per step (<= the plan's step max) */
  int32_t max_blocks;      /* block-table entries per sequence */
} kiln_cudaexec_step_desc_t;

/* One step (host arrays, read during the call): T = num_tokens rows of
 * S = num_seqs sequences, as kernel_abi.h kiln_batch. */
typedef struct kiln_cudaexec_step_t {
  int32_t num_seqs, num_tokens, max_blocks;
  const int32_t *tokens;       /* [T] */
  const int32_t *positions;    /* [T] */
  const int32_t *row_start;    /* [S] */
  const int32_t *row_count;    /* [S] */
  const int32_t *pos;          /* [S] */
  const int32_t *block_tables; /* [S, max_blocks] */
  /* Copy-on-write before the step: block copy_dst[i] of every layer's
   * pools (and scales) becomes a copy of block copy_src[i]. */
  int32_t num_copies;
  const int32_t *copy_src, *copy_dst;
} kiln_cudaexec_step_t;

typedef struct kiln_cudaexec_api_t {
  uint32_t interface_version; /* KILN_CUDAEXEC_INTERFACE_VERSION */
  uint32_t struct_size;       /* sizeof(kiln_cudaexec_api_t) */

  /* cudaGetDeviceCount() >= 1. Writes "NAME (N SMs, M GiB, sm_XY)" of device
   * 0 to out_name and its global memory in bytes to *out_memory_bytes.
   * Fails with the CUDA reason (no driver, no device). */
  int32_t (*device_probe)(char *out_name, size_t name_capacity,
                          uint64_t *out_memory_bytes,
                          kiln_cudaexec_error_t *err);

  /* cudaSetDevice(0); checks abi_version(); creates the cuBLASLt handle;
   * copies the weights to the device through pinned staging buffers. */
  int32_t (*model_create)(const kiln_cudaexec_model_desc_t *desc,
                          kiln_cudaexec_model_t **out_model,
                          kiln_cudaexec_error_t *err);
  void (*model_release)(kiln_cudaexec_model_t *model); /* NULL ok */

  /* Stream and per-sequence buffers; the KV cache is zeroed. */
  int32_t (*session_create)(kiln_cudaexec_model_t *model,
                            kiln_cudaexec_session_t **out_session,
                            kiln_cudaexec_error_t *err);
  void (*session_release)(kiln_cudaexec_session_t *session); /* NULL ok */
  /* Zeroes the KV cache (stream-ordered). */
  int32_t (*session_reset)(kiln_cudaexec_session_t *session,
                           kiln_cudaexec_error_t *err);
  /* tokens[0, n) at positions [pos, pos + n), in chunks of at most
   * max_prefill_tokens, eagerly; returns after the stream is synchronized.
   * The caller validated ids and positions. */
  int32_t (*session_prefill)(kiln_cudaexec_session_t *session,
                             const int32_t *tokens, int64_t n, int64_t pos,
                             kiln_cudaexec_error_t *err);
  /* One token at `pos` by replaying the decode graph (captured on the first
   * call); returns after the stream is synchronized. */
  int32_t (*session_decode)(kiln_cudaexec_session_t *session, int32_t token,
                            int64_t pos, kiln_cudaexec_error_t *err);
  /* Host (pinned) copy of the last logits row, float32[vocab]; valid until
   * the next call on the session. */
  int32_t (*session_logits)(kiln_cudaexec_session_t *session,
                            const float **out_logits,
                            kiln_cudaexec_error_t *err);
  /* kiln_cuda_sample on the device with the host-drawn uniform `coin`;
   * top_k 0 = off, top_p 1 = off; copies the 4-byte id back. */
  int32_t (*session_sample)(kiln_cudaexec_session_t *session,
                            float temperature, int32_t top_k, float top_p,
                            float coin, int32_t *out_token,
                            kiln_cudaexec_error_t *err);

  /* A stepper for the model's kiln_step (model_desc.step must be set):
   * allocates the pool (zeroed) and the step buffers. */
  int32_t (*stepper_create)(kiln_cudaexec_model_t *model,
                            const kiln_cudaexec_step_desc_t *desc,
                            kiln_cudaexec_stepper_t **out_stepper,
                            kiln_cudaexec_error_t *err);
  void (*stepper_release)(kiln_cudaexec_stepper_t *stepper); /* NULL ok */
  /* Uploads the step's tokens, positions and block tables, runs kiln_step
   * eagerly, copies the logits back and synchronizes: *out_logits is a
   * host (pinned) float32[num_seqs, vocab], valid until the next call. The
   * caller validated the step against the desc's limits. */
  int32_t (*stepper_run)(kiln_cudaexec_stepper_t *stepper,
                         const kiln_cudaexec_step_t *step,
                         const float **out_logits, kiln_cudaexec_error_t *err);

  /* Best-of-`reps` device-to-device cudaMemcpy of `bytes` on device 0,
   * counted as 2 * bytes moved (read + write) per second. */
  int32_t (*memcpy_bandwidth)(uint64_t bytes, int32_t reps,
                              double *out_bytes_per_second,
                              kiln_cudaexec_error_t *err);

  /* ncclGetUniqueId into out[0, 128): rank 0's, broadcast to the other
   * ranks before model_create. KILN_RT_UNIMPLEMENTED when the executor was
   * built without NCCL. */
  int32_t (*nccl_unique_id)(uint8_t *out, kiln_cudaexec_error_t *err);

  /* Speculative decoding's verify step (model_desc.verify must be set):
   * tokens[0, n) at positions [pos, pos + n) through kiln_verify in chunks
   * of at most max_prefill_tokens, every row's logits copied to the host
   * buffer `rows` (float32[n, vocab]); the last row also becomes the
   * session's logits (session_logits / session_sample). Returns after the
   * stream is synchronized. The caller validated ids and positions. */
  int32_t (*session_verify)(kiln_cudaexec_session_t *session,
                            const int32_t *tokens, int64_t n, int64_t pos,
                            float *rows, kiln_cudaexec_error_t *err);
} kiln_cudaexec_api_t;

/* The one exported symbol of libkiln_runtime_cuda.so. */
const kiln_cudaexec_api_t *kiln_cudaexec_get_api(void);
typedef const kiln_cudaexec_api_t *(*kiln_cudaexec_get_api_fn)(void);

#ifdef __cplusplus
}
#endif

#endif /* KILN_RUNTIME_CUDA_CUDAEXECUTOR_H */
