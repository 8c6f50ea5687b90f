//===- PipelineStage.h - A module's pipeline stage ---------------*- C++ -*-===//
//
// kiln-partition{tp rank pp stage} records a rank's program in the
// module's `kiln.partition = {tp, rank, kv_head_offset, pp, stage,
// first_layer, ...}`; the op verifiers and the passes that treat stages or
// shards differently read it here.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_DIALECTS_KILN_IR_PIPELINESTAGE_H
#define KILN_DIALECTS_KILN_IR_PIPELINESTAGE_H

#include "mlir/IR/Operation.h"

#include <cstdint>
#include <optional>

namespace mlir::kiln {

/// The pipeline geometry of a stage's program: `pp` stages, this one
/// `stage` (docs/parallelism.md).
struct PipelineStage {
  int64_t pp = 1, stage = 0;
  /// The model layer the stage's layer 0 is (its kiln.attention `layer`
  /// attributes count from 0 within the stage).
  int64_t firstLayer = 0;
  /// Stages before the last return no logits (they end with kiln.send).
  bool isEarly() const { return stage < pp - 1; }
};

/// The stage of the module holding `op` (or `op` itself), from its
/// kiln.partition attribute; none when it is not a pipeline stage.
std::optional<PipelineStage> pipelineStageOf(Operation *op);

/// The model layer of a kiln.attention `layer` index in the module holding
/// `op`: `layer` itself, plus the stage's first layer in a pipeline stage.
int64_t modelLayerOf(Operation *op, int64_t layer);

/// A tensor-parallel rank's KV heads: the model's `modelKvHeads`, of which
/// the rank holds those from `offset` on (kiln.partition's kv_head_offset
/// and model_kv_heads).
struct KvHeadShard {
  int64_t offset = 0, modelKvHeads = 0;
};
/// The KV heads of the rank whose module holds `op`; none when the module
/// is not split by tensor parallelism.
std::optional<KvHeadShard> kvHeadShardOf(Operation *op);

} // namespace mlir::kiln

#endif // KILN_DIALECTS_KILN_IR_PIPELINESTAGE_H
