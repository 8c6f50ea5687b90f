//===- QuantizeWeights.cpp - weight-only quantization (W8A16) -------------===//
//
// Edits only the weights' recipes and the ops that read them: the integer
// values and scales are produced when the artifact writer materializes the
// new weights, one tensor at a time.
//
//===----------------------------------------------------------------------===//

#include "passes/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "llvm/Support/MathExtras.h"

namespace mlir::kiln {
#define GEN_PASS_DEF_QUANTIZEWEIGHTSPASS
#include "passes/Transforms/Passes.h.inc"

namespace {
struct QuantizeWeightsPass final
    : impl::QuantizeWeightsPassBase<QuantizeWeightsPass> {
  using Base::Base;
  void runOnOperation() override;
};
} // namespace

/// Declares `@<weight>.<part>` after `weight`: the same source, the same
/// transforms plus a quantize step producing `part`.
static WeightOp declarePart(OpBuilder &builder, SymbolTable &symbols,
                            WeightOp weight, StringRef part, Type type,
                            int64_t bits, int64_t groupSize) {
  std::string name = (weight.getSymName() + "." + part).str();
  if (auto existing = symbols.lookup<WeightOp>(name))
    return existing;
  MLIRContext *ctx = builder.getContext();
  SmallVector<Attribute> transforms(weight.getTransforms().begin(),
                                    weight.getTransforms().end());
  transforms.push_back(WeightTransformAttr::get(
      ctx, "quantize",
      builder.getDictionaryAttr(
          {builder.getNamedAttr("bits", builder.getI64IntegerAttr(bits)),
           builder.getNamedAttr("group_size",
                                builder.getI64IntegerAttr(groupSize)),
           builder.getNamedAttr("part", builder.getStringAttr(part))})));
  builder.setInsertionPointAfter(weight);
  auto op = WeightOp::create(builder, weight.getLoc(), name,
                             cast<RankedTensorType>(type), weight.getSource(),
                             builder.getArrayAttr(transforms));
  symbols.insert(op);
  return op;
}

void QuantizeWeightsPass::runOnOperation() {
  ModuleOp module = getOperation();
  if (scheme != "w8a16" && scheme != "w4a16-rtn") {
    module.emitError() << "unsupported quantization scheme '" << scheme
                       << "' (implemented: w8a16, w4a16-rtn)";
    return signalPassFailure();
  }
  bool fourBit = scheme == "w4a16-rtn";
  if (fourBit && (this->groupSize <= 0 || this->groupSize % 2 != 0)) {
    module.emitError() << "unsupported group size "
                       << static_cast<int64_t>(this->groupSize)
                       << " for w4a16 (expected a positive even number, e.g. "
                          "32, 64 or 128)";
    return signalPassFailure();
  }
  const int64_t bits = fourBit ? 4 : 8;
  const int64_t groupSize = fourBit ? static_cast<int64_t>(this->groupSize) : 0;
  OpBuilder builder(&getContext());
  SymbolTable symbols(module);

  SmallVector<LinearOp> linears;
  module.walk([&](LinearOp op) { linears.push_back(op); });
  DenseSet<Operation *> touched;
  for (LinearOp linear : linears) {
    auto ref = linear.getWeight().getDefiningOp<WeightRefOp>();
    if (!ref)
      continue; // not a model weight: nothing to quantize ahead of time
    auto weight = symbols.lookup<WeightOp>(ref.getName());
    if (!weight)
      continue;
    RankedTensorType type = weight.getTensorType();
    if (!isa<FloatType>(type.getElementType()))
      continue;
    int64_t out = type.getDimSize(0), in = type.getDimSize(1);
    int64_t groups = fourBit ? llvm::divideCeil(in, groupSize) : 0;
    auto i8 = builder.getI8Type();
    auto qType = RankedTensorType::get(
        {out, fourBit ? llvm::divideCeilSigned(in, int64_t(2)) : in}, i8);
    auto sType = fourBit ? RankedTensorType::get({out, groups}, builder.getF32Type())
                         : RankedTensorType::get({out}, builder.getF32Type());
    auto zType = RankedTensorType::get({out, groups}, i8);
    // Each part is declared right after the original, so declaring them in
    // reverse makes the module read `w.qweight`, `w.scales`, `w.zeros`.
    WeightOp zeros = fourBit ? declarePart(builder, symbols, weight, "zeros",
                                           zType, bits, groupSize)
                             : WeightOp();
    WeightOp scales =
        declarePart(builder, symbols, weight, "scales", sType, bits, groupSize);
    WeightOp qweight =
        declarePart(builder, symbols, weight, "qweight", qType, bits, groupSize);
    builder.setInsertionPoint(linear);
    Value q = WeightRefOp::create(builder, ref.getLoc(), qType,
                                  qweight.getSymName());
    Value s = WeightRefOp::create(builder, ref.getLoc(), sType,
                                  scales.getSymName());
    Value z = fourBit ? Value(WeightRefOp::create(builder, ref.getLoc(), zType,
                                                  zeros.getSymName()))
                      : Value();
    auto quantized = QuantizedLinearOp::create(
        builder, linear.getLoc(), linear.getType(), linear.getInput(), q, s, z,
        builder.getI64IntegerAttr(bits), builder.getI64IntegerAttr(groupSize),
        /*act_quant=*/StringAttr(), /*act_scale=*/FloatAttr());
    linear.replaceAllUsesWith(quantized.getResult());
    linear.erase();
    if (ref->use_empty())
      ref.erase();
    touched.insert(weight);
  }
  // Originals that nothing reads any more are dropped from the model.
  for (Operation *op : touched)
    if (SymbolTable::symbolKnownUseEmpty(op, module))
      op->erase();
}

} // namespace mlir::kiln
