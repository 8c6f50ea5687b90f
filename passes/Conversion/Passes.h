//===- Passes.h - kiln lowerings --------------------------------*- C++ -*-===//

#ifndef KILN_PASSES_CONVERSION_PASSES_H
#define KILN_PASSES_CONVERSION_PASSES_H

#include "dialects/Kiln/IR/KilnOps.h"
#include "dialects/Plan/IR/PlanOps.h"
#include "mlir/Pass/Pass.h"

namespace mlir::kiln {

#define GEN_PASS_DECL
#include "passes/Conversion/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/Conversion/Passes.h.inc"

} // namespace mlir::kiln

#endif // KILN_PASSES_CONVERSION_PASSES_H
