//===- MemoryPlan.cpp - liveness-based activation memory plan -------------===//
//
// Classic offline buffer assignment: live ranges from program order, then
// first-fit packing into one arena (as TFLite's "greedy by order" planner and
// XLA's heap simulator do in their simplest form).
//
//===----------------------------------------------------------------------===//

#include "passes/Transforms/Passes.h"

#include "llvm/Support/MathExtras.h"

namespace mlir::kiln {
#define GEN_PASS_DEF_MEMORYPLANPASS
#include "passes/Transforms/Passes.h.inc"

namespace {
struct MemoryPlanPass final : impl::MemoryPlanPassBase<MemoryPlanPass> {
  using Base::Base;
  void runOnOperation() override;
};

/// A planned buffer: [offset, offset + bytes) of the arena, live until the
/// op at index `lastUse` (inclusive).
struct LiveBuffer {
  int64_t offset;
  int64_t bytes;
  int64_t lastUse;
};
} // namespace

static constexpr int64_t kAlignment = 64;
/// Largest buffer and arena extent (bytes) the plan accepts.
static constexpr int64_t kMaxBytes = int64_t(1) << 48;

/// Lowest 64-aligned offset where `bytes` fit between the live blocks.
static int64_t firstFit(ArrayRef<LiveBuffer> live, int64_t bytes) {
  SmallVector<LiveBuffer> sorted(live.begin(), live.end());
  llvm::sort(sorted, [](const LiveBuffer &a, const LiveBuffer &b) {
    return a.offset < b.offset;
  });
  int64_t candidate = 0;
  for (const LiveBuffer &b : sorted) {
    if (candidate + bytes <= b.offset)
      return candidate;
    candidate = std::max<int64_t>(candidate, llvm::alignTo(b.offset + b.bytes, kAlignment));
  }
  return candidate;
}

void MemoryPlanPass::runOnOperation() {
  func::FuncOp func = getOperation();
  if (func.isExternal())
    return;
  MLIRContext *ctx = &getContext();
  if (maxTokens < 0 || maxTokens > (int64_t(1) << 24)) {
    func.emitError() << "max-tokens must be in [0, 16777216], got "
                     << static_cast<int64_t>(maxTokens);
    return signalPassFailure();
  }
  int64_t tokens = maxTokens;
  if (tokens <= 0) {
    if (auto attr = func->getAttrOfType<IntegerAttr>("kiln.max_tokens"))
      tokens = attr.getInt();
  }

  mlir::Block &body = func.getBody().front();
  DenseMap<Operation *, int64_t> index;
  for (auto [i, op] : llvm::enumerate(body))
    index[&op] = i;

  DenseSet<Value> returned;
  for (Value v : body.getTerminator()->getOperands())
    returned.insert(v);

  SmallVector<LiveBuffer> live;
  int64_t arenaBytes = 0, peakBytes = 0, liveBytes = 0, numBuffers = 0;
  for (auto [i, op] : llvm::enumerate(body)) {
    int64_t now = i;
    // Release buffers whose last use came before this op, so an op never
    // writes over its own inputs.
    for (LiveBuffer &b : live)
      if (b.lastUse < now)
        liveBytes -= b.bytes;
    llvm::erase_if(live, [&](const LiveBuffer &b) { return b.lastUse < now; });

    if (op.getNumResults() == 0 || isa<WeightRefOp>(op) ||
        op.getDialect() != ctx->getLoadedDialect<KilnDialect>())
      continue;
    // One buffer per result (a kiln.fused region may have several).
    SmallVector<int64_t> offsets;
    for (Value result : op.getResults()) {
      if (returned.contains(result)) {
        offsets.push_back(-1);
        continue;
      }
      auto type = dyn_cast<RankedTensorType>(result.getType());
      if (!type)
        continue;
      // Buffer size, refusing anything that overflows 2^48 bytes.
      int64_t bytes = llvm::divideCeil(type.getElementTypeBitWidth(), 8);
      for (int64_t d : type.getShape()) {
        if (ShapedType::isDynamic(d)) {
          if (tokens <= 0) {
            op.emitOpError() << "has a dynamic dimension but neither the "
                                "max-tokens option nor kiln.max_tokens on the "
                                "function bounds it";
            return signalPassFailure();
          }
          d = tokens;
        }
        if (d != 0 && bytes > kMaxBytes / d) {
          op.emitOpError() << "needs a buffer of more than 2^48 bytes for "
                           << type << " at " << tokens << " tokens";
          return signalPassFailure();
        }
        bytes *= d;
      }
      bytes = llvm::alignTo(bytes, kAlignment);
      int64_t lastUse = now;
      for (Operation *user : result.getUsers()) {
        Operation *top = body.findAncestorOpInBlock(*user);
        lastUse = std::max(lastUse, index.lookup(top));
      }
      int64_t offset = firstFit(live, bytes);
      if (offset > kMaxBytes - bytes) {
        op.emitOpError() << "would place a buffer of " << bytes
                         << " bytes at arena offset " << offset
                         << ", past 2^48 bytes";
        return signalPassFailure();
      }
      live.push_back({offset, bytes, lastUse});
      liveBytes += bytes;
      peakBytes = std::max(peakBytes, liveBytes);
      arenaBytes = std::max(arenaBytes, offset + bytes);
      ++numBuffers;
      offsets.push_back(offset);
    }
    if (isa<FusedOp>(op) || op.getNumResults() > 1)
      op.setAttr("kiln.buffer_offsets",
                 DenseI64ArrayAttr::get(ctx, offsets));
    else if (offsets.size() == 1 && offsets[0] >= 0)
      op.setAttr("kiln.buffer_offset",
                 IntegerAttr::get(IntegerType::get(ctx, 64), offsets[0]));
  }

  auto i64 = IntegerType::get(ctx, 64);
  func->setAttr("kiln.arena_bytes", IntegerAttr::get(i64, arenaBytes));
  func->setAttr("kiln.peak_activation_bytes", IntegerAttr::get(i64, peakBytes));
  if (report)
    func.emitRemark() << "memory plan for '" << func.getSymName() << "': "
                      << numBuffers << " buffers, peak activation bytes "
                      << peakBytes << ", arena bytes " << arenaBytes
                      << " (max tokens " << tokens << ")";
}

} // namespace mlir::kiln
