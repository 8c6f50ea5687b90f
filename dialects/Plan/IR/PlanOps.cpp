//===- PlanOps.cpp - plan dialect -----------------------------------------===//

#include "dialects/Plan/IR/PlanOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"

using namespace mlir;
using namespace mlir::kiln::plan;

#include "dialects/Plan/IR/PlanDialect.cpp.inc"

void PlanDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "dialects/Plan/IR/PlanOps.cpp.inc"
      >();
}

LogicalResult WeightOp::verify() {
  auto type = cast<MemRefType>(getType());
  if (!type.hasStaticShape())
    return emitOpError() << "expects a static weight shape, got " << type;
  if (getOffset() % 64 != 0)
    return emitOpError() << "expects a 64-byte aligned offset, got "
                         << getOffset();
  return success();
}

LogicalResult WeightRefOp::verifySymbolUses(SymbolTableCollection &symbols) {
  auto weight = symbols.lookupNearestSymbolFrom<WeightOp>(*this, getNameAttr());
  if (!weight)
    return emitOpError() << "'" << getName()
                         << "' does not reference a plan.weight";
  if (weight.getType() != getType())
    return emitOpError() << "result type " << getType()
                         << " does not match the weight type "
                         << weight.getType();
  return success();
}

LogicalResult ArenaViewOp::verify() {
  auto type = cast<MemRefType>(getType());
  if (getOffset() % 64 != 0)
    return emitOpError() << "expects a 64-byte aligned offset, got "
                         << getOffset();
  if (static_cast<int64_t>(getDynamicSizes().size()) !=
      static_cast<int64_t>(type.getNumDynamicDims()))
    return emitOpError() << "expects " << type.getNumDynamicDims()
                         << " dynamic sizes, got " << getDynamicSizes().size();
  return success();
}

LogicalResult CallKernelOp::verify() {
  if (!getCallee().starts_with("kiln_k_"))
    return emitOpError() << "callee '" << getCallee()
                         << "' is not a kernel of the runtime ABI (kiln_k_*)";
  for (Value arg : getArgs()) {
    Type t = arg.getType();
    if (!isa<MemRefType, IndexType>(t) && !t.isF32())
      return emitOpError() << "cannot pass a value of type " << t
                           << " to a kernel (expected memref, index or f32)";
  }
  return success();
}

#define GET_OP_CLASSES
#include "dialects/Plan/IR/PlanOps.cpp.inc"
