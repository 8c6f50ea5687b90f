//===- Passes.h - kiln graph transformations --------------------*- C++ -*-===//

#ifndef KILN_PASSES_TRANSFORMS_PASSES_H
#define KILN_PASSES_TRANSFORMS_PASSES_H

#include "dialects/Kiln/IR/KilnOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/Pass.h"

#include <vector>

namespace mlir::kiln {

#define GEN_PASS_DECL
#include "passes/Transforms/Passes.h.inc"

/// Moves `ops` (ops of one block, any order) into a kiln.fused op placed at
/// the first of them, with `families` (empty for a single op): operands from
/// outside become region arguments (weight references defined after the
/// first op are recreated before it), results used outside become the
/// fused op's results. Shared by kiln-fuse and kiln-outline-kernels.
FusedOp outlineFusedRegion(SmallVector<Operation *> ops,
                           ArrayRef<StringRef> families);

/// kiln-partition's pipeline split: the layer count of each of `stages`
/// contiguous stages of layers with costs `layerCost` (bytes of weights
/// read per token), the first stage also paying `firstCost` (embedding)
/// and the last `lastCost` (final norm and classifier), that minimises the
/// largest stage's cost (the linear partition problem, by dynamic
/// programming; ties give earlier stages the extra layer). Empty when
/// `stages` is not in [1, layerCost.size()].
std::vector<int64_t> planPipelineStages(ArrayRef<int64_t> layerCost,
                                        int64_t firstCost, int64_t lastCost,
                                        int64_t stages);

#define GEN_PASS_REGISTRATION
#include "passes/Transforms/Passes.h.inc"

} // namespace mlir::kiln

#endif // KILN_PASSES_TRANSFORMS_PASSES_H
