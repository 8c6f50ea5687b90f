//===- SequenceParallel.cpp - kiln-sequence-parallel ----------------------===//
//
// Sequence parallelism over a tensor-parallel module (Passes.td,
// SequenceParallelPass; Korthikanti et al. 2022, section 4.2.2). Between the
// tensor-parallel regions the residual stream lives on the rank's shard of
// the tokens:
//
//   TP:  o = linear(a, wo)            SP:  o = linear(a, wo)
//        r = all_reduce(o)                 r = reduce_scatter(o)   [shard]
//        h1 = add(h0, r)                   h1 = add(h0s, r)        [shard]
//        x = rms_norm(h1, w)               xs = rms_norm(h1, w)    [shard]
//        q = linear(x, wq) ...             x = all_gather_rows(xs)
//                                          q = linear(x, wq) ...
//
// with h0s = all_slice(h0) where the stream starts. The rewrite is local:
// the sharded values are the results of the slices, reduce-scatters, adds
// of two sharded values and rms_norms of sharded values; every other use of
// one reads its (single) all_gather_rows.
//
//===----------------------------------------------------------------------===//

#include "passes/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Verifier.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SetVector.h"

#include <optional>
#include <utility>

namespace mlir::kiln {
#define GEN_PASS_DEF_SEQUENCEPARALLELPASS
#include "passes/Transforms/Passes.h.inc"

namespace {

/// min-tokens = 0: the split from this many rows (docs/parallelism.md,
/// "Sequence parallelism": below it the slice / gather copies cost more
/// than the norms they save on this machine's CPU ranks).
constexpr int64_t kDefaultMinTokens = 256;

struct SequenceParallelPass final
    : impl::SequenceParallelPassBase<SequenceParallelPass> {
  using Base::Base;
  void runOnOperation() override;

private:
  /// Rewrites one entry point; false when it has nothing to shard.
  bool rewrite(func::FuncOp func, int64_t groupSize, int64_t threshold);
  /// fuse-norm: reduce_scatter -> add -> rms_norm chains of `func` become
  /// kiln.reduce_scatter_add_rms_norm.
  void fuseNorms(func::FuncOp func);
  /// int8-gather: the all_gather_rows of `func` whose readers all quantize
  /// to int8 by one rule get it as wire_quant.
  void quantizeGathers(func::FuncOp func);
};

/// The int8 rule a reader of `v` applies to it (kiln.all_gather_rows
/// wire_quant), with the static scale for "int8_per_tensor"; std::nullopt
/// when the reader keeps its input in floating point.
std::optional<std::pair<StringRef, float>> readerQuantization(OpOperand &use) {
  Operation *user = use.getOwner();
  if (use.getOperandNumber() != 0)
    return std::nullopt;
  if (auto q = dyn_cast<QuantizedLinearOp>(user)) {
    if (!q.hasQuantizedActivations())
      return std::nullopt;
    StringRef mode = *q.getActQuant();
    if (mode == "int8_per_token")
      return std::make_pair(mode, 0.0f);
    if (mode == "int8_per_tensor" && q.getActScale())
      return std::make_pair(mode, q.getActScale()->convertToFloat());
    return std::nullopt;
  }
  std::optional<StringRef> blockMode;
  if (auto l = dyn_cast<LinearOp>(user))
    blockMode = l.getActQuant();
  else if (auto l = dyn_cast<LogitsOp>(user))
    blockMode = l.getActQuant();
  if (blockMode && *blockMode == "int8_per_block")
    return std::make_pair(*blockMode, 0.0f);
  return std::nullopt;
}

/// True for an activation whose rows are the entry point's token count.
bool hasTokenRows(Value v) {
  auto type = dyn_cast<RankedTensorType>(v.getType());
  return type && type.getRank() == 2 && type.isDynamicDim(0);
}

} // namespace

bool SequenceParallelPass::rewrite(func::FuncOp func, int64_t groupSize,
                                   int64_t threshold) {
  OpBuilder b(func.getContext());
  // The residual adds: the one user of an all-reduce of token rows.
  SmallVector<std::pair<AllReduceOp, AddOp>> sites;
  func.walk([&](AllReduceOp r) {
    if (!hasTokenRows(r.getResult()) || !r.getResult().hasOneUse())
      return;
    if (auto add = dyn_cast<AddOp>(*r.getResult().getUsers().begin()))
      sites.push_back({r, add});
  });
  if (sites.empty())
    return false;

  llvm::DenseSet<Value> sharded;
  llvm::DenseSet<Operation *> shardedAdds;
  for (auto [r, add] : sites)
    shardedAdds.insert(add);
  // all_reduce -> reduce_scatter, in place.
  for (auto [r, add] : sites) {
    b.setInsertionPoint(r);
    auto rs = ReduceScatterOp::create(b, r.getLoc(), r.getType(),
                                      r.getInput(), groupSize, threshold);
    r.getResult().replaceAllUsesWith(rs.getResult());
    r.erase();
    sharded.insert(rs.getResult());
  }
  // The stream entering an add that is not itself a sharded add's result:
  // sliced once where it is defined.
  llvm::DenseMap<Value, Value> slices;
  for (auto [r, add] : sites) {
    for (OpOperand &operand : add->getOpOperands()) {
      Value v = operand.get();
      if (sharded.contains(v))
        continue;
      Operation *def = v.getDefiningOp();
      if (def && shardedAdds.contains(def))
        continue;
      Value &slice = slices[v];
      if (!slice) {
        if (def)
          b.setInsertionPointAfter(def);
        else
          b.setInsertionPointToStart(&func.getBody().front());
        slice = AllSliceOp::create(b, v.getLoc(), v.getType(), v, groupSize,
                                   threshold)
                    .getResult();
        sharded.insert(slice);
        // The stream's norm (the first layer's attention_norm) runs on the
        // shard too.
        for (OpOperand &use : llvm::make_early_inc_range(v.getUses()))
          if (isa<RmsNormOp>(use.getOwner()) && use.getOperandNumber() == 0)
            use.set(slice);
      }
      operand.set(slice);
    }
  }
  for (Operation *add : shardedAdds)
    sharded.insert(add->getResult(0));
  // rms_norm of a sharded value runs on the shard (to a fixed point: a norm
  // of a norm is sharded too).
  bool grew = true;
  while (grew) {
    grew = false;
    func.walk([&](RmsNormOp n) {
      if (sharded.contains(n.getInput()) && sharded.insert(n.getResult()).second)
        grew = true;
    });
  }
  // Every other use of a sharded value reads it whole: one gather each.
  llvm::SetVector<Value> order;
  func.walk([&](Operation *op) {
    for (Value r : op->getResults())
      if (sharded.contains(r))
        order.insert(r);
  });
  for (Value v : order) {
    SmallVector<OpOperand *> outside;
    for (OpOperand &use : v.getUses()) {
      Operation *user = use.getOwner();
      bool onShard = (shardedAdds.contains(user)) ||
                     (isa<RmsNormOp>(user) &&
                      use.getOperandNumber() == 0 &&
                      sharded.contains(user->getResult(0)));
      if (!onShard)
        outside.push_back(&use);
    }
    if (outside.empty())
      continue;
    b.setInsertionPointAfterValue(v);
    auto gather = AllGatherRowsOp::create(
        b, v.getLoc(), v.getType(), v, groupSize, threshold,
        /*wire_quant=*/StringAttr(), /*wire_scale=*/FloatAttr());
    for (OpOperand *use : outside)
      use->set(gather.getResult());
  }
  return true;
}

void SequenceParallelPass::fuseNorms(func::FuncOp func) {
  SmallVector<ReduceScatterOp> scatters;
  func.walk([&](ReduceScatterOp r) { scatters.push_back(r); });
  for (ReduceScatterOp r : scatters) {
    if (!r.getResult().hasOneUse())
      continue;
    auto add = dyn_cast<AddOp>(*r.getResult().getUsers().begin());
    if (!add || add->getBlock() != r->getBlock())
      continue;
    Value residual =
        add.getLhs() == r.getResult() ? add.getRhs() : add.getLhs();
    // The norm of the sum, with every other use of the sum after it (the
    // fused op stands where the norm was).
    RmsNormOp norm;
    for (Operation *user : add.getResult().getUsers())
      if (auto n = dyn_cast<RmsNormOp>(user);
          n && n.getInput() == add.getResult() &&
          n->getBlock() == add->getBlock() &&
          (!norm || n->isBeforeInBlock(norm)))
        norm = n;
    if (!norm)
      continue;
    bool later = llvm::all_of(add.getResult().getUsers(), [&](Operation *u) {
      return u == norm || norm->isBeforeInBlock(u);
    });
    if (!later)
      continue;
    OpBuilder b(norm);
    auto fused = ReduceScatterAddRmsNormOp::create(
        b, norm.getLoc(), r.getType(), r.getType(), r.getInput(), residual,
        norm.getWeight(), r.getGroupSize(), r.getMinTokens(),
        norm.getEpsilon());
    add.getResult().replaceAllUsesWith(fused.getSum());
    norm.getResult().replaceAllUsesWith(fused.getNormed());
    norm.erase();
    add.erase();
    r.erase();
  }
}

void SequenceParallelPass::quantizeGathers(func::FuncOp func) {
  func.walk([&](AllGatherRowsOp g) {
    auto type = cast<RankedTensorType>(g.getResult().getType());
    if (!type.getElementType().isF32() || g.getResult().use_empty())
      return;
    std::optional<std::pair<StringRef, float>> rule;
    for (OpOperand &use : g.getResult().getUses()) {
      auto mine = readerQuantization(use);
      if (!mine || (rule && *rule != *mine))
        return;
      rule = mine;
    }
    if (rule->first == "int8_per_block" && type.getDimSize(1) % 32 != 0)
      return;
    Builder b(g.getContext());
    g.setWireQuantAttr(b.getStringAttr(rule->first));
    if (rule->first == "int8_per_tensor")
      g.setWireScaleAttr(b.getF32FloatAttr(rule->second));
  });
}

void SequenceParallelPass::runOnOperation() {
  ModuleOp module = getOperation();
  auto partition = module->getAttrOfType<DictionaryAttr>("kiln.partition");
  auto tpAttr = partition ? partition.getAs<IntegerAttr>("tp") : IntegerAttr();
  const int64_t tp = tpAttr ? tpAttr.getInt() : 1;
  if (tp < 2)
    return; // nothing is split across ranks
  const int64_t threshold = minTokens ? int64_t(minTokens) : kDefaultMinTokens;
  if (threshold < tp) {
    module.emitError() << "kiln-sequence-parallel: min-tokens (" << threshold
                       << ") must be at least the tensor-parallel group's "
                          "size ("
                       << tp << "): every rank needs a row of the sequence";
    return signalPassFailure();
  }
  if (partition.get("sequence_parallel_min_tokens")) {
    module.emitError()
        << "kiln-sequence-parallel: the module is already sequence-parallel";
    return signalPassFailure();
  }
  bool any = false;
  for (func::FuncOp func : module.getOps<func::FuncOp>()) {
    if (func.isExternal() || !rewrite(func, tp, threshold))
      continue;
    any = true;
    if (fuseNorm)
      fuseNorms(func);
    if (int8Gather)
      quantizeGathers(func);
  }
  if (!any)
    return;
  Builder b(&getContext());
  NamedAttrList entries(partition);
  entries.set("sequence_parallel_min_tokens", b.getI64IntegerAttr(threshold));
  module->setAttr("kiln.partition", entries.getDictionary(&getContext()));
  if (failed(verify(module)))
    return signalPassFailure();
}

} // namespace mlir::kiln
