//===- PipelineStage.h - A module's pipeline stage ---------------*- C++ -*-===//
//
// kiln-partition{pp stage} records a pipeline stage's program in the
// module's `kiln.partition = {..., pp, stage}`; the op verifiers and the
// passes that treat stages differently read it here.
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
  /// Stages before the last return no logits (they end with kiln.send).
  bool isEarly() const { return stage < pp - 1; }
};

/// The stage of the module holding `op` (or `op` itself), from its
/// kiln.partition attribute; none when it is not a pipeline stage.
std::optional<PipelineStage> pipelineStageOf(Operation *op);

} // namespace mlir::kiln

#endif // KILN_DIALECTS_KILN_IR_PIPELINESTAGE_H
