//===- Passes.h - kiln graph transformations --------------------*- C++ -*-===//

#ifndef KILN_PASSES_TRANSFORMS_PASSES_H
#define KILN_PASSES_TRANSFORMS_PASSES_H

#include "dialects/Kiln/IR/KilnOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/Pass.h"

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

#define GEN_PASS_REGISTRATION
#include "passes/Transforms/Passes.h.inc"

} // namespace mlir::kiln

#endif // KILN_PASSES_TRANSFORMS_PASSES_H
