//===- Passes.h - kiln graph transformations --------------------*- C++ -*-===//

#ifndef KILN_PASSES_TRANSFORMS_PASSES_H
#define KILN_PASSES_TRANSFORMS_PASSES_H

#include "dialects/Kiln/IR/KilnOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/Pass.h"

namespace mlir::kiln {

#define GEN_PASS_DECL
#include "passes/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/Transforms/Passes.h.inc"

} // namespace mlir::kiln

#endif // KILN_PASSES_TRANSFORMS_PASSES_H
