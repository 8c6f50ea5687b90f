//===- VerifyModel.cpp - model-level invariants ---------------------------===//
//
// Per-op verifiers check shapes locally; this pass checks what only the
// whole module shows: entry-point signatures, one KV-cache type, one
// attention per cache layer per function, no unused weights.
//
//===----------------------------------------------------------------------===//

#include "passes/Transforms/Passes.h"
#include "dialects/Kiln/IR/PipelineStage.h"

#include "llvm/ADT/SmallBitVector.h"

namespace mlir::kiln {
#define GEN_PASS_DEF_VERIFYMODELPASS
#include "passes/Transforms/Passes.h.inc"

namespace {
struct VerifyModelPass final : impl::VerifyModelPassBase<VerifyModelPass> {
  using Base::Base;
  void runOnOperation() override;
};
} // namespace

/// Checks `(tokens, index, kv_cache) -> tensor<1xVxf32>` and returns the
/// cache type, or null after emitting an error.
static KVCacheType verifyEntryPoint(func::FuncOp func) {
  FunctionType type = func.getFunctionType();
  auto tokens = type.getNumInputs() == 3
                    ? dyn_cast<RankedTensorType>(type.getInput(0))
                    : RankedTensorType();
  KVCacheType cache = type.getNumInputs() == 3
                          ? dyn_cast<KVCacheType>(type.getInput(2))
                          : KVCacheType();
  if (!tokens || tokens.getRank() != 1 ||
      !tokens.getElementType().isInteger(32) ||
      !isa<IndexType>(type.getInput(1)) || !cache) {
    func.emitOpError() << "entry point '" << func.getSymName()
                       << "' must take (tensor<?xi32>, index, "
                          "!kiln.kv_cache<...>), got "
                       << type;
    return {};
  }
  if (func.getSymName() == "decode" && tokens.getDimSize(0) != 1) {
    func.emitOpError() << "entry point 'decode' must take exactly one token, "
                          "got "
                       << tokens;
    return {};
  }
  // A pipeline stage before the last (kiln-partition{pp}) returns nothing:
  // the last stage returns the logits.
  if (std::optional<PipelineStage> stage = pipelineStageOf(func);
      stage && stage->isEarly()) {
    if (type.getNumResults() != 0) {
      func.emitOpError() << "entry point '" << func.getSymName()
                         << "' of pipeline stage " << stage->stage
                         << " (not the last) must return nothing, got "
                         << type;
      return {};
    }
    return cache;
  }
  auto result = type.getNumResults() == 1
                    ? dyn_cast<RankedTensorType>(type.getResult(0))
                    : RankedTensorType();
  if (!result || result.getRank() != 2 || result.getDimSize(0) != 1) {
    func.emitOpError() << "entry point '" << func.getSymName()
                       << "' must return the logits of one token "
                          "(tensor<1xVxf32>), got "
                       << type;
    return {};
  }
  return cache;
}

void VerifyModelPass::runOnOperation() {
  ModuleOp module = getOperation();
  KVCacheType cacheType;
  bool hasEntry = false;
  for (auto func : module.getOps<func::FuncOp>()) {
    if (func.getSymName() != "prefill" && func.getSymName() != "decode")
      continue;
    hasEntry = true;
    KVCacheType cache = verifyEntryPoint(func);
    if (!cache)
      return signalPassFailure();
    if (cacheType && cache != cacheType) {
      func.emitOpError() << "uses kv_cache type " << cache
                         << " but another entry point uses " << cacheType;
      return signalPassFailure();
    }
    cacheType = cache;

    llvm::SmallBitVector seen(cache.getNumLayers());
    WalkResult walk = func.walk([&](AttentionOp attention) {
      int64_t layer = attention.getLayer();
      if (seen.test(layer)) {
        attention.emitOpError() << "writes layer " << layer
                                << " of the kv_cache a second time in '"
                                << func.getSymName() << "'";
        return WalkResult::interrupt();
      }
      seen.set(layer);
      return WalkResult::advance();
    });
    if (walk.wasInterrupted())
      return signalPassFailure();
    if (!seen.all()) {
      func.emitOpError() << "'" << func.getSymName() << "' writes "
                         << seen.count() << " of the "
                         << cache.getNumLayers() << " kv_cache layers";
      return signalPassFailure();
    }
  }
  if (!hasEntry) {
    module.emitError() << "module has no 'prefill' or 'decode' entry point";
    return signalPassFailure();
  }
  for (auto weight : module.getOps<WeightOp>()) {
    if (SymbolTable::symbolKnownUseEmpty(weight, module)) {
      weight.emitOpError() << "'" << weight.getSymName()
                           << "' is never used";
      return signalPassFailure();
    }
  }
}

} // namespace mlir::kiln
