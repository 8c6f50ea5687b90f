//===- CpuStepper.h - The batched step on the host ---------------*- C++ -*-===//
//
// What a cpu artifact's kiln_step needs besides the step's arrays: the
// paged KV pool (one anonymous mapping, sliced per layer into keys, values
// and, for 8-bit caches, their scales; kernel_abi.h kiln_paged_kv) and the
// activation arena. The serving engine owns one; so does each follower rank
// of a tensor-parallel engine (comm/ParallelExecutor.h), with the same block
// geometry, so that rank 0's block tables address every rank's pool.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_RUNTIME_SERVE_CPUSTEPPER_H
#define KILN_RUNTIME_SERVE_CPUSTEPPER_H

#include "base/Status.h"
#include "kiln_rt/kernel_abi.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace kiln::rt {
class Artifact;
}

namespace kiln::rt::serve {

/// The host arrays of one batched step (kernel_abi.h kiln_batch): S
/// sequences, T token rows. Sequence s owns rows [row_start[s], row_start[s]
/// + row_count[s]) at positions from pos[s]; its blocks are
/// block_tables[s * max_blocks, ...). copy_src[i] -> copy_dst[i] are the
/// copy-on-write block copies made before the step.
struct StepArrays {
  int32_t numSeqs = 0, numTokens = 0, maxBlocks = 0, numCopies = 0;
  const int32_t *rowStart = nullptr, *rowCount = nullptr, *pos = nullptr;
  const int32_t *blockTables = nullptr; ///< [numSeqs * maxBlocks]
  const int32_t *tokens = nullptr, *positions = nullptr; ///< [numTokens]
  const int32_t *copySrc = nullptr, *copyDst = nullptr;  ///< [numCopies]
  /// Rows with logits per sequence (kiln_batch.logit_count; null: one,
  /// the last) and their sum.
  const int32_t *logitCount = nullptr;
  int32_t numLogitRows = 0;
};

/// One pipeline micro-batch of a step (GPipe, Huang et al. 2019): the
/// step's sequences [firstSeq, firstSeq + arrays.numSeqs), their token rows
/// renumbered from 0 (rowStart is held here; `arrays` points into the
/// step's other arrays). The copy-on-write copies go with the first
/// micro-batch: they must precede every read of the pool.
struct MicroBatch {
  int32_t firstSeq = 0;
  StepArrays arrays;
  std::vector<int32_t> rowStart;
};

/// Cuts `step` into min(parts, numSeqs) micro-batches of consecutive
/// sequences, each with about numTokens / parts token rows (a cut is made
/// once a part holds its share, leaving every later part a sequence).
/// Every rank of a pipeline runs them in order, so stage s works on
/// micro-batch k while stage s + 1 works on k - 1; rank 0 and the ranks
/// that follow it compute the same cuts from the same arrays. parts <= 1:
/// the step whole.
std::vector<MicroBatch> splitStep(const StepArrays &step, int32_t parts);

/// The paged pool's element format for a manifest's kv_cache.dtype:
/// KILN_KV_PLAIN with the dtype's bytes, or KILN_KV_INT8 / KILN_KV_FP8
/// with one byte and f32 scales per (position, kv head).
struct PoolFormat {
  int32_t format = KILN_KV_PLAIN;
  int64_t elemBytes = 4;
  bool quantized() const { return format != KILN_KV_PLAIN; }
};
PoolFormat poolFormat(const std::string &kvDtype);

/// Byte layout of a pool of `numBlocks` blocks of `blockTokens` positions:
/// per layer, keys, values, then (8-bit formats) their scales, each part
/// 64-byte aligned; layer l starts at l * layerBytes. The host pool
/// (CpuStepper) and the device pool (the CUDA stepper) share it.
struct PoolLayout {
  size_t kvRowBytes = 0, scaleRowBytes = 0; ///< one position of one layer
  size_t dataBytes = 0, scaleBytes = 0;     ///< one part of one layer
  size_t layerBytes = 0, poolBytes = 0;
};
PoolLayout poolLayout(int64_t layers, int64_t kvHeads, int64_t headDim,
                      PoolFormat format, int64_t numBlocks,
                      int64_t blockTokens);

class CpuStepper {
public:
  /// The pool of `numBlocks` blocks of `blockTokens` positions in the KV
  /// format of `artifact`'s manifest (kv_cache.dtype, layers, kv_heads,
  /// head_dim), mapped on demand (MAP_NORESERVE), and the arena.
  /// KILN_RT_RESOURCE_EXHAUSTED when either cannot be allocated.
  static Status create(const Artifact &artifact, int64_t blockTokens,
                       int64_t numBlocks, std::unique_ptr<CpuStepper> &out);
  ~CpuStepper();
  CpuStepper(const CpuStepper &) = delete;
  CpuStepper &operator=(const CpuStepper &) = delete;

  /// The copies, then kiln_step over `step`: logits float32[numSeqs,
  /// vocab]. `comm`: the rank's group (kernel_abi.h kiln_exec_ctx::comm).
  void run(const StepArrays &step, float *logits, void *comm);

private:
  explicit CpuStepper(const Artifact &artifact) : artifact_(artifact) {}
  const Artifact &artifact_;
  int64_t blockTokens_ = 0;
  void *pool_ = nullptr;
  size_t poolBytes_ = 0;
  std::vector<kiln_paged_kv> kvPages_;
  size_t kvRowBytes_ = 0, scaleRowBytes_ = 0;
  uint8_t *arena_ = nullptr;
};

} // namespace kiln::rt::serve

#endif // KILN_RUNTIME_SERVE_CPUSTEPPER_H
