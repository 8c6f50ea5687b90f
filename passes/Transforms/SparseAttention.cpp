//===- SparseAttention.cpp - kiln-sparse-attention ------------------------===//
//
// Dynamic block-sparse prefill attention (Passes.td, SparseAttentionPass;
// docs/sparse-attention.md): sets `sparse = #kiln.sparse_attention<...>` on
// the prefill kiln.attention ops the sparse kernels serve. The selection
// itself happens at run time (kernel_abi.h kiln_k_attention_sparse), per
// (KV head, query block), from the keys the step actually sees.
//
//===----------------------------------------------------------------------===//

#include "passes/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"

#include <string>

namespace mlir::kiln {
#define GEN_PASS_DEF_SPARSEATTENTIONPASS
#include "passes/Transforms/Passes.h.inc"

namespace {

struct SparseAttentionPass final
    : impl::SparseAttentionPassBase<SparseAttentionPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    MLIRContext *ctx = &getContext();
    Builder b(ctx);
    // The options as the attribute; its verifier names what is wrong.
    auto fail = [&](const Twine &why) {
      module.emitError() << "kiln-sparse-attention: " << why;
      signalPassFailure();
    };
    if (mode != "flex")
      return fail("mode '" + mode + "' is not flex");
    // The attribute holds an f32: a gamma that rounds to 0 is refused too.
    if (!(gamma > 0.0 && gamma <= 1.0) || !(float(gamma) > 0.0f))
      return fail("gamma " + std::to_string(double(gamma)) +
                  " is not in (0, 1]");
    if (block < 1 || block > 4096)
      return fail("block " + Twine(int64_t(block)) +
                  " is not in [1, 4096] positions");
    if (sink < 0 || local < 1 || sink > (1 << 20) || local > (1 << 20))
      return fail("sink must be in [0, 1048576] and local in [1, 1048576] "
                  "blocks (1: the diagonal block), got sink " +
                  Twine(int64_t(sink)) + " and local " + Twine(int64_t(local)));
    if (minBudget < 0 || maxBudget < 0 || minTokens < 0)
      return fail("min-budget, max-budget and min-tokens must not be "
                  "negative");
    if (maxBudget > 0 && maxBudget < minBudget)
      return fail("max-budget " + Twine(int64_t(maxBudget)) +
                  " is below min-budget " + Twine(int64_t(minBudget)));
    auto attr = SparseAttentionAttr::get(
        ctx, mode, b.getF32FloatAttr(float(gamma)), block, sink, local,
        minBudget, maxBudget, minTokens);
    int64_t sparse = 0, dense = 0;
    for (func::FuncOp func : module.getOps<func::FuncOp>()) {
      if (func.isExternal())
        continue;
      if (func->hasAttr("kiln.arena_bytes")) {
        func.emitError() << "kiln-sparse-attention: '" << func.getSymName()
                         << "' is already memory-planned; run this pass "
                            "before kiln-memory-plan";
        return signalPassFailure();
      }
      func.walk([&](AttentionOp a) {
        // Prefill: the rows are the step's token count. Decode (one row)
        // and the batched step stay dense.
        auto query = cast<RankedTensorType>(a.getQuery().getType());
        if (!query.isDynamicDim(0) || a.isBatched())
          return;
        if (a.isCacheQuantized() || a.getKeyMean() || a.getSlidingWindow()) {
          ++dense;
          return;
        }
        a.setSparseAttr(attr);
        ++sparse;
      });
    }
    if (report)
      module.emitRemark() << "kiln-sparse-attention: " << sparse
                          << " attention ops sparse (gamma " << double(gamma)
                          << ", block " << int64_t(block) << "), " << dense
                          << " left dense (8-bit cache, sliding window or "
                             "key centering)";
  }
};

} // namespace
} // namespace mlir::kiln
