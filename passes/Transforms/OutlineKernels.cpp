//===- OutlineKernels.cpp - kiln-outline-kernels ---------------------------===//
//
// Every linear and elementwise op outside a fused region becomes a kiln.fused
// region of its own, which the CPU codegen instantiates as a generated kernel
// (kernel_abi.h, "Generated kernels"; docs/fusion.md).
//
//===----------------------------------------------------------------------===//

#include "passes/Transforms/Passes.h"

namespace mlir::kiln {
#define GEN_PASS_DEF_OUTLINEKERNELSPASS
#include "passes/Transforms/Passes.h.inc"

namespace {
struct OutlineKernelsPass final
    : impl::OutlineKernelsPassBase<OutlineKernelsPass> {
  using Base::Base;
  void runOnOperation() override;
};
} // namespace

/// f32, f16 or bf16: the element types generated kernels load and store.
static bool isGeneratedFloat(Type t) {
  auto tensor = dyn_cast<RankedTensorType>(t);
  if (!tensor)
    return false;
  Type e = tensor.getElementType();
  return e.isF32() || e.isF16() || e.isBF16();
}

/// An op the CPU codegen instantiates as a generated kernel: a linear
/// (W8A8 excepted) or an elementwise op, on float values of rank 2 (rank 1
/// for the bias of add_bias).
static bool isGeneratedKernelOp(Operation &op) {
  if (auto q = dyn_cast<QuantizedLinearOp>(op))
    if (q.hasQuantizedActivations())
      return false;
  if (!isa<LinearOp, QuantizedLinearOp>(op) && !isFusableElementwise(&op))
    return false;
  if (op.getNumResults() != 1 || !isGeneratedFloat(op.getResult(0).getType()) ||
      cast<RankedTensorType>(op.getResult(0).getType()).getRank() != 2)
    return false;
  return isGeneratedFloat(op.getOperand(0).getType());
}

void OutlineKernelsPass::runOnOperation() {
  ModuleOp module = getOperation();
  for (func::FuncOp func : module.getOps<func::FuncOp>()) {
    if (func.isExternal())
      continue;
    if (func->hasAttr("kiln.arena_bytes")) {
      func.emitError() << "kiln-outline-kernels: '" << func.getSymName()
                       << "' is already memory-planned; run "
                          "kiln-outline-kernels before kiln-memory-plan";
      return signalPassFailure();
    }
    SmallVector<Operation *> ops;
    for (Operation &op : func.getBody().front()) {
      if (isGeneratedKernelOp(op))
        ops.push_back(&op);
      // The classifier's result is the entry point's own logits buffer, not
      // a region result: kiln-lower-to-plan builds its kernel.
      if (auto logits = dyn_cast<LogitsOp>(op);
          logits && isGeneratedFloat(logits.getHidden().getType()))
        op.setAttr(kGeneratedKernelAttr, UnitAttr::get(op.getContext()));
    }
    for (Operation *op : ops)
      outlineFusedRegion({op}, {});
  }
}

} // namespace mlir::kiln
