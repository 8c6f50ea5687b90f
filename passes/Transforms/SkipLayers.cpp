//===- SkipLayers.cpp - kiln-skip-layers -----------------------------------===//
//
// Removes decoder layers (Passes.td, SkipLayersPass): the self-draft of
// speculative decoding (docs/speculative.md).
//
//===----------------------------------------------------------------------===//

#include "passes/Transforms/Passes.h"

#include "mlir/Analysis/SliceAnalysis.h"
#include "mlir/IR/SymbolTable.h"

#include "llvm/ADT/SetVector.h"

#include <set>

namespace mlir::kiln {
#define GEN_PASS_DEF_SKIPLAYERSPASS
#include "passes/Transforms/Passes.h.inc"

namespace {
struct SkipLayersPass final : impl::SkipLayersPassBase<SkipLayersPass> {
  using Base::Base;
  void runOnOperation() override;
};

/// The rms_norm whose output the attention query is computed from (through
/// linears, column slices and RoPE), or null.
RmsNormOp queryNorm(AttentionOp attention) {
  Value v = attention.getQuery();
  for (int depth = 0; depth < 8 && v; ++depth) {
    Operation *def = v.getDefiningOp();
    if (!def)
      return {};
    if (auto norm = dyn_cast<RmsNormOp>(def))
      return norm;
    if (def->getNumOperands() == 0)
      return {};
    v = def->getOperand(0);
  }
  return {};
}

/// The kiln.add among `v`'s users whose other operand is derived from
/// `from` (its forward slice holds that operand's definition).
AddOp residualAdd(Value v, const llvm::SetVector<Operation *> &from) {
  for (Operation *user : v.getUsers()) {
    auto add = dyn_cast<AddOp>(user);
    if (!add)
      continue;
    Value other = add.getLhs() == v ? add.getRhs() : add.getLhs();
    if (Operation *def = other.getDefiningOp())
      if (from.contains(def))
        return add;
  }
  return {};
}

/// Removes layer `attention.getLayer()` from its function.
LogicalResult skipLayer(AttentionOp attention) {
  auto fail = [&](const Twine &why) {
    return attention.emitError()
           << "kiln-skip-layers: layer " << attention.getLayer() << ": "
           << why;
  };
  RmsNormOp norm = queryNorm(attention);
  if (!norm)
    return fail("no rms_norm feeds the attention query (expected a "
                "pre-norm decoder layer)");
  Value x = norm.getInput();
  // h = x + (attention block); out = h + (FFN block of rms_norm(h)).
  // `from`: the ops computed from `op` (itself included).
  auto addFrom = [](Operation *op, llvm::SetVector<Operation *> &from) {
    getForwardSlice(op, &from);
    from.insert(op);
  };
  llvm::SetVector<Operation *> afterAttention;
  addFrom(attention.getOperation(), afterAttention);
  AddOp mid = residualAdd(x, afterAttention);
  if (!mid)
    return fail("no residual add of the layer input and the attention "
                "output");
  Value h = mid.getResult();
  llvm::SetVector<Operation *> fromNorm;
  for (Operation *user : h.getUsers())
    if (isa<RmsNormOp>(user))
      addFrom(user, fromNorm);
  AddOp last = residualAdd(h, fromNorm);
  if (!last)
    return fail("no residual add of the mid-layer stream and the FFN "
                "output");
  Value out = last.getResult();
  // The layer's ops: what `out` depends on that `x` does not.
  llvm::SetVector<Operation *> layerOps, before;
  BackwardSliceOptions options;
  options.inclusive = true;
  options.omitBlockArguments = true;
  (void)getBackwardSlice(last.getOperation(), &layerOps, options);
  if (Operation *xDef = x.getDefiningOp())
    (void)getBackwardSlice(xDef, &before, options);
  out.replaceAllUsesWith(x);
  // Erase in reverse program order (users first); an op another layer
  // still uses (a shared weight_ref, the position) stays.
  std::vector<Operation *> doomed;
  for (Operation *op : layerOps)
    if (!before.contains(op))
      doomed.push_back(op);
  std::sort(doomed.begin(), doomed.end(), [](Operation *a, Operation *b) {
    return b->isBeforeInBlock(a);
  });
  for (Operation *op : doomed)
    if (op->use_empty())
      op->erase();
  return success();
}
} // namespace

void SkipLayersPass::runOnOperation() {
  ModuleOp module = getOperation();
  if (layers.empty())
    return;
  // The model's layers, from the entry points' attention ops.
  std::set<int64_t> present;
  module.walk([&](AttentionOp a) { present.insert(int64_t(a.getLayer())); });
  std::set<int64_t> skip;
  for (int64_t l : layers) {
    if (!present.count(l)) {
      module.emitError() << "kiln-skip-layers: layer " << l
                         << " is not a layer of the model (it has "
                         << present.size() << " layers, 0 to "
                         << (present.empty() ? 0 : *present.rbegin()) << ")";
      return signalPassFailure();
    }
    skip.insert(l);
  }
  if (skip.size() == present.size()) {
    module.emitError() << "kiln-skip-layers: every layer of the model is "
                          "listed; a draft needs at least one";
    return signalPassFailure();
  }
  std::vector<AttentionOp> targets;
  module.walk([&](AttentionOp a) {
    if (skip.count(int64_t(a.getLayer())))
      targets.push_back(a);
  });
  for (AttentionOp a : targets)
    if (failed(skipLayer(a)))
      return signalPassFailure();
  // Weights nothing reads any more.
  SymbolTable symbols(module);
  std::vector<WeightOp> unused;
  for (auto w : module.getOps<WeightOp>())
    if (SymbolTable::symbolKnownUseEmpty(w, module))
      unused.push_back(w);
  for (WeightOp w : unused)
    w.erase();
}

} // namespace mlir::kiln
