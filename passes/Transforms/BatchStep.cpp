//===- BatchStep.cpp - kiln-batch-step -------------------------------------===//
//
// Derives the batched step entry point @step from @prefill (Passes.td,
// BatchStepPass; docs/serving.md "Batched plan"): the position becomes the
// !kiln.batch, the contiguous KV cache the paged one, and the classifier
// reads the last row of every sequence.
//
//===----------------------------------------------------------------------===//

#include "passes/Transforms/Passes.h"
#include "dialects/Kiln/IR/PipelineStage.h"

#include "mlir/IR/Builders.h"

namespace mlir::kiln {
#define GEN_PASS_DEF_BATCHSTEPPASS
#include "passes/Transforms/Passes.h.inc"

namespace {
struct BatchStepPass final : impl::BatchStepPassBase<BatchStepPass> {
  using Base::Base;
  void runOnOperation() override;

private:
  /// Reports why `op` (or the module) cannot have a step: an error, or a
  /// remark with required=false. Returns failure() either way.
  LogicalResult unsupported(Operation *op, const Twine &why);
  bool refused = false;
};
} // namespace

LogicalResult BatchStepPass::unsupported(Operation *op, const Twine &why) {
  if (required) {
    op->emitError() << "kiln-batch-step: " << why;
    signalPassFailure();
  } else {
    op->emitRemark() << "kiln-batch-step: no batched step entry point: "
                     << why;
  }
  refused = true;
  return failure();
}

void BatchStepPass::runOnOperation() {
  ModuleOp module = getOperation();
  MLIRContext *ctx = &getContext();
  auto prefill = module.lookupSymbol<func::FuncOp>("prefill");
  if (!prefill || prefill.isExternal()) {
    (void)unsupported(module, "the module has no @prefill to derive @step from");
    return;
  }
  if (module.lookupSymbol("step")) {
    module.emitError() << "kiln-batch-step: the module already has a symbol "
                          "@step";
    return signalPassFailure();
  }
  FunctionType type = prefill.getFunctionType();
  auto cache = type.getNumInputs() == 3
                   ? dyn_cast<KVCacheType>(type.getInput(2))
                   : KVCacheType();
  auto logitsType = type.getNumResults() == 1
                        ? dyn_cast<RankedTensorType>(type.getResult(0))
                        : RankedTensorType();
  // A pipeline stage before the last (kiln-partition{pp}) returns nothing:
  // it ends with a kiln.send of the residual stream.
  std::optional<PipelineStage> stage = pipelineStageOf(module);
  const bool earlyStage =
      type.getNumResults() == 0 && stage && stage->isEarly();
  if (!cache || !isa<IndexType>(type.getInput(1)) ||
      (!earlyStage && (!logitsType || logitsType.getRank() != 2))) {
    (void)unsupported(prefill, "@prefill must take (tensor<?xi32>, index, "
                               "!kiln.kv_cache<...>) and return logits");
    return;
  }

  // What the batched kernels cover: per-row RoPE with plain frequencies,
  // no observers, nothing fused yet.
  WalkResult walk = prefill.walk([&](Operation *op) -> WalkResult {
    if (auto rope = dyn_cast<RopeOp>(op); rope && !rope.isUnscaled())
      return failed(unsupported(
                 op, "RoPE with scaled frequencies (scaling or freq_factors) "
                     "has no per-row batched kernel yet"))
                 ? WalkResult::interrupt()
                 : WalkResult::advance();
    if (isa<ObserveOp>(op))
      return failed(unsupported(op, "calibration graphs (kiln.observe) run "
                                    "one sequence at a time"))
                 ? WalkResult::interrupt()
                 : WalkResult::advance();
    if (isa<FusedOp>(op)) {
      op->emitError() << "kiln-batch-step: run before kiln-fuse (found a "
                         "kiln.fused region in @prefill)";
      signalPassFailure();
      refused = true;
      return WalkResult::interrupt();
    }
    return WalkResult::advance();
  });
  if (walk.wasInterrupted() || refused)
    return;

  auto step = cast<func::FuncOp>(prefill->clone());
  step.setSymName("step");
  module.getBody()->getOperations().insertAfter(prefill->getIterator(), step);
  Block &body = step.getBody().front();
  BlockArgument position = body.getArgument(1), kvCache = body.getArgument(2);
  for (OpOperand &use : position.getUses())
    if (!isa<RopeOp, AttentionOp>(use.getOwner())) {
      use.getOwner()->emitError()
          << "kiln-batch-step: the position is used by '"
          << use.getOwner()->getName()
          << "'; only kiln.rope and kiln.attention may take it";
      step.erase();
      return signalPassFailure();
    }
  // The paged step keeps prefill's sparse selection for its sequences'
  // multi-row chunks (kiln_k_step_attention_sparse); its one-row decode
  // rows run dense (the paged pools keep no key summaries).
  position.setType(BatchType::get(ctx));
  kvCache.setType(PagedKVCacheType::get(ctx, cache.getNumLayers(),
                                        cache.getNumKvHeads(),
                                        cache.getHeadDim(),
                                        cache.getElementType()));

  if (earlyStage) {
    step.setFunctionType(FunctionType::get(ctx, body.getArgumentTypes(), {}));
    return;
  }
  // The classifier: one row per sequence, taken before the final norm (a
  // per-row op) so that it normalizes only the sampled rows.
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  // A vocab-parallel classifier (kiln-partition) returns its logits through
  // a kiln.all_gather.
  auto gather = ret.getNumOperands() == 1
                    ? ret.getOperand(0).getDefiningOp<AllGatherOp>()
                    : AllGatherOp();
  auto logits =
      ret.getNumOperands() != 1 ? LogitsOp()
      : gather                  ? gather.getInput().getDefiningOp<LogitsOp>()
                                : ret.getOperand(0).getDefiningOp<LogitsOp>();
  if (!logits) {
    ret.emitError() << "kiln-batch-step: @prefill must return the result of "
                       "kiln.logits";
    step.erase();
    return signalPassFailure();
  }
  OpBuilder builder(logits);
  Value hidden = logits.getHidden();
  auto norm = hidden.getDefiningOp<RmsNormOp>();
  if (norm && norm->hasOneUse()) {
    builder.setInsertionPoint(norm);
    Value last = LastRowsOp::create(builder, norm.getLoc(),
                                    norm.getInput().getType(), norm.getInput(),
                                    position);
    norm.getInputMutable().assign(last);
  } else {
    Value last = LastRowsOp::create(builder, logits.getLoc(), hidden.getType(),
                                    hidden, position);
    logits.getHiddenMutable().assign(last);
  }
  auto rowsType = RankedTensorType::get(
      {ShapedType::kDynamic, logitsType.getDimSize(1)},
      logitsType.getElementType());
  logits.setAllRows(true);
  if (gather) {
    auto part = cast<RankedTensorType>(logits.getResult().getType());
    logits.getResult().setType(RankedTensorType::get(
        {ShapedType::kDynamic, part.getDimSize(1)}, part.getElementType()));
    gather.getResult().setType(rowsType);
  } else {
    logits.getResult().setType(rowsType);
  }
  step.setFunctionType(FunctionType::get(
      ctx, body.getArgumentTypes(), TypeRange{rowsType}));
}

} // namespace mlir::kiln
