/*===- sequence_shard.h - Sequence parallelism's split of the rows -*- C -*-===
 *
 * Sequence parallelism (Korthikanti et al. 2022, "Reducing Activation
 * Recomputation in Large Transformer Models", section 4.2.2) keeps the
 * residual stream, its add and its rms_norm on a shard of the rows (tokens)
 * of each rank of a tensor-parallel group. This is the one rule every part
 * of Kiln uses for that split (the kiln.reduce_scatter / kiln.all_slice /
 * kiln.all_gather_rows ops, their lowering, the CPU and CUDA kernels):
 *
 *   n >= min_tokens: rank r of N holds rows [floor(n r / N),
 *                    floor(n (r + 1) / N)): contiguous, in rank order,
 *                    sizes differing by at most one, none empty (min_tokens
 *                    >= N, checked by the ops' verifier);
 *   n <  min_tokens: every rank holds every row [0, n) (plain tensor
 *                    parallelism: short prefill chunks, where the split does
 *                    not pay).
 *
 * Included by kernel_abi.h and cuda_abi.h.
 *===----------------------------------------------------------------------===*/
#ifndef KILN_RT_SEQUENCE_SHARD_H
#define KILN_RT_SEQUENCE_SHARD_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** True when n rows are split over the group (n >= min_tokens, group > 1). */
static inline int kiln_sequence_split(int64_t n, int64_t group,
                                      int64_t min_tokens) {
  return group > 1 && n >= min_tokens;
}

/** First row of rank `rank`'s shard of n rows. */
static inline int64_t kiln_sequence_shard_start(int64_t n, int64_t group,
                                                int64_t rank,
                                                int64_t min_tokens) {
  return kiln_sequence_split(n, group, min_tokens) ? n * rank / group : 0;
}

/** Rows of rank `rank`'s shard of n rows. */
static inline int64_t kiln_sequence_shard_rows(int64_t n, int64_t group,
                                               int64_t rank,
                                               int64_t min_tokens) {
  return kiln_sequence_split(n, group, min_tokens)
             ? n * (rank + 1) / group - n * rank / group
             : n;
}

/*
 * The 8-bit all-gather of rows (kiln.all_gather_rows with wire_quant;
 * kernel_abi.h kiln_k_all_gather_rows_q8 and its CUDA twin): each wire row
 * is its float32 scales, then `cols` int8 codes, padded to 4 bytes.
 */
#define KILN_WIRE_INT8_PER_TOKEN 1  /**< one scale per row */
#define KILN_WIRE_INT8_PER_BLOCK 2  /**< one scale per 32 elements */
#define KILN_WIRE_INT8_PER_TENSOR 3 /**< a static scale, none on the wire */

/** One wire row of `cols` elements: `scales` float32 scales (1 per token,
 * cols / 32 per block, none per tensor), then the int8 codes, padded to 4:
 * `bytes` in all. */
typedef struct {
  int64_t cols, scales, bytes;
} kiln_wire_row;

static inline kiln_wire_row kiln_wire_row_of(int64_t cols, int64_t wire) {
  kiln_wire_row w;
  w.cols = cols;
  w.scales = wire == KILN_WIRE_INT8_PER_TOKEN   ? 1
             : wire == KILN_WIRE_INT8_PER_BLOCK ? cols / 32
                                                : 0;
  w.bytes = 4 * w.scales + (cols + 3) / 4 * 4;
  return w;
}

/** True when rule `wire` can carry rows of `cols` elements: per block needs
 * a multiple of 32, per tensor a positive finite `scale`. */
static inline int kiln_wire_rule_valid(int64_t cols, int64_t wire,
                                       float scale) {
  return wire == KILN_WIRE_INT8_PER_TOKEN ||
         (wire == KILN_WIRE_INT8_PER_BLOCK && cols % 32 == 0) ||
         (wire == KILN_WIRE_INT8_PER_TENSOR && scale > 0.0f &&
          scale <= 3.4028235e38f);
}

#ifdef __cplusplus
}
#endif

#endif /* KILN_RT_SEQUENCE_SHARD_H */
