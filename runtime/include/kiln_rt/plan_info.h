/*===- plan_info.h - What an emitted model.so was planned for --*- C -*-===*
 *
 * Every model.so (CPU and CUDA targets) exports, with C linkage,
 *
 *   void kiln_plan_info(kiln_plan_info_t *out);
 *
 * which reports the sizes the compiler planned the code for. The runtime
 * compares them with manifest.json and with the size of weights.bin before
 * running anything, so a manifest that disagrees with the code it describes
 * (a hand-edited or mismatched artifact: manifest.json itself carries no
 * checksum unless it is signed) or a weights.bin cut short is refused instead
 * of running kernels over buffers of the wrong size.
 *
 * Adding a field changes the layout: bump KILN_ABI_VERSION (kernel_abi.h)
 * and KILN_CUDA_ABI_VERSION (cuda_abi.h), which both include this header.
 * Version history: kernel ABI 4 / CUDA ABI 2 added the weight extents;
 * kernel ABI 11 / CUDA ABI 4 the step entry point's; kernel ABI 12 / CUDA
 * ABI 6 the tensor-parallel group size.
 *===----------------------------------------------------------------------===*/
#ifndef KILN_RT_PLAN_INFO_H
#define KILN_RT_PLAN_INFO_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_plan_info_t {
  int64_t arena_bytes;        /* activation arena the plan uses, bytes */
  int64_t max_prefill_tokens; /* most tokens one prefill call may take */
  int64_t vocab_size;         /* logits written per call */
  int64_t kv_cache_bytes;     /* KV cache the code addresses, bytes */
  int64_t max_seq;            /* KV-cache rows per layer (context length) */
  /* Weight extents: the highest offset + size (bytes) of weights.bin that
   * the prefill / decode entry point addresses (0 if it reads no weight).
   * weights.bin must be at least this large. */
  int64_t prefill_weights_extent;
  int64_t decode_weights_extent;
  /* The batched step entry point kiln_step (kernel_abi.h, "Batched
   * steps"): the most token rows one step may take, 0 when the plan has no
   * step entry point, and the weight extent it addresses. */
  int64_t step_max_tokens;
  int64_t step_weights_extent;
  /* Ranks of the tensor-parallel group the plan was partitioned for
   * (kiln-partition's tp; 1: not partitioned). The manifest's parallel.tp
   * and the job's size must equal it: the collectives' buffers are sized
   * for it. */
  int64_t tp_size;
} kiln_plan_info_t;

typedef void (*kiln_plan_info_fn)(kiln_plan_info_t *out);

#ifdef __cplusplus
}
#endif

#endif /* KILN_RT_PLAN_INFO_H */
