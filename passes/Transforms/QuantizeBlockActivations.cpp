//===- QuantizeBlockActivations.cpp - int8 activations for block linears --===//
//
// kiln-quantize-block-activations (Passes.td): marks every kiln.linear and
// kiln.logits over a GGML block-format weight with act_quant =
// "int8_per_block", the explicit recipe whose kernels
// (kiln_k_linear_blocks_a8) quantize the input per 32 elements and multiply
// in integers.
//
//===----------------------------------------------------------------------===//

#include "passes/Transforms/Passes.h"

namespace mlir::kiln {
#define GEN_PASS_DEF_QUANTIZEBLOCKACTIVATIONSPASS
#include "passes/Transforms/Passes.h.inc"

namespace {

/// A kiln.linear / kiln.logits over a block-format weight without
/// act_quant yet.
bool isUnquantizedBlockLinear(Operation *op) {
  if (auto l = dyn_cast<LinearOp>(op))
    return l.getFormat() && !l.getActQuant();
  if (auto l = dyn_cast<LogitsOp>(op))
    return l.getFormat() && !l.getActQuant();
  return false;
}

struct QuantizeBlockActivationsPass
    : impl::QuantizeBlockActivationsPassBase<QuantizeBlockActivationsPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (scheme == "none")
      return;
    if (scheme != "int8-per-block") {
      module.emitError() << "kiln-quantize-block-activations: unknown scheme '"
                         << scheme << "' (expected int8-per-block or none)";
      return signalPassFailure();
    }
    auto attr = StringAttr::get(&getContext(), "int8_per_block");
    for (func::FuncOp func : module.getOps<func::FuncOp>()) {
      if (func.isExternal())
        continue;
      if (func->hasAttr("kiln.arena_bytes")) {
        func.emitError() << "kiln-quantize-block-activations: '"
                         << func.getSymName()
                         << "' is already memory-planned; run this pass "
                            "before kiln-memory-plan";
        return signalPassFailure();
      }
      // Block-format weights always have f32 activations (the verifier).
      int64_t changed = 0;
      func.walk([&](Operation *op) {
        if (!isUnquantizedBlockLinear(op))
          return;
        op->setAttr("act_quant", attr);
        ++changed;
      });
      if (report)
        func.emitRemark() << "kiln-quantize-block-activations '"
                          << func.getSymName() << "': " << changed
                          << " block-format linears with int8 activations";
    }
  }
};

} // namespace
} // namespace mlir::kiln
