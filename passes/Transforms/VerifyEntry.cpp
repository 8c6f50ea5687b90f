//===- VerifyEntry.cpp - kiln-verify-entry ---------------------------------===//
//
// Derives the speculative-decoding verify entry point @verify from @prefill
// (Passes.td, VerifyEntryPass; docs/speculative.md): the same step, with the
// classifier applied to every row.
//
//===----------------------------------------------------------------------===//

#include "passes/Transforms/Passes.h"

#include "mlir/IR/Builders.h"

namespace mlir::kiln {
#define GEN_PASS_DEF_VERIFYENTRYPASS
#include "passes/Transforms/Passes.h.inc"

namespace {
struct VerifyEntryPass final : impl::VerifyEntryPassBase<VerifyEntryPass> {
  using Base::Base;
  void runOnOperation() override;
};
} // namespace

void VerifyEntryPass::runOnOperation() {
  ModuleOp module = getOperation();
  MLIRContext *ctx = &getContext();
  auto prefill = module.lookupSymbol<func::FuncOp>("prefill");
  if (!prefill || prefill.isExternal()) {
    module.emitError() << "kiln-verify-entry: the module has no @prefill to "
                          "derive @verify from";
    return signalPassFailure();
  }
  if (module.lookupSymbol("verify")) {
    module.emitError() << "kiln-verify-entry: the module already has a "
                          "symbol @verify";
    return signalPassFailure();
  }
  FunctionType type = prefill.getFunctionType();
  auto logitsType = type.getNumResults() == 1
                        ? dyn_cast<RankedTensorType>(type.getResult(0))
                        : RankedTensorType();
  if (!logitsType || logitsType.getRank() != 2) {
    prefill.emitError() << "kiln-verify-entry: @prefill must return the "
                           "logits (a pipeline stage before the last has "
                           "no verify step of its own)";
    return signalPassFailure();
  }
  auto ret = cast<func::ReturnOp>(prefill.getBody().front().getTerminator());
  // A vocab-parallel classifier (kiln-partition) returns its logits through
  // a kiln.all_gather.
  auto gather = ret.getOperand(0).getDefiningOp<AllGatherOp>();
  auto logits = gather ? gather.getInput().getDefiningOp<LogitsOp>()
                       : ret.getOperand(0).getDefiningOp<LogitsOp>();
  if (!logits) {
    ret.emitError() << "kiln-verify-entry: @prefill must return the result "
                       "of kiln.logits";
    return signalPassFailure();
  }
  // Verify rows must be the logits decode would give: a sparse selection
  // over the verify chunk (or Quest's pages) would change them.
  AttentionOp sparse;
  prefill.walk([&](AttentionOp a) {
    if (a.getSparseAttr() && !sparse)
      sparse = a;
  });
  if (sparse) {
    sparse.emitError() << "kiln-verify-entry: @prefill's attention is "
                          "sparse (kiln-sparse-attention); the verify step "
                          "would select blocks where decode does not, and "
                          "speculation would change the output: not built "
                          "yet";
    return signalPassFailure();
  }
  if (logits.getAllRows()) {
    logits.emitError() << "kiln-verify-entry: @prefill's kiln.logits "
                          "already classifies every row";
    return signalPassFailure();
  }

  auto verify = cast<func::FuncOp>(prefill->clone());
  verify.setSymName("verify");
  module.getBody()->getOperations().insertAfter(prefill->getIterator(),
                                                verify);
  Block &body = verify.getBody().front();
  auto vret = cast<func::ReturnOp>(body.getTerminator());
  auto vgather = vret.getOperand(0).getDefiningOp<AllGatherOp>();
  auto vlogits = vgather ? vgather.getInput().getDefiningOp<LogitsOp>()
                         : vret.getOperand(0).getDefiningOp<LogitsOp>();
  auto rowsType = RankedTensorType::get(
      {ShapedType::kDynamic, logitsType.getDimSize(1)},
      logitsType.getElementType());
  vlogits.setAllRows(true);
  if (vgather) {
    auto part = cast<RankedTensorType>(vlogits.getResult().getType());
    vlogits.getResult().setType(RankedTensorType::get(
        {ShapedType::kDynamic, part.getDimSize(1)}, part.getElementType()));
    vgather.getResult().setType(rowsType);
  } else {
    vlogits.getResult().setType(rowsType);
  }
  verify.setFunctionType(
      FunctionType::get(ctx, body.getArgumentTypes(), TypeRange{rowsType}));
}

} // namespace mlir::kiln
