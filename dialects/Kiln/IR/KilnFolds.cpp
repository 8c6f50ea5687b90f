//===- KilnFolds.cpp - kiln canonicalization patterns ---------------------===//
//
// Local, cheap, convergent rewrites (MLIR Canonicalization doc).
//
//===----------------------------------------------------------------------===//

#include "dialects/Kiln/IR/KilnOps.h"

#include "mlir/IR/PatternMatch.h"

using namespace mlir;
using namespace mlir::kiln;

namespace {
// mul(silu(gate), up) -> swiglu(gate, up): one pass over memory instead of
// two and no intermediate tensor (Shazeer 2020, eq. 6).
struct FuseSiluMulIntoSwiglu final : OpRewritePattern<MulOp> {
  using Base::Base;
  LogicalResult matchAndRewrite(MulOp op,
                                PatternRewriter &rewriter) const override {
    Value gate, up;
    if (auto silu = op.getLhs().getDefiningOp<SiluOp>()) {
      gate = silu.getInput();
      up = op.getRhs();
    } else if (auto silu = op.getRhs().getDefiningOp<SiluOp>()) {
      gate = silu.getInput();
      up = op.getLhs();
    } else {
      return rewriter.notifyMatchFailure(op, "no operand is a kiln.silu");
    }
    rewriter.replaceOpWithNewOp<SwigluOp>(op, op.getType(), gate, up);
    return success();
  }
};
} // namespace

void MulOp::getCanonicalizationPatterns(RewritePatternSet &results,
                                        MLIRContext *context) {
  results.add<FuseSiluMulIntoSwiglu>(context);
}
